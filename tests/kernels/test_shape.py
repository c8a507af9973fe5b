"""Shape and data-movement kernels against onnxruntime on the equivalent single ONNX node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from lite.errors import ModelFormatError
from lite.schema.graph import DTYPES
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model

INT64_MAX = np.iinfo(np.int64).max


def random(shape: tuple[int, ...], dtype=np.float32, seed: int = 0) -> np.ndarray:
    """Fresh random values of ``dtype`` (integers in [-50, 50), bools half true)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.standard_normal(shape), dtype)
    return np.asarray(rng.integers(-50, 50, shape), dtype)


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def onnx_reference(op: str, inputs: list[np.ndarray | None], n_outputs: int = 1, opset: int = 17,
                   **attrs) -> list[np.ndarray]:
    """onnxruntime's outputs for one ``op`` node on ``inputs`` (None: absent optional input)."""
    while inputs[-1] is None:
        inputs = inputs[:-1]
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    feeds = {name: a for name, a in zip(names, inputs, strict=True) if a is not None}
    model = single_node_model(op, feeds, n_outputs, opset, input_names=names, **attrs)
    return run_onnxruntime(model, feeds)


def check(op_type: str, attrs: dict, inputs: list[np.ndarray | None], onnx_op: str, n_outputs: int = 1,
          opset: int = 17, onnx_inputs: list[np.ndarray | None] | None = None, **onnx_attrs) -> None:
    """The kernel's outputs equal onnxruntime's exactly (data movement does no arithmetic);
    ``onnx_inputs`` are the node's inputs where they differ from the kernel's."""
    actual = run_kernel(op_type, attrs, inputs, n_outputs)
    expected = onnx_reference(onnx_op, onnx_inputs or inputs, n_outputs, opset, **onnx_attrs)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, e)


def rejects(op_type: str, attrs: dict, inputs: list[np.ndarray | None], n_outputs: int = 1) -> None:
    with pytest.raises(ModelFormatError):
        run_kernel(op_type, attrs, inputs, n_outputs)


DTYPES_TESTED = [np.float32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES_TESTED)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_identity(dtype, shape):
    check("Identity", {}, [random(shape, dtype)], "Identity")


@pytest.mark.parametrize("shape, target, allowzero", [
    ((2, 3, 4), (4, -1), 0),
    ((2, 3, 4), (0, -1), 0),
    ((2, 3, 4), (0, 0, 4), 0),
    ((2, 3, 4), (-1,), 0),
    ((2, 3, 4), (1, 24, 1), 1),
    ((), (1, 1), 0),
    ((1, 1), (), 0),
    ((0, 3), (3, 0), 1),
    ((0, 3), (-1, 3), 0),
    ((2, 0, 4), (0, -1), 0),
])
@pytest.mark.parametrize("dtype", DTYPES_TESTED)
def test_reshape(shape, target, allowzero, dtype):
    check("Reshape", {"allowzero": allowzero}, [random(shape, dtype), ints(*target)], "Reshape",
          allowzero=allowzero)


@pytest.mark.parametrize("shape, target, allowzero", [
    ((2, 3, 4), (5, -1), 0),
    ((2, 3, 4), (-1, -1), 0),
    ((2, 3, 4), (-2, -12), 0),
    ((2, 3, 4), (7, 4), 0),
    ((0, 3), (0, -1), 1),
    ((2, 3), (0, 0, 0), 0),
    ((0, 3), (0, -1), 0),
])
def test_reshape_rejects(shape, target, allowzero):
    rejects("Reshape", {"allowzero": allowzero}, [random(shape), ints(*target)])


def test_reshape_rejects_a_float_shape():
    rejects("Reshape", {}, [random((2, 3)), np.array([3.0, 2.0], np.float32)])


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 0, 4)])
def test_flatten(axis, shape):
    check("Flatten", {"axis": axis}, [random(shape)], "Flatten", axis=axis)


@pytest.mark.parametrize("axis", [-4, 4])
def test_flatten_rejects(axis):
    rejects("Flatten", {"axis": axis}, [random((2, 3, 4))])


