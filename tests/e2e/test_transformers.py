"""Transformers and vision models (Hugging Face, timm, torchvision classification and segmentation)
exported with random weights by both PyTorch exporters,
converted, and run natively against onnxruntime (relative L2 1e-4); the text and audio encoders
also after the batch goes 1 -> 3 and the sequence 32 -> 64 without a rebuild.

Hugging Face ``transformers`` models are built from small configs, timm models with
``pretrained=False``, torchvision models with ``weights=None``; a case skips when its package is
not installed or does not import beside the installed torch. Nothing is downloaded.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

import lite
from lite.tools.converter import convert
from tests.support.e2e import REL_L2
from tests.support.oracle import relative_l2, run_onnxruntime
from tests.support.torch_models import LastHidden, example, export, hf

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


@dataclass(frozen=True)
class Spec:
    build: str  # a function name below
    kind: str  # ids | image | mel | audio
    resizes: bool = True  # batch and sequence dims are dynamic

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
