"""PyTorch models for the tests, built with random weights and exported to ONNX by either exporter:
Hugging Face ``transformers`` models from small configs (``hf``), torchvision and timm image
models (``vision``), and what ``export`` needs. A case skips where its package is not installed.
Nothing is downloaded."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

FULL_SIZE = ("swin", "levit", "maxvit")  # models whose windows or stages need 224 x 224 images


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def hf(name: str):
    transformers = pytest.importorskip("transformers")
    small_text = {"vocab_size": 100, "max_position_embeddings": 130, **SMALL}
    return {
        "bert": lambda: transformers.BertModel(transformers.BertConfig(**small_text)),
        "distilbert": lambda: transformers.DistilBertModel(transformers.DistilBertConfig(
            vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=128)),
        "roberta": lambda: transformers.RobertaModel(transformers.RobertaConfig(**small_text)),
        "gpt2": lambda: transformers.GPT2Model(transformers.GPT2Config(
            vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=128, use_cache=False, bos_token_id=0,
            eos_token_id=0)),
        "vit": lambda: transformers.ViTModel(transformers.ViTConfig(image_size=32, patch_size=8, **SMALL)),
        "t5_encoder": lambda: transformers.T5EncoderModel(transformers.T5Config(
            vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)),
        "whisper_encoder": lambda: transformers.WhisperModel(transformers.WhisperConfig(
            d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=16,
            max_source_positions=64, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64, vocab_size=100,
            pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)).encoder,
        "wav2vec2": lambda: transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2, vocab_size=32, **SMALL)),
    }[name]()


def vision(name: str):
    """``torchvision:NAME`` (``weights=None``) or ``timm:NAME`` (``pretrained=False``), in eval mode,
    its weights seeded."""
    library, model = name.split(":")
    torch.manual_seed(0)
    if library == "torchvision":
        models = pytest.importorskip("torchvision.models")
        return getattr(models, model)(weights=None).eval()
    timm = pytest.importorskip("timm")
    return timm.create_model(model, pretrained=False).eval()


class LastHidden(torch.nn.Module):
    """The model's main output as one tensor (``last_hidden_state`` for transformers models, ``out``
    for torchvision's segmentation models)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x)
        if isinstance(out, dict) and "out" in out:
            return out["out"]
        return getattr(out, "last_hidden_state", out)


def example(kind: str, name: str, batch: int = 2, seq: int = 32) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    if kind == "ids":
        return rng.integers(0, 100, (batch, seq)).astype(np.int64)
    if kind == "mel":
        return rng.standard_normal((batch, 16, 128)).astype(np.float32)
    if kind == "audio":
        return rng.standard_normal((batch, 50 * seq)).astype(np.float32)
    size = 32 if name == "vit" else 224 if any(n in name for n in FULL_SIZE) else 64
    return rng.standard_normal((batch, 3, size, size)).astype(np.float32)


def export(module, x: np.ndarray, dynamo: bool, tmp_path: Path, dynamic: bool) -> str:
    """Writes the ONNX file (dynamo: weights in model.onnx.data) and returns its path."""
    path = tmp_path / "model.onnx"
    sample = (torch.from_numpy(x),)
    with warnings.catch_warnings(), torch.no_grad(), exporter_limits():
        warnings.simplefilter("ignore")
        if dynamo:
            dims = {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("seq", max=4096)}
            shapes = {"x": dims} if dynamic else None
            torch.onnx.export(module, sample, str(path), input_names=["x"], output_names=["y"], dynamo=True,
                              opset_version=18, external_data=True, dynamic_shapes=shapes)
        else:
            axes = {"x": {0: "batch", 1: "seq"}} if dynamic else None
            buffer = io.BytesIO()
            torch.onnx.export(module, sample, buffer, input_names=["x"], output_names=["y"], dynamo=False,
                              opset_version=17, dynamic_axes=axes)
            path.write_bytes(buffer.getvalue())
    return str(path)


@contextlib.contextmanager
def exporter_limits():
    """Skips a case that the exporter itself cannot export (not a Delite limitation)."""
    try:
        yield
    except torch.onnx.errors.UnsupportedOperatorError as exc:
        pytest.skip(f"the exporter cannot export this model: {exc}")
