"""lite.tools.support: the support table measured on ONNX's node cases, and docs/ops.md kept current."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lite.tools.converter.cli import main as convert_main
from lite.tools.converter.qoperator import EXPANDED_OPS
from lite.tools.converter.registry import supported_ops
from lite.tools.support import markdown, node_cases, run_case, support_rows

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_rows_report_what_the_cases_showed():
    cases = [node_cases()[name] for name in ("test_abs", "test_relu", "test_add_uint8", "test_erf")]
    rows = {row.op: row for row in support_rows(cases)}
    assert set(rows) == set(supported_ops()) | EXPANDED_OPS[""]  # QLinearConv, QLinearMatMul: expanded, not mapped
    assert (rows["Abs"].passed, rows["Abs"].cases, rows["Abs"].primitives) == (1, 1, {"Abs"})
    assert rows["Add"].dtypes == {"uint8"} and rows["Add"].primitives == {"AddFusion"}
    assert rows["Relu"].primitives == {"Activation"} and rows["Conv"].cases == 0


def test_run_case_raises_on_a_wrong_answer():
    broken = copy.copy(node_cases()["test_abs"])
    [(inputs, [expected])] = broken.data_sets
    broken.data_sets = [(inputs, [expected + 1])]
    with pytest.raises(AssertionError):
        run_case(broken)


def test_markdown_has_a_row_per_mapped_op():
    text = markdown(support_rows([node_cases()["test_abs"]]))
    assert "| Abs | 1 | Abs | 1/1 | float32 |" in text
    assert all(f"| {op} |" in text for op in supported_ops())


def test_the_committed_table_lists_every_mapped_op():
    text = DOCS.read_text()
    missing = sorted(op for op in supported_ops() if f"| {op} |" not in text)
    assert not missing, f"docs/ops.md lacks {missing}: run python -m lite.tools.support docs/ops.md"


def test_lite_convert_lists_the_ops(capsys):
    assert convert_main(["--list-ops"]) == 0
    out = capsys.readouterr().out
    assert "LayerNormalization  " in out and f"{len(supported_ops())} ONNX ops" in out
