"""The e2e op case table's vocabulary: input draws, one-node and multi-node cases, ``CASES``.

``tests/e2e/test_ops.py`` runs every case against onnxruntime. The cases of an op family live in
``tests/e2e/cases_<family>.py`` (the first families in ``cases_core.py``); a new module is imported by
``cases_families.py`` to register its cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.support.oracle import onnx_type

INT64_MAX = 2**63 - 1
_WEIGHTS = np.random.default_rng(1234)


# ---- inputs: what to draw for each graph input -------------------------------------------


@dataclass(frozen=True)
class Arr:
    """A graph input: shape (a str dim is dynamic, drawn as the batch size), dtype and distribution."""

    shape: tuple
    dtype: type = np.float32
    kind: str = "normal"  # normal | uniform | integers | bool | round
    low: float = -1.0
    high: float = 1.0
    scale: float = 1.0

    def dims(self) -> list:
        return list(self.shape)

    def draw(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        shape = tuple(batch if isinstance(d, str) else d for d in self.shape)
        if self.kind == "normal":
            value = rng.standard_normal(shape) * self.scale
        elif self.kind == "uniform":
            value = rng.uniform(self.low, self.high, shape)
        elif self.kind == "integers":
            value = rng.integers(int(self.low), int(self.high), shape)
        elif self.kind == "bool":
            value = rng.random(shape) < 0.5
        else:  # round: small integers as floats, so comparisons see ties
            value = np.round(rng.standard_normal(shape) * 1.5)
        return np.asarray(value).astype(self.dtype)


def F(*shape, scale: float = 1.0) -> Arr:
    return Arr(shape, scale=scale)


def P(*shape, low: float = 0.1, high: float = 3.0) -> Arr:
    return Arr(shape, kind="uniform", low=low, high=high)


def I(*shape, low: int = -5, high: int = 6, dtype=np.int64) -> Arr:  # noqa: E743
    return Arr(shape, dtype=dtype, kind="integers", low=low, high=high)


def B(*shape) -> Arr:
    return Arr(shape, dtype=np.bool_, kind="bool")


def R(*shape) -> Arr:
    return Arr(shape, kind="round")


def w(*shape, scale: float = 0.5) -> np.ndarray:
    """A constant weight (the model's, not an input: drawn once, at import)."""
    return (_WEIGHTS.standard_normal(shape) * scale).astype(np.float32)


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


# ---- models --------------------------------------------------------------------------------


def make_model(nodes: list[onnx.NodeProto], inputs: dict[str, Arr], outputs: list[str],
               inits: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` are graph inputs (str dims dynamic), ``inits`` constants."""
    graph = helper.make_graph(
        nodes, "e2e",
        [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.dims()) for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9
    return model


def node_model(op: str, inputs: dict[str, Arr], opset: int, inits: dict[str, np.ndarray] | None = None,
               names: list[str] | None = None, n_out: int = 1, **attrs) -> onnx.ModelProto:
    """One ``op`` node reading ``names`` (default: graph inputs then initializers; "" = absent)."""
    inits = inits or {}
    names = names if names is not None else [*inputs, *inits]
    outputs = [f"y{j}" for j in range(n_out)]
    node = helper.make_node(op, names, outputs, name=f"{op.lower()}_node", **attrs)
    return make_model([node], inputs, outputs, inits, opset)


@dataclass(frozen=True)
class Case:
    id: str
    ops: tuple[str, ...]  # the ONNX op types this case covers
    model: onnx.ModelProto
    inputs: dict[str, Arr]
    oracle: onnx.ModelProto | None = None  # what onnxruntime runs, when it lacks the model's opset
    batches: tuple[int, ...] = (2,)  # sizes drawn for str dims, one predict each on one model
    fusion: bool = True
    keeps: tuple[str, ...] = ()  # .lite op types that must stay nodes (computed at run time, not folded)
    fold_checks: dict = field(default_factory=dict)  # ConversionReport list name -> expected count


CASES: list[Case] = []


def case(op: str, inputs: dict[str, Arr], opset: int, tag: str = "", inits=None, names=None, n_out: int = 1,
         oracle_opset: int | None = None, oracle_attrs: dict | None = None, oracle: onnx.ModelProto | None = None,
         batches=(2,), **attrs) -> None:
    """Adds a one-node case. onnxruntime runs ``oracle`` when given, else the node restated at
    ``oracle_opset`` with ``oracle_attrs`` when given, else the model itself."""
    model = node_model(op, inputs, opset, inits, names, n_out, **attrs)
    if oracle_opset is not None:
        oracle = node_model(op, inputs, oracle_opset, inits, names, n_out,
                            **(attrs if oracle_attrs is None else oracle_attrs))
    _add(Case(f"{op}@{opset}" + (f"-{tag}" if tag else ""), (op,), model, inputs, oracle, tuple(batches)))


def graph_case(tag: str, ops: tuple[str, ...], nodes: list[onnx.NodeProto], inputs: dict[str, Arr],
               outputs: list[str], inits=None, opset: int = 17, batches=(2,), fusion: bool = True,
               keeps: tuple[str, ...] = (), **fold_checks) -> None:
    """Adds a multi-node case covering ``ops``; ``fold_checks`` are ConversionReport list lengths."""
    model = make_model(nodes, inputs, outputs, inits, opset)
    _add(Case(f"{'+'.join(ops)}@{opset}-{tag}", ops, model, inputs, None, tuple(batches), fusion, keeps, fold_checks))


def _add(c: Case) -> None:
    assert all(c.id != other.id for other in CASES), f"duplicate case id {c.id}"
    CASES.append(c)


def n(op: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=f"{outputs[0]}_{op.lower()}", **attrs)
