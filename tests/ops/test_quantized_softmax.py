"""lite.ops.quantized_softmax against onnxruntime's QLinearSoftmax on fresh random data."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from lite.ops.quantized_softmax import output_multiplier, quantized_softmax
from tests.support.quantized import microsoft_op_model, onnxruntime_session

ROWS = 256
ONNX_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def _qlinear_softmax(dtype, width: int) -> ort.InferenceSession:
    kind = ONNX_TYPES[np.dtype(dtype)]
    inputs = [helper.make_tensor_value_info("x", kind, [ROWS, width])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("x_s", "y_s")]
    inputs += [helper.make_tensor_value_info(n, kind, []) for n in ("x_z", "y_z")]
    model = microsoft_op_model("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], inputs,
                               helper.make_tensor_value_info("y", kind, [ROWS, width]), axis=-1, opset=13)
    return onnxruntime_session(model)


@pytest.mark.parametrize("width", [5, 16, 40, 300])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_a_quantized_softmax_gives_onnxruntimes_values(dtype, width):
    """Input scales over a decade, output scales whose inverse is and is not a whole number (1/255
    in float32 is just above it: onnxruntime multiplies by 254): equal but for rare exact ties,
    which may round a step apart."""
    rng, session = np.random.default_rng(17), _qlinear_softmax(dtype, width)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    differing = 0
    for y_scale in (1 / 256, 1 / 255, 1 / 200):
        for _ in range(4):
            x = rng.integers(low, high + 1, (ROWS, width)).astype(dtype)
            x_scale, y_zero = np.float32(10 ** rng.uniform(-1.5, -0.5)), low
            feeds = {"x": x, "x_s": np.array(x_scale, np.float32), "y_s": np.array(y_scale, np.float32),
                     "x_z": np.array(low + 3, dtype), "y_z": np.array(y_zero, dtype)}
            [expected] = session.run(None, feeds)
            actual = quantized_softmax(x, x_scale, y_scale, y_zero, dtype, width)
            steps = np.abs(actual.astype(np.int64) - expected)
            assert steps.max() <= 1
            differing += int(np.sum(steps > 0))
    assert differing <= 12 * ROWS * width * 1e-4


def test_the_output_multiplier_is_the_whole_part_of_the_scales_inverse():
    assert output_multiplier(1 / 256) == 256 and output_multiplier(np.float32(1 / 255)) == 254


def test_a_certain_int8_probability_saturates():
    """A row whose largest value dominates rounds to 256 / 256: with the zero point -128 that is
    128, which saturates to 127 (onnxruntime's kernel lets it wrap to -128)."""
    x = np.array([[127, -128, -128, -128]], np.int8)
    y = quantized_softmax(x, 0.5, 1 / 256, -128, np.int8, 4)
    assert y[0, 0] == 127 and (y[0, 1:] == -128).all()
