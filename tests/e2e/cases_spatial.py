"""E2E cases: 1-D and 3-D convolution and pooling, Resize modes."""

from __future__ import annotations

import numpy as np

from tests.e2e.cases import Arr, F, case, f32, graph_case, i64, n, w

# Convolution of 1 and 3 spatial axes (Whisper's and Wav2Vec2's audio front ends are 1-D)
X1 = F(2, 4, 23)
case("Conv", {"x": X1}, 11, "1d-k3-pad1-bias", {"w": w(6, 4, 3), "b": w(6)}, pads=[1, 1])
case("Conv", {"x": X1}, 11, "1d-k3-stride2-pad1", {"w": w(6, 4, 3)}, pads=[1, 1], strides=[2])
case("Conv", {"x": X1}, 11, "1d-k10-stride5", {"w": w(5, 4, 10), "b": w(5)}, strides=[5])
case("Conv", {"x": X1}, 11, "1d-grouped-dilated", {"w": w(8, 2, 5)}, group=2, dilations=[2], pads=[4, 4])
case("Conv", {"x": X1}, 11, "1d-depthwise", {"w": w(4, 1, 5), "b": w(4)}, group=4, pads=[2, 2])
case("Conv", {"x": X1}, 11, "1d-depthwise-x2-same", {"w": w(8, 1, 4)}, group=4, auto_pad="SAME_UPPER", strides=[2])
case("Conv", {"x": X1}, 11, "1d-pointwise", {"w": w(3, 4, 1)})
case("Conv", {"x": F("N", 4, 17)}, 13, "1d-dyn", {"w": w(6, 4, 3), "b": w(6)}, pads=[1, 1], batches=(1, 3))
case("Conv", {"x": F(1, 4, "L")}, 13, "1d-dyn-length-same", {"w": w(6, 4, 3)}, auto_pad="SAME_LOWER", strides=[2],
     batches=(9, 16))
X3 = F(1, 3, 6, 7, 8)
case("Conv", {"x": X3}, 11, "3d-k3-pad1-bias", {"w": w(4, 3, 3, 3, 3), "b": w(4)}, pads=[1] * 6)
case("Conv", {"x": X3}, 11, "3d-stride-asym", {"w": w(4, 3, 2, 3, 2)}, strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])
case("Conv", {"x": F(2, 4, 5, 6, 5)}, 11, "3d-grouped-dilated", {"w": w(6, 2, 2, 2, 2)}, group=2,
     dilations=[2, 1, 2])
case("Conv", {"x": F(1, 4, 5, 6, 5)}, 11, "3d-depthwise-same", {"w": w(4, 1, 3, 3, 3)}, group=4,
     auto_pad="SAME_UPPER")
case("ConvTranspose", {"x": F(2, 4, 9)}, 11, "1d-stride2", {"w": w(4, 3, 4), "b": w(3)}, strides=[2], pads=[1, 1])
case("ConvTranspose", {"x": F(1, 4, 7)}, 11, "1d-group2-outpad", {"w": w(4, 2, 3)}, group=2, strides=[3],
     output_padding=[2])
case("ConvTranspose", {"x": F(1, 2, 3, 4, 3)}, 11, "3d-stride2", {"w": w(2, 3, 3, 3, 3), "b": w(3)},
     strides=[2, 2, 2], pads=[1, 0, 1, 0, 1, 1])
case("ConvTranspose", {"x": F(1, 2, 5)}, 11, "1d-output-shape-beyond-taps", {"w": w(2, 3, 3)}, strides=[2],
     output_shape=[12])

# Pooling of 1 and 3 spatial axes, MaxPool's indices, integer max pools
P1, P3 = F(2, 3, 17), F(1, 2, 7, 8, 9)
case("MaxPool", {"x": P1}, 12, "1d-k3s2-pads", kernel_shape=[3], strides=[2], pads=[1, 1])
case("MaxPool", {"x": P1}, 12, "1d-dilated-ceil", kernel_shape=[3], strides=[3], dilations=[2], ceil_mode=1)
case("MaxPool", {"x": P3}, 12, "3d-k2s2", kernel_shape=[2, 2, 2], strides=[2, 2, 2])
case("MaxPool", {"x": P3}, 12, "3d-dilated", kernel_shape=[2, 3, 2], dilations=[2, 1, 2], pads=[1, 1, 0, 1, 1, 1])
case("MaxPool", {"x": Arr((2, 3, 7, 9), kind="round")}, 12, "indices", n_out=2, kernel_shape=[3, 3], strides=[2, 2],
     pads=[1, 1, 1, 1])
case("MaxPool", {"x": Arr((1, 2, 11), kind="round")}, 12, "1d-indices-ceil", n_out=2, kernel_shape=[3],
     strides=[2], ceil_mode=1)
