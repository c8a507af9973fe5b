"""lite.tools.support: the support table measured on ONNX's node cases, and docs/ops.md kept current."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lite.tools.converter.cli import main as convert_main
from lite.tools.converter.qoperator import EXPANDED_OPS
from lite.tools.converter.registry import supported_ops
from lite.tools.support import (
    delegate_cell,
    delegate_cells,
    delegate_columns,
    markdown,
    node_cases,
    run_case,
    support_rows,
)

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "ops.md"


def test_rows_report_what_the_cases_showed():
    cases = [node_cases()[name] for name in ("test_abs", "test_relu", "test_add_uint8", "test_erf")]
    rows = {row.op: row for row in support_rows(cases)}
    assert set(rows) == set(supported_ops()) | EXPANDED_OPS[""]  # QLinearConv, QLinearMatMul: expanded, not mapped
    assert (rows["Abs"].passed, rows["Abs"].cases, rows["Abs"].primitives) == (1, 1, {"Abs"})
    assert rows["Add"].dtypes == {"uint8"} and rows["Add"].primitives == {"AddFusion"}
    assert rows["Relu"].primitives == {"Activation"} and rows["Conv"].cases == 0


@pytest.mark.parametrize("ops", [["Relu"], ["Cast"], ["Identity", "Add"], ["Scan"]])
def test_the_cases_of_some_ops_are_every_case_of_those_ops(ops):
    """Cast's include CastLike's expanded cases and Identity's Clip's (function bodies); Scan's
    model is written in onnx's text format."""
    def of_ops(cases: dict) -> set[str]:
        return {name for name, case in cases.items() if {n.op_type for n in case.model.graph.node} <= set(ops)}

    every = of_ops(node_cases())
    assert every and of_ops(node_cases(ops)) == every


def test_the_cases_of_one_op_do_not_run_other_ops_case_modules():
    code = ("import sys; from lite.tools.support import node_cases, CASES_PACKAGE; node_cases(['Relu']); "
            "print(sorted(m.rpartition('.')[2] for m in sys.modules if m.startswith(CASES_PACKAGE + '.')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    imported = done.stdout.strip().splitlines()[-1]
    assert "'relu'" in imported and "'lppool'" not in imported and "'maxpool'" not in imported, done.stderr


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


# ---- the delegate columns, from the delegates' lite-delegate-test reports ------------------------------------


def op_case(name: str, category: str) -> dict:
    return {"case_id": f"op:{name}", "op": name.split("_")[0], "category": category}


@pytest.mark.parametrize("categories, cell", [
    (["SUCCESS", "SUCCESS", "SKIPPED"], "2/2"),
    (["SUCCESS", "SUCCESS_UNDELEGATED", "SUCCESS"], "2/3"),
    (["SUCCESS_UNDELEGATED", "SUCCESS_UNDELEGATED"], "0/2 (declined)"),
    (["SUCCESS", "OUTPUT_MISMATCH", "SUCCESS_UNDELEGATED", "RUN_FAIL"], "1/4 (2 failing)"),
    (["SKIPPED"], "-"),
    ([], "-"),
])
def test_a_delegate_cell_counts_the_cases_taken_of_those_native_runs(categories, cell):
    assert delegate_cell([op_case(f"Relu_{i}", c) for i, c in enumerate(categories)]) == cell


def test_delegate_columns_come_from_the_reports_with_node_cases(tmp_path):
    cases = [op_case("Relu_a", "SUCCESS"), op_case("Relu_b", "SUCCESS_UNDELEGATED"), op_case("Abs", "RUN_FAIL"),
             {"case_id": "model:resnet18", "op": "model resnet18", "category": "SUCCESS"}]
    (tmp_path / "tvm.json").write_text(json.dumps({"command": "lite-delegate-test --delegate tvm", "cases": cases}))
    (tmp_path / "example_npu_int8.json").write_text(json.dumps({"cases": cases[3:]}))  # zoo models only: no column
    [column] = delegate_columns(tmp_path)
    assert (column.title, column.report, column.command) == ("TVM", "tvm", "lite-delegate-test --delegate tvm")
    assert delegate_cells("Relu", [column]) == ["1/2"] and delegate_cells("Abs", [column]) == ["0/1 (1 failing)"]
    text = markdown(support_rows([node_cases()["test_abs"]]), [column])
    assert "| ONNX op | opsets | primitives | passed | dtypes (native) | TVM |" in text
    assert "| Abs | 1 | Abs | 1/1 | float32 | 0/1 (1 failing) |" in text and "| Conv | " in text
    assert "- TVM: [tvm.md](delegates/reports/tvm.md), `lite-delegate-test --delegate tvm`" in text


def test_the_committed_table_shows_the_committed_delegate_reports():
    columns = delegate_columns()
    assert [c.title for c in columns][:3] == ["ORT", "TVM", "NPU"], "a bundled delegate's JSON report is missing"
    lines = DOCS.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| ONNX op |"))
    assert header.endswith("| dtypes (native) |" + "".join(f" {c.title} |" for c in columns)), header
    stale = []
    for line in lines[lines.index(header) + 2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[5:] != delegate_cells(cells[0], columns):
            stale.append(cells[0])
    assert not stale, f"docs/ops.md's delegate columns for {stale} differ from docs/delegates/reports/*.json: " \
                      "run python -m lite.tools.support docs/ops.md"
