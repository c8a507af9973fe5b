"""Quantization parameters in the .lite file: round trip and hostile values refused at read."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.errors import ModelFormatError
from lite.schema.graph import GraphDef, NodeDef, QuantParams, TensorDef
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
