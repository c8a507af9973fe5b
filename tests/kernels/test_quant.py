"""The QuantizeLinear / DequantizeLinear kernels against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from tests.support.kernel_harness import assert_matches, run_kernel
from tests.support.quant import quant_reference


@pytest.mark.parametrize("dtype", ["INT8", "UINT8", "INT16", "UINT16"])
@pytest.mark.parametrize("x_dtype", [np.float32, np.float16, np.float64])
def test_quantize_per_axis(dtype, x_dtype):
    rng = np.random.default_rng(3)
    x = rng.normal(0, 3, (2, 3, 4)).astype(x_dtype)
    scale = rng.uniform(0.02, 0.1, 3).astype(x_dtype)
    zero_point = np.array([0, 1, 3], np.dtype(dtype.lower()))
    (y,) = run_kernel("QuantizeLinear", {"axis": 1, "output_type": dtype}, [x, scale, zero_point])
    assert_matches(y, quant_reference("QuantizeLinear", [x, scale, zero_point], axis=1))


def test_quantize_without_zero_point_is_output_type():
    x = np.random.default_rng(4).normal(0, 50, (5, 6)).astype(np.float32)
    scale = np.float32(0.5)
    (y,) = run_kernel("QuantizeLinear", {"output_type": "INT8"}, [x, np.array(scale), None])
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, np.clip(np.rint(x / scale), -128, 127).astype(np.int8))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
def test_dequantize_blocked(dtype):
    rng = np.random.default_rng(5)
    q = rng.integers(0, 100, (3, 7)).astype(dtype)
    scale = rng.uniform(0.01, 1, (3, 3)).astype(np.float32)
    zero_point = rng.integers(0, 9, (3, 3)).astype(dtype)
    (y,) = run_kernel("DequantizeLinear", {"axis": 1, "block_size": 3, "output_type": "FLOAT32"},
                      [q, scale, zero_point])
    assert_matches(y, quant_reference("DequantizeLinear", [q, scale, zero_point], axis=1, block_size=3))


def test_dequantize_to_float16():
    q = np.random.default_rng(6).integers(-128, 128, (4, 5)).astype(np.int8)
    scale = np.float16(0.25)
    (y,) = run_kernel("DequantizeLinear", {"output_type": "FLOAT16"}, [q, np.array(scale), None])
    assert_matches(y, (q.astype(np.float32) * 0.25).astype(np.float16))


@pytest.mark.parametrize(("op", "attrs", "inputs", "match"), [
    ("QuantizeLinear", {"output_type": "INT32"}, [np.ones(2, np.float32), np.ones(1, np.float32)], "output_type"),
    ("QuantizeLinear", {"output_type": "INT8"}, [np.ones(2, np.float32), np.ones(1, np.float32),
                                                  np.zeros(1, np.uint8)], "y_zero_point"),
    ("DequantizeLinear", {"output_type": "INT32"}, [np.ones(2, np.int8), np.ones(1, np.float32)], "float"),
    ("DequantizeLinear", {"block_size": -1}, [np.ones(2, np.int8), np.ones(1, np.float32)], "block_size"),
    ("DequantizeLinear", {"axis": 0}, [np.ones((2, 3), np.int8), np.ones(3, np.float32)], "per-axis"),
])
def test_bad_nodes_fail_naming_the_node(op, attrs, inputs, match):
    with pytest.raises(ModelFormatError, match=match):
        run_kernel(op, attrs, inputs)


@pytest.mark.parametrize("dtype", ["INT8", "UINT8"])
def test_compiled_per_tensor_quantize_is_bit_identical(dtype):
    """The compiled float32 -> 8-bit QuantizeLinear (per tensor) against numpy's path and ONNX's
    reference, on ties (x / scale = k + 0.5), saturating values, infinities and signed zeros."""
    from tests.support.quantized_kernels import compiled_kernels

    rng = np.random.default_rng(7)
    scale = np.array(0.25, np.float32)
    ties = (np.arange(-300, 300) + 0.5).astype(np.float32) * scale
    x = np.concatenate([ties, rng.normal(0, 40, 997).astype(np.float32), [np.inf, -np.inf, -0.0, 0.0, 1e30]])
    x = x.astype(np.float32).reshape(1, -1)
    zero_point = np.array(3 if dtype == "INT8" else 128, np.dtype(dtype.lower()))
    outputs = []
    for on in (True, False):
        with compiled_kernels(on):
            outputs.append(run_kernel("QuantizeLinear", {"output_type": dtype}, [x, scale, zero_point])[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    finite = np.isfinite(x) & (np.abs(x) < 1e9)  # NOTE: the reference casts inf and 1e30 to int32's minimum
    assert_matches(outputs[0][finite], quant_reference("QuantizeLinear", [x, scale, zero_point])[finite])
    assert outputs[0][0, -5] == np.iinfo(outputs[0].dtype).max and outputs[0][0, -4] == np.iinfo(outputs[0].dtype).min
