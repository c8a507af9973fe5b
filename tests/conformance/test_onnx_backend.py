"""ONNX's own node conformance cases (``onnx.backend.test``), converted and run natively.

Every case whose nodes are all ops the converter claims runs here: its model goes through
``lite.tools.converter.convert`` and ``lite.Model`` and every output must match the case's
expected output (dtype, shape, and values within the case's rtol/atol, as onnx's backend
runner compares them). A case listed in ``exclusions.txt`` is expected to fail, with its
reason beside it (strict: an excluded case that passes fails the run, so the list shrinks).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

import lite
from lite.tools.converter import convert
from lite.tools.converter.onnx_graph import LITE_DTYPES
from lite.tools.converter.registry import supported_ops

with warnings.catch_warnings():  # the case generators overflow casts on purpose
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    ALL_CASES = {case.name: case for case in collect_testcases("")}

EXCLUSIONS_FILE = Path(__file__).with_name("exclusions.txt")
MAX_EXCLUDED_SHARE = 0.05


def read_exclusions(path: Path = EXCLUSIONS_FILE) -> dict[str, str]:
    """``case name -> reason`` from lines ``test_name  reason`` (``#`` starts a comment line)."""
    excluded = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, reason = line.strip().partition(" ")
            excluded[name] = reason.strip()
    return excluded


def op_types(case) -> set[str]:
    return {node.op_type for node in case.model.graph.node if node.domain in ("", "ai.onnx")}


def claimed(case) -> bool:
    """Whether every node of the case is a standard op the converter has a mapper for, and
    every graph input and output has a dtype .lite stores (not float8, float4, int4, string)."""
    ops = supported_ops()
    graph = case.model.graph
    values = [*graph.input, *graph.output]
    return (all(node.domain in ("", "ai.onnx") and node.op_type in ops for node in graph.node)
            and all(v.type.tensor_type.elem_type in LITE_DTYPES for v in values))


CLAIMED = sorted(name for name, case in ALL_CASES.items() if claimed(case))
EXCLUDED = read_exclusions()


def _params():
    for name in CLAIMED:
        marks = [pytest.mark.xfail(strict=True, reason=EXCLUDED[name])] if name in EXCLUDED else []
        yield pytest.param(name, marks=marks, id=name)


def run_case(name: str) -> None:
    """Converts and runs one case; raises on any difference from its expected outputs."""
    case = ALL_CASES[name]
    model = lite.Model()
    model.build(convert(case.model), lite.ModelType.LITE, lite.Context())
    for inputs, expected in case.data_sets:
        tensors = model.get_inputs()
        for tensor, value in zip(tensors, inputs, strict=True):
            tensor.set_data_from_numpy(as_array(value))
        outputs = model.predict(tensors)
        assert len(outputs) == len(expected)
        for output, want in zip(outputs, expected, strict=True):
            compare(output.get_data_to_numpy(), as_array(want), case.rtol, case.atol)


def as_array(value) -> np.ndarray:
    """A case's input or output as numpy (some cases give TensorProtos)."""
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> None:
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != expected {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    if expected.dtype.kind in "fc" or expected.dtype.name == "bfloat16":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("name", list(_params()))
def test_node_case(name):
    run_case(name)


def test_exclusions_name_claimed_cases_with_reasons():
    stale = sorted(set(EXCLUDED) - set(CLAIMED))
    assert not stale, f"exclusions.txt lists cases that do not run here (remove them): {stale}"
    unexplained = sorted(name for name, reason in EXCLUDED.items() if not reason)
    assert not unexplained, f"exclusions without a reason: {unexplained}"


def test_at_most_five_percent_excluded():
    assert len(EXCLUDED) <= MAX_EXCLUDED_SHARE * len(CLAIMED), (
        f"{len(EXCLUDED)} of {len(CLAIMED)} claimed cases are excluded, over {MAX_EXCLUDED_SHARE:.0%}")