@pytest.mark.parametrize("shape, perm", [
    ((2, 3, 4), ()), ((2, 3, 4), (1, 0, 2)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4, 5), (0, 2, 3, 1)),
    ((0, 3), (1, 0)), ((), ()), ((5,), (0,)),
])
@pytest.mark.parametrize("dtype", DTYPES_TESTED)
def test_transpose(shape, perm, dtype):
    check("Transpose", {"perm": perm}, [random(shape, dtype)], "Transpose", **({"perm": perm} if perm else {}))


@pytest.mark.parametrize("perm", [(0, 0, 1), (0, 1), (1, 2, 3)])
def test_transpose_rejects(perm):
    rejects("Transpose", {"perm": perm}, [random((2, 3, 4))])


@pytest.mark.parametrize("shape, axes", [
    ((1, 3, 1, 2), ()), ((1, 3, 1, 2), (0,)), ((1, 3, 1, 2), (-2,)), ((1, 3, 1, 2), (0, 2)), ((1,), (0,)),
    ((1, 0, 1), (2,)),
])
def test_squeeze(shape, axes):
    x = random(shape)
    check("Squeeze", {"axis": axes}, [x], "Squeeze", onnx_inputs=[x, ints(*axes) if axes else None])


@pytest.mark.parametrize("axes", [(1,), (4,), (0, 0), (-5,)])
def test_squeeze_rejects(axes):
    rejects("Squeeze", {"axis": axes}, [random((1, 3, 1, 2))])


@pytest.mark.parametrize("shape, axes", [
    ((3, 4), (0,)), ((3, 4), (-1,)), ((3, 4), (0, 3)), ((3, 4), (1, 2)), ((3, 4), (-1, 0)), ((), (0,)),
    ((0, 2), (1,)),
])
def test_unsqueeze(shape, axes):
    x = random(shape)
    check("Unsqueeze", {"axis": axes}, [x], "Unsqueeze", onnx_inputs=[x, ints(*axes)])


@pytest.mark.parametrize("axes", [(0, 0), (3,), (-4,), (1, -3)])
def test_unsqueeze_rejects(axes):
    rejects("Unsqueeze", {"axis": axes}, [random((3, 4))])


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 0)], 1), ([(2, 3, 4)], -1), ([(1, 2, 3), (1, 2, 3)], -2),
    ([(0, 3), (2, 3)], 0),
])
@pytest.mark.parametrize("dtype", DTYPES_TESTED)
def test_concat(shapes, axis, dtype):
    inputs = [random(s, dtype, seed) for seed, s in enumerate(shapes)]
    check("Concat", {"axis": axis}, inputs, "Concat", axis=axis)


@pytest.mark.parametrize("arrays, axis", [
    ([random((2, 3)), random((2, 4))], 0),
    ([random((2, 3)), random((2, 3, 1))], 0),
    ([random((2, 3)), random((2, 3))], 2),
    ([random(()), random(())], 0),
    ([random((2, 3)), random((2, 3), np.int64)], 0),
])
def test_concat_rejects(arrays, axis):
    rejects("Concat", {"axis": axis}, arrays)


PADS = [
    ((3, 5), (1, 2, 0, 1)),
    ((3, 5), (0, 0, 2, 2)),
    ((2, 3, 4), (0, 1, 2, 0, 1, 1)),
    ((3, 5), (-1, 2, 1, -2)),
    ((3, 5), (0, 0, 0, 0)),
    ((5,), (4, 4)),
]


