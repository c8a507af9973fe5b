"""A BERT-style transformer encoder in plain torch modules, exported with a dynamic batch and
sequence length: the whole-model case for the transformer ops, fusions and delegates as PyTorch's
TorchScript exporter writes them (``lite.tools.zoo.bert_encoder`` builds the same layers without torch)."""

from __future__ import annotations

import io

import onnx


def encoder(torch, layers: int = 2, width: int = 64, heads: int = 4):
    """Post-norm encoder blocks with seed-0 random weights, in eval mode."""
    nn = torch.nn

    class SelfAttention(nn.Module):
        """Multi-head self-attention over (batch, seq, width): one QKV projection, scaled dot product."""

        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

        def forward(self, x):
            batch, seq, _ = x.shape
            head = width // heads
            q, k, v = self.qkv(x).reshape(batch, seq, 3, heads, head).permute(2, 0, 3, 1, 4)
            scores = torch.softmax(q @ k.transpose(-1, -2) / head**0.5, dim=-1)
            return self.out((scores @ v).transpose(1, 2).reshape(batch, seq, width))

    class EncoderBlock(nn.Module):
        """Post-norm transformer block: LayerNorm(x + attention), then LayerNorm(x + GELU feed-forward)."""

        def __init__(self):
            super().__init__()
            self.attention, self.norm1, self.norm2 = SelfAttention(), nn.LayerNorm(width), nn.LayerNorm(width)
            self.feed_forward = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            x = self.norm1(x + self.attention(x))
            return self.norm2(x + self.feed_forward(x))

    torch.manual_seed(0)
    return nn.Sequential(*[EncoderBlock() for _ in range(layers)]).eval()


def export_encoder(torch, opset: int = 14, seq: int = 32, **sizes) -> onnx.ModelProto:
    """The encoder exported by the TorchScript exporter; input "x" (batch, seq, width), both dynamic."""
    module = encoder(torch, **sizes)
    buffer = io.BytesIO()
    width = sizes.get("width", 64)
    with torch.no_grad():
        torch.onnx.export(module, (torch.randn(2, seq, width),), buffer, input_names=["x"], output_names=["y"],
                          opset_version=opset, dynamo=False, dynamic_axes={"x": {0: "batch", 1: "seq"}})
    return onnx.load_from_string(buffer.getvalue())
