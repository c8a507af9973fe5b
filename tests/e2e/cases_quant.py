"""QuantizeLinear / DequantizeLinear: per tensor and per axis, scales from initializers."""

from __future__ import annotations

import numpy as np

from tests.e2e.cases import Arr, F, case

_S, _Z = np.float32(0.02), np.int8(-5)
_AXIS_S, _AXIS_Z = np.array([0.01, 0.02, 0.05], np.float32), np.array([3, 0, 250], np.uint8)

for opset in (10, 13, 19, 21):
    case("QuantizeLinear", {"x": F("N", 3, 4, scale=2)}, opset, "int8", inits={"s": _S, "z": _Z},
         names=["x", "s", "z"], batches=(1, 3))
    case("DequantizeLinear", {"x": Arr(("N", 3, 4), np.int8, "integers", -128, 128)}, opset, "int8",
         inits={"s": _S, "z": _Z}, names=["x", "s", "z"], batches=(1, 3))
for opset in (13, 21):
    case("QuantizeLinear", {"x": F(2, 3, 4, scale=2)}, opset, "per-axis-uint8",
         inits={"s": _AXIS_S, "z": _AXIS_Z}, names=["x", "s", "z"], axis=1)
    case("DequantizeLinear", {"x": Arr((2, 3, 4), np.uint8, "integers", 0, 256)}, opset, "per-axis-uint8",
         inits={"s": _AXIS_S, "z": _AXIS_Z}, names=["x", "s", "z"], axis=1)

# dynamic quantization (onnxruntime's quantize_dynamic): a float input quantized at run time, integer products
case("DynamicQuantizeLinear", {"x": F("N", 3, 4, scale=2)}, 11, n_out=3, batches=(1, 3))
_W = np.random.default_rng(11).integers(-128, 128, (4, 5)).astype(np.int8)
case("MatMulInteger", {"a": Arr(("N", 4), np.uint8, "integers", 0, 256)}, 10, "uint8-int8",
     inits={"b": _W, "a_zp": np.uint8(131), "b_zp": np.int8(-2)}, names=["a", "b", "a_zp", "b_zp"], batches=(1, 3))
_CW = np.random.default_rng(12).integers(-128, 128, (6, 3, 3, 3)).astype(np.int8)
case("ConvInteger", {"x": Arr(("N", 3, 7, 7), np.uint8, "integers", 0, 256)}, 10, "padded",
     inits={"w": _CW, "x_zp": np.uint8(120)}, names=["x", "w", "x_zp"], pads=[1, 1, 1, 1], batches=(1, 2))