@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "EDGE"])
@pytest.mark.parametrize("shape, pads", PADS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pad(mode, shape, pads, dtype):
    check("PadFusion", {"padding_mode": mode}, [random(shape, dtype), ints(*pads)], "Pad", mode=mode.lower())


@pytest.mark.parametrize("shape, pads", PADS)
def test_pad_wrap(shape, pads):
    check("PadFusion", {"padding_mode": "WRAP"}, [random(shape), ints(*pads)], "Pad", opset=19, mode="wrap")


@pytest.mark.parametrize("mode", ["CONSTANT", "WRAP"])
@pytest.mark.parametrize("axes, pads", [((1,), (2, 1)), ((-1, 0), (1, 0, 2, 1)), ((0,), (-1, 1))])
def test_pad_some_axes_only(mode, axes, pads):
    x = random((3, 4))
    check("PadFusion", {"padding_mode": mode}, [x, ints(*pads), None, ints(*axes)], "Pad", opset=19,
          mode=mode.lower())


@pytest.mark.parametrize("axes, pads", [((2,), (1, 1)), ((0, 0), (1, 1, 1, 1)), ((0,), (1, 1, 1))])
def test_pad_rejects_bad_axes(axes, pads):
    rejects("PadFusion", {}, [random((3, 4)), ints(*pads), None, ints(*axes)])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pad_constant_value(dtype):
    value = np.array(7, dtype)
    check("PadFusion", {}, [random((2, 3), dtype), ints(1, 0, -1, 2), value], "Pad")


def test_pad_empty_input_with_constant():
    check("PadFusion", {}, [random((0, 3)), ints(1, 1, 2, 0)], "Pad")


@pytest.mark.parametrize("mode, shape, pads", [
    ("CONSTANT", (3, 5), (0, 0, 0)),
    ("CONSTANT", (3, 5), (-2, 0, -2, 0)),
    ("REFLECT", (3, 5), (3, 0, 0, 0)),
    ("REFLECT", (3, 5), (-1, 0, 2, 0)),
    ("EDGE", (0, 5), (1, 0, 0, 0)),
    ("WRAP", (0, 5), (1, 0, 0, 0)),
])
def test_pad_rejects(mode, shape, pads):
    rejects("PadFusion", {"padding_mode": mode}, [random(shape), ints(*pads)])


SLICES = [
    ((5, 6), (1,), (4,), None, None),
    ((5, 6), (0, 1), (5, 6), (0, 1), (2, 2)),
    ((5, 6), (-1,), (-INT64_MAX,), (1,), (-1,)),
    ((5, 6), (10,), (-10,), (0,), (-2,)),
    ((5, 6), (2,), (2,), (1,), None),
    ((4,), (-100,), (100,), None, None),
    ((3, 4, 5), (1, -1), (1000, 0), (-1, 1), (1, -1)),
    ((3, 4, 5), (4, 0), (0, INT64_MAX), (2, 0), (-3, 2)),
    ((0, 3), (0,), (1,), None, None),
    ((6,), (5,), (-7,), None, (-2,)),
]


@pytest.mark.parametrize("shape, starts, ends, axes, steps", SLICES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_strided_slice(shape, starts, ends, axes, steps, dtype):
    inputs = [random(shape, dtype), ints(*starts), ints(*ends), None if axes is None else ints(*axes),
              None if steps is None else ints(*steps)]
    check("StridedSlice", {}, inputs, "Slice")


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ((0,), (1,), (0,), (0,)),
    ((0, 0), (1,), None, None),
    ((0, 0), (1, 1), (0, 0), None),
    ((0,), (1,), (2,), None),
])
def test_strided_slice_rejects(starts, ends, axes, steps):
    inputs = [random((5, 6)), ints(*starts), ints(*ends), None if axes is None else ints(*axes),
              None if steps is None else ints(*steps)]
    rejects("StridedSlice", {}, inputs)


@pytest.mark.parametrize("shape, axis, sizes, n", [
    ((6, 4), 0, (), 3), ((6, 4), 1, (1, 3), 2), ((5,), 0, (), 3), ((6, 4), -1, (1, 0, 3), 3), ((2, 3), 0, (), 1),
    ((0, 4), 0, (0, 0), 2),
])
@pytest.mark.parametrize("dtype", DTYPES_TESTED)
def test_split(shape, axis, sizes, n, dtype):
    x = random(shape, dtype)
    split = [ints(*sizes)] if sizes else []
    onnx_attrs = {} if sizes else {"num_outputs": n}
    check("Split", {"axis": axis, "size_splits": sizes}, [x], "Split", n, 18, [x, *split], axis=axis,
          **onnx_attrs)


def test_split_equal_parts_may_be_empty():
    """As the ONNX reference implementation splits (onnxruntime refuses these)."""
    parts = run_kernel("Split", {"axis": 0}, [np.arange(4.0)], 3)
    assert [p.tolist() for p in parts] == [[0.0, 1.0], [2.0, 3.0], []]
    assert [p.shape for p in run_kernel("Split", {"axis": 0}, [np.zeros((0, 2))], 2)] == [(0, 2), (0, 2)]


