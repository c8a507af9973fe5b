"""Transformers and vision models (Hugging Face, timm, torchvision classification and segmentation)
exported with random weights by both PyTorch exporters,
converted, and run natively against onnxruntime (relative L2 1e-4); the text and audio encoders
also after the batch goes 1 -> 3 and the sequence 32 -> 64 without a rebuild.

Hugging Face ``transformers`` models are built from small configs, timm models with
``pretrained=False``, torchvision models with ``weights=None``; a case skips when its package is
not installed or does not import beside the installed torch. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

import lite
from lite.tools.converter import convert
from tests.support.e2e import REL_L2
from tests.support.oracle import relative_l2, run_onnxruntime

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


@dataclass(frozen=True)
class Spec:
    build: str  # a function name below
    kind: str  # ids | image | mel | audio
    resizes: bool = True  # batch and sequence dims are dynamic


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


def timm_model(name: str):
    try:
        import timm
    except Exception as exc:  # noqa: BLE001 - a torchvision build that does not match torch fails at import
        pytest.skip(f"timm cannot be imported here: {type(exc).__name__}: {exc}")
    return timm.create_model(name, pretrained=False, num_classes=10)


TORCHVISION_KWARGS = {"vit_b_16": {"image_size": 64}}  # a smaller image: 16 patches instead of 196


def torchvision_model(name: str):
    """A torchvision classifier (10 classes) or segmentation model (5 classes, ``segmentation.<name>``)."""
    try:
        from torchvision import models
    except Exception as exc:  # noqa: BLE001 - a torchvision build that does not match torch fails at import
        pytest.skip(f"torchvision cannot be imported here: {type(exc).__name__}: {exc}")
    name = name.removeprefix("tv_")
    if name.startswith("segmentation."):
        build = getattr(models.segmentation, name.removeprefix("segmentation."))
        return build(weights=None, weights_backbone=None, num_classes=5, aux_loss=False)
    return getattr(models, name)(weights=None, num_classes=10, **TORCHVISION_KWARGS.get(name, {}))


def convnext_blocks():
    """Two ConvNeXt blocks in plain torch (depthwise 7x7 conv, channels-last LayerNorm, GELU MLP,
    layer scale, residual): the ConvNeXt pattern where timm is not installable."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, width: int = 16) -> None:
            super().__init__()
            self.dwconv = nn.Conv2d(width, width, 7, padding=3, groups=width)
            self.norm = nn.LayerNorm(width, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            self.gamma = nn.Parameter(torch.full((width,), 0.5))

        def forward(self, x):
            y = self.mlp(self.norm(self.dwconv(x).permute(0, 2, 3, 1))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    stem = nn.Conv2d(3, 16, 4, stride=4)
    return nn.Sequential(stem, Block(), Block())


MODELS = {
    "bert": Spec("hf", "ids"), "distilbert": Spec("hf", "ids"), "roberta": Spec("hf", "ids"),
    "gpt2": Spec("hf", "ids"), "t5_encoder": Spec("hf", "ids"), "vit": Spec("hf", "image", resizes=False),
    "whisper_encoder": Spec("hf", "mel", resizes=False), "wav2vec2": Spec("hf", "audio"),
    "convnext_blocks": Spec("plain", "image", resizes=False),
    "convnext_atto": Spec("timm", "image", resizes=False), "efficientnet_b0": Spec("timm", "image", resizes=False),
    "mobilevit_xxs": Spec("timm", "image", resizes=False), "levit_128s": Spec("timm", "image", resizes=False),
    "swin_tiny_patch4_window7_224": Spec("timm", "image", resizes=False),
    **{f"tv_{name}": Spec("torchvision", "image", resizes=False) for name in (
        "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x1_0", "convnext_tiny",
        "swin_t", "vit_b_16", "maxvit_t", "segmentation.lraspp_mobilenet_v3_large",
        "segmentation.deeplabv3_mobilenet_v3_large", "segmentation.fcn_resnet50")},
}
FULL_SIZE = ("swin", "levit", "maxvit")  # models whose windows or stages need 224 x 224 images


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


def predict_and_compare(model: lite.Model, onnx_path: str, x: np.ndarray) -> None:
    onnx_model = onnx.load(onnx_path)
    if tuple(model.get_inputs()[0].shape) != x.shape:
        model.resize(model.get_inputs(), [list(x.shape)])
    [y] = model.predict([x])
    [expected] = run_onnxruntime(onnx_model, {onnx_model.graph.input[0].name: x})[:1]
    got = y.get_data_to_numpy()
    assert got.shape == expected.shape
    assert relative_l2(got, expected) <= REL_L2, f"{x.shape}: relative L2 {relative_l2(got, expected):.3g}"


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, dynamo, tmp_path, monkeypatch):
    spec = MODELS[name]
    build = {"hf": hf, "timm": timm_model, "torchvision": torchvision_model,
             "plain": lambda _: convnext_blocks()}[spec.build]
    module = LastHidden(build(name).eval()).eval()
    x = example(spec.kind, name)
    path = export(module, x, dynamo, tmp_path, spec.resizes)
    monkeypatch.chdir("/")  # external data resolves against the model's folder, not the working dir
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=2))
    predict_and_compare(model, path, x)
    if spec.resizes:
        predict_and_compare(model, path, example(spec.kind, name, batch=1))
        predict_and_compare(model, path, example(spec.kind, name, batch=3))
        predict_and_compare(model, path, example(spec.kind, name, batch=3, seq=64))


def test_the_bert_style_encoder_resizes_without_a_rebuild():
    from tests.support.encoder import export_encoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_model = export_encoder(torch)
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=2))
    rng = np.random.default_rng(3)
    for shape in ([1, 32, 64], [3, 32, 64], [3, 64, 64]):
        x = rng.standard_normal(shape).astype(np.float32)
        if list(model.get_inputs()[0].shape) != shape:
            model.resize(model.get_inputs(), [shape])
        [y] = model.predict([x])
        assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(onnx_model, {"x": x})[0]) <= REL_L2
