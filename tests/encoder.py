"""A BERT-style transformer encoder in plain torch modules, exported with a dynamic batch and
sequence length: the whole-model case for the transformer ops, fusions and delegates."""

from __future__ import annotations

import io

import onnx


def encoder(torch, layers: int = 2, width: int = 64, heads: int = 4):
    """Post-norm encoder blocks (``lite.tools.zoo_nets.transformer_encoder``) with seed-0 random weights."""
    from lite.tools import zoo_nets

    torch.manual_seed(0)
    return zoo_nets.transformer_encoder(layers, width, heads, 4 * width).eval()


def export_encoder(torch, opset: int = 14, seq: int = 32, **sizes) -> onnx.ModelProto:
    """The encoder exported by the TorchScript exporter; input "x" (batch, seq, width), both dynamic."""
    module = encoder(torch, **sizes)
    buffer = io.BytesIO()
    width = sizes.get("width", 64)
    with torch.no_grad():
        torch.onnx.export(module, (torch.randn(2, seq, width),), buffer, input_names=["x"], output_names=["y"],
                          opset_version=opset, dynamo=False, dynamic_axes={"x": {0: "batch", 1: "seq"}})
    return onnx.load_from_string(buffer.getvalue())