@pytest.mark.parametrize("axis, sizes, n", [(0, (2, 3), 2), (0, (6,), 2), (0, (7, -1), 2), (2, (3, 3), 2)])
def test_split_rejects(axis, sizes, n):
    rejects("Split", {"axis": axis, "size_splits": sizes}, [random((6, 4))], n)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [np.array(1), ints(0, -1, 2), np.array([[0, 1, -2], [2, 2, 0]], np.int32),
                                     ints()])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_gather(axis, indices, dtype):
    check("Gather", {"axis": axis}, [random((3, 4, 3), dtype), indices], "Gather", axis=axis)


@pytest.mark.parametrize("axis, indices", [(3, ints(0)), (-4, ints(0)), (0, np.array([0.0], np.float32))])
def test_gather_rejects(axis, indices):
    rejects("Gather", {"axis": axis}, [random((3, 4, 3)), indices])


@pytest.mark.parametrize("shape, target", [
    ((3, 1), (2, 3, 4)), ((3, 1), (3, 4)), ((2, 3), (1, 1)), ((), (2, 2)), ((1,), (0,)), ((2, 1), (2, 1)),
])
@pytest.mark.parametrize("dtype", DTYPES_TESTED)
def test_broadcast_to(shape, target, dtype):
    check("BroadcastTo", {}, [random(shape, dtype), ints(*target)], "Expand")


@pytest.mark.parametrize("target", [(2, -1), (4, 3), (2, 3, -3), (2**40, 2**40, 3)])
def test_broadcast_to_rejects(target):
    rejects("BroadcastTo", {}, [random((2, 3)), ints(*target)])


@pytest.mark.parametrize("start, end", [(0, INT64_MAX), (1, INT64_MAX), (-2, INT64_MAX), (0, -1), (2, 1),
                                        (-10, 10)])
@pytest.mark.parametrize("shape", [(2, 3, 4), (), (0, 5)])
def test_shape(start, end, shape):
    check("Shape", {"start": start, "end": end}, [random(shape)], "Shape", start=start, end=end)


@pytest.mark.parametrize("data_type, value", [("FLOAT32", 1.5), ("INT64", 7.0), ("INT32", -3.0), ("BOOL", 1.0),
                                              ("FLOAT64", 0.25)])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_constant_of_shape(data_type, value, shape):
    dtype = DTYPES[data_type]
    check("ConstantOfShape", {"data_type": data_type, "value": value}, [ints(*shape)], "ConstantOfShape",
          value=numpy_helper.from_array(np.array([value], dtype)))


@pytest.mark.parametrize("attrs, shape", [({}, ints(2, -1)), ({"data_type": "UNKNOWN"}, ints(2)),
                                          ({}, ints(2, 3).reshape(1, 2)), ({}, ints(2**40, 2**40))])
def test_constant_of_shape_rejects(attrs, shape):
    rejects("ConstantOfShape", attrs, [shape])


@pytest.mark.parametrize("source, targets", [
    (np.float32, ["FLOAT16", "FLOAT64", "INT32", "INT64", "INT8", "BOOL", "FLOAT32"]),
    (np.int64, ["FLOAT32", "INT32", "BOOL", "UINT8"]),
    (np.bool_, ["FLOAT32", "INT64"]),
])
def test_cast(source, targets):
    x = random((3, 4), source)
    x = x * 10 if x.dtype.kind == "f" else np.abs(x) if x.dtype.kind == "i" else x  # UINT8 needs x >= 0
    for to in targets:
        check("Cast", {"to": to}, [x], "Cast", to=onnx_type(DTYPES[to]))


def test_cast_rejects_unknown_type():
    rejects("Cast", {"to": "UNKNOWN"}, [random((2,))])


@pytest.mark.parametrize("op_type, inputs", [
    ("Identity", [random((2,)), random((2,))]),
    ("Reshape", [random((2,))]),
    ("Gather", [random((2,)), None]),
    ("StridedSlice", [random((2,)), ints(0)]),
])
def test_rejects_wrong_input_counts(op_type, inputs):
    rejects(op_type, {}, inputs)
