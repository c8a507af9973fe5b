"""Quantization parameters and packed narrow types in the .lite file: round trip, and hostile values
refused at read."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import numpy_helper

import lite
from lite.errors import ModelFormatError
from lite.schema.fb.DataType import DataType
from lite.schema.graph import GraphDef, NodeDef, QuantParams, TensorDef
from lite.schema.packed import pack
from lite.schema.reader import read_model
from lite.schema.writer import write_model


def _graph(quant: QuantParams, dtype=np.int8, shape=(2, 3)) -> GraphDef:
    tensors = [TensorDef("q", np.dtype(dtype), shape, quant=quant), TensorDef("y", np.dtype(dtype), shape)]
    nodes = [NodeDef("id", "Identity", {}, [0], [1])]
    return GraphDef(tensors, nodes, [0], [1])


@pytest.mark.parametrize("quant", [
    QuantParams(np.array([0.5]), np.array([-3])),
    QuantParams(np.array([0.1, 0.2, 0.3]), np.array([0, 1, 2]), axis=1),
    QuantParams(np.array([0.1, 0.2, 0.3, 0.4]), np.zeros(0), axis=1, bits=4, block_size=2),
])
def test_round_trip(quant):
    graph = read_model(write_model(_graph(quant)))
    assert graph.tensors[0].quant == quant and graph.tensors[1].quant is None


def test_the_runtime_tensor_carries_them():
    quant = QuantParams(np.array([0.25]), np.array([4]))
    model = lite.Model()
    model.build(write_model(_graph(quant)), lite.ModelType.LITE, lite.Context())
    got = model.get_inputs()[0].quant_params
    assert isinstance(got, lite.QuantParams) and got == quant and got.per_tensor
    assert model.get_outputs()[0].quant_params is None


@pytest.mark.parametrize(("quant", "dtype", "match"), [
    (QuantParams(np.array([0.0]), np.array([0])), np.int8, "finite, positive and normal"),
    (QuantParams(np.array([-1.0]), np.array([0])), np.int8, "finite, positive and normal"),
    (QuantParams(np.array([np.nan]), np.array([0])), np.int8, "finite, positive and normal"),
    (QuantParams(np.array([np.inf]), np.array([0])), np.int8, "finite, positive and normal"),
    (QuantParams(np.zeros(0), np.zeros(0)), np.int8, "finite, positive and normal"),
    (QuantParams(np.array([1e-45]), np.array([0])), np.int8, "finite, positive and normal"),
    (QuantParams(np.array([1.0]), np.array([128])), np.int8, "outside"),
    (QuantParams(np.array([1.0]), np.array([-1])), np.uint8, "outside"),
    (QuantParams(np.array([1.0]), np.array([8]), bits=4), np.int8, "outside"),
    (QuantParams(np.array([1.0, 1.0]), np.array([0, 0]), axis=2), np.int8, "axis=2"),
    (QuantParams(np.array([1.0, 1.0]), np.array([0, 0]), axis=1), np.int8, "2 scales for 3"),
    (QuantParams(np.array([1.0] * 3), np.array([0, 0]), axis=1), np.int8, "2 zero points"),
    (QuantParams(np.array([1.0] * 3), np.zeros(0), axis=1, block_size=2), np.int8, "3 scales for 4 blocks"),
    (QuantParams(np.array([1.0]), np.zeros(0), block_size=-1), np.int8, "negative"),
    (QuantParams(np.array([1.0]), np.zeros(0), bits=9), np.int8, "bits=9"),
    (QuantParams(np.array([1.0]), np.zeros(0)), np.float32, "integer"),
])
def test_hostile_params_are_refused_naming_the_tensor(quant, dtype, match):
    data = write_model(_graph(quant, dtype))
    with pytest.raises(ModelFormatError, match=f"tensor 'q'.*{match}"):
        read_model(data)


# ---- packed 4- and 2-bit data --------------------------------------------------------------------

NARROW = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.float4_e2m1fn,
          ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def _const_graph(data: np.ndarray, shape: tuple[int, ...] | None = None, quant: QuantParams | None = None) -> GraphDef:
    """w (constant, declared ``shape``) -> Identity -> y: the writer packs ``data`` as it is."""
    shape = data.shape if shape is None else shape
    tensors = [TensorDef("w", data.dtype, shape, data=data, quant=quant), TensorDef("y", data.dtype, shape)]
    return GraphDef(tensors, [NodeDef("id", "Identity", {}, [0], [1])], [], [1])


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("count", [1, 5, 8])
def test_narrow_constants_round_trip_packed(dtype, count):
    values = np.random.default_rng(count).standard_normal(count).astype(np.float32) * 3
    data = values.astype(dtype)
    blob = write_model(_const_graph(data))
    read = read_model(blob).tensors[0].data
    assert read.dtype == np.dtype(dtype) and np.array_equal(read.view(np.uint8), data.view(np.uint8))
    assert bytes(pack(data)) in bytes(blob)


def test_int4_is_packed_low_nibble_first_as_onnx_packs_it():
    data = np.array([1, -2, 7], ml_dtypes.int4)
    assert pack(data).tolist() == [0xE1, 0x07]
    assert numpy_helper.from_array(data).raw_data == bytes(pack(data))


@pytest.mark.parametrize(("data", "shape", "need"), [
    (np.zeros(5, ml_dtypes.int4), (7,), 4),  # 3 bytes written, odd dims need 4
    (np.zeros(7, ml_dtypes.uint4), (6,), 3),  # 4 bytes, one too many
    (np.zeros(4, ml_dtypes.int2), (2, 3), 2),  # 1 byte for 6 two-bit values
    (np.zeros(3, ml_dtypes.float4_e2m1fn), (1,), 1),
])
def test_packed_data_that_disagrees_with_its_dims_is_refused_naming_the_tensor(data, shape, need):
    with pytest.raises(ModelFormatError, match=f"const tensor 'w'.*{need}"):
        read_model(write_model(_const_graph(data, shape)))


def test_huge_packed_dims_are_refused_before_any_allocation():
    with pytest.raises(ModelFormatError, match="tensor 'w'.*memory limit"):
        read_model(write_model(_const_graph(np.zeros(8, ml_dtypes.int4), (1 << 40, 8))))


@pytest.mark.parametrize(("quant", "dtype", "match"), [
    (QuantParams(np.array([1.0]), np.array([8]), bits=4), ml_dtypes.int4, "outside"),
    (QuantParams(np.array([1.0]), np.array([4]), bits=2), ml_dtypes.uint2, "outside"),
    (QuantParams(np.array([1.0]), np.zeros(0), bits=8), ml_dtypes.uint4, "bits=8"),
    (QuantParams(np.array([1.0]), np.zeros(0), bits=4), ml_dtypes.float8_e4m3fn, "integer"),
])
def test_hostile_params_on_narrow_types_are_refused(quant, dtype, match):
    data = write_model(_const_graph(np.zeros(4, dtype), quant=quant))
    with pytest.raises(ModelFormatError, match=f"tensor 'w'.*{match}"):
        read_model(data)


def test_an_unknown_data_type_is_refused_with_what_to_do():
    blob = write_model(_const_graph(np.zeros(4, np.int8)))
    patched = _retag(blob, DataType.INT8, 99)  # what a later format version's type would read as here
    assert patched != blob
    with pytest.raises(ModelFormatError, match="unknown data type 99.*update Delite"):
        read_model(patched)


def _retag(blob: bytes, old: int, new: int) -> bytes:
    from lite.schema.fb.Model import Model

    model = Model.GetRootAs(blob, 0)
    data = bytearray(blob)
    for i in range(model.TensorsLength()):
        table = model.Tensors(i)._tab
        offset = table.Offset(6)  # NOTE: Tensor.data_type is the table's second field (vtable slot 6)
        if offset and data[table.Pos + offset] == old:
            data[table.Pos + offset] = new
    return bytes(data)