case("MaxPool", {"x": Arr((1, 3, 8, 8), np.uint8, "integers", 0, 255)}, 12, "uint8", kernel_shape=[3, 3],
     strides=[2, 2], pads=[1, 1, 1, 1])
case("MaxPool", {"x": Arr((1, 3, 9), np.int8, "integers", -128, 127)}, 12, "1d-int8-pads", kernel_shape=[2],
     pads=[1, 1])
for include in (0, 1):
    case("AveragePool", {"x": P1}, 11, f"1d-pads-include{include}", kernel_shape=[4], strides=[3], pads=[2, 1],
         count_include_pad=include)
    case("AveragePool", {"x": P3}, 11, f"3d-ceil-include{include}", kernel_shape=[3, 2, 3], strides=[2, 2, 2],
         pads=[1, 0, 1, 1, 1, 0], ceil_mode=1, count_include_pad=include)
case("AveragePool", {"x": P3}, 11, "3d-same-lower", kernel_shape=[2, 3, 2], strides=[2, 2, 2], auto_pad="SAME_LOWER")
case("AveragePool", {"x": F("N", 3, 10)}, 11, "1d-dyn", kernel_shape=[3], strides=[2], batches=(1, 3))
for tag, shape in (("1d", (2, 3, 7)), ("3d", (2, 3, 4, 5, 3))):
    case("GlobalAveragePool", {"x": F(*shape)}, 11, tag)
    case("GlobalMaxPool", {"x": F(*shape)}, 11, tag)

# Resize: cubic, tf_crop_and_resize, half_pixel_symmetric, 5-D, keep_aspect_ratio_policy
XR = F(1, 3, 6, 7)
for ctm in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
    case("Resize", {"x": XR}, 13, f"cubic-{ctm}", {"sc": f32(1, 1, 1.5, 0.7)}, names=["x", "", "sc"], mode="cubic",
         coordinate_transformation_mode=ctm)
case("Resize", {"x": XR}, 13, "cubic-a-exclude-sizes", {"sz": i64(1, 3, 11, 4)}, names=["x", "", "", "sz"],
     mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
case("Resize", {"x": XR}, 11, "cubic-opset11-down", {"roi": np.zeros(0, np.float32), "sc": f32(1, 1, 0.5, 0.5)},
     mode="cubic")
ROI = f32(0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1)
for mode in ("nearest", "linear", "cubic"):
    case("Resize", {"x": XR}, 13, f"tf-crop-{mode}", {"roi": ROI, "sz": i64(1, 3, 5, 9)}, names=["x", "roi", "", "sz"],
         mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-2.0)
# A roi computed at run time: batch and channels whole ([0, 1]), height and width from the input r.
graph_case("tf-crop-computed-roi", ("Resize", "Mul", "Add"), [
    n("Mul", ["r", "spatial"], ["part"]), n("Add", ["part", "whole"], ["roi"]),
    n("Resize", ["x", "roi", "", "sz"], ["y"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
], {"x": XR, "r": Arr((8,), kind="uniform", low=0.0, high=1.0)}, ["y"],
    {"spatial": f32(0, 0, 1, 1, 0, 0, 1, 1), "whole": f32(0, 0, 0, 0, 1, 1, 0, 0), "sz": i64(1, 3, 4, 5)}, opset=13)
for mode in ("nearest", "linear", "cubic"):
    case("Resize", {"x": XR}, 19, f"half-pixel-symmetric-{mode}", {"sc": f32(1, 1, 1.7, 0.6)}, names=["x", "", "sc"],
         mode=mode, coordinate_transformation_mode="half_pixel_symmetric")
case("Resize", {"x": F(1, 2, 3, 4, 5)}, 13, "5d-linear", {"sc": f32(1, 1, 2, 1.5, 0.6)}, names=["x", "", "sc"],
     mode="linear")
for policy in ("not_larger", "not_smaller"):
    case("Resize", {"x": XR}, 18, f"keep-aspect-{policy}", {"sz": i64(4, 9)}, names=["x", "", "", "sz"],
         axes=[2, 3], keep_aspect_ratio_policy=policy, mode="linear")
case("Resize", {"x": XR}, 18, "axes-tf-crop", {"roi": f32(0.2, 0.1, 0.9, 0.7), "sz": i64(5, 4)},
     names=["x", "roi", "", "sz"], axes=[3, 2], mode="linear", coordinate_transformation_mode="tf_crop_and_resize")

# An audio front end: two 1-D convs with GELU-free activations, as Whisper's encoder starts
graph_case("audio-front-end", ("Conv", "Relu"), [
    n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1]), n("Relu", ["c0"], ["r0"]),
    n("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1], strides=[2]), n("Relu", ["c1"], ["y"]),
], {"x": F("N", 8, 30)}, ["y"], {"w0": w(12, 8, 3), "b0": w(12), "w1": w(12, 12, 3), "b1": w(12)}, batches=(1, 2))
