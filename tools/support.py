"""What Delite supports, measured: ONNX's own node test cases (shipped in the ``onnx`` package,
``onnx.backend.test``) converted and run natively, one op at a time.

``run_case`` is the conformance check (tests/conformance runs it on every claimed case);
``support_rows`` turns the results into the support table (ONNX op, mapped opsets, the .lite
primitives it becomes, the dtypes that pass natively), ``delegate_columns`` adds what each bundled
delegate did with the same cases, read from its committed lite-delegate-test JSON report
(docs/delegates/reports/), and ``markdown`` writes it: ``python -m lite.tools.support docs/ops.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

import lite
from lite.ops.dtypes import BFLOAT16, NARROW_FLOATS
from lite.schema.writer import write_model
from lite.tools.converter import convert_to_graph
from lite.tools.converter.onnx_graph import DEFAULT_DOMAINS, LITE_DTYPES
from lite.tools.converter.qoperator import EXPANDED_OPS
from lite.tools.converter.registry import REGISTRY


@cache
def node_cases() -> dict[str, object]:
    """ONNX's node test cases by name (model, data sets, tolerances)."""
    with warnings.catch_warnings():  # the case generators overflow casts on purpose
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return {case.name: case for case in collect_testcases("")}


def claimed(case) -> bool:
    """Whether every node of the case is a standard op the converter maps and every graph input
    and output has a dtype .lite stores (not string, complex or the float8 *fnuz types)."""
    ops = set(REGISTRY.supported_ops()) | EXPANDED_OPS[""]
    graph = case.model.graph
    return (all(n.domain in DEFAULT_DOMAINS and n.op_type in ops for n in graph.node)
            and all(v.type.tensor_type.elem_type in LITE_DTYPES for v in [*graph.input, *graph.output]))


def as_array(value) -> np.ndarray:
    """A case's input or output as numpy (some cases give TensorProtos)."""
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def run_case(case) -> list[str]:
    """Converts and runs one case natively; raises on any difference from its expected outputs.

    Returns the .lite primitive types the case's model converted to.
    """
    graph, _ = convert_to_graph(case.model)
    model = lite.Model()
    model.build(write_model(graph), lite.ModelType.LITE, lite.Context())
    for inputs, expected in case.data_sets:
        outputs = model.predict([as_array(v) for v in inputs])
        assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
        for output, want in zip(outputs, expected, strict=True):
            compare(output.get_data_to_numpy(), as_array(want), case.rtol, case.atol)
    return sorted({node.op_type for node in graph.nodes})


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> None:
    """Same dtype and shape; floats within the case's tolerances, everything else exactly."""
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != expected {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    if expected.dtype.kind in "fc" or expected.dtype in (BFLOAT16, *NARROW_FLOATS):
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


@dataclass
class OpRow:
    """One ONNX op of the support table."""

    op: str
    opsets: list[int]
    primitives: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)  # input dtypes of the cases that pass natively
    passed: int = 0
    cases: int = 0


def support_rows(cases: Iterable | None = None) -> list[OpRow]:
    """Runs every single-op claimed case and gathers, per mapped ONNX op, what it showed."""
    rows = {op: OpRow(op, versions) for op, versions in REGISTRY.supported_ops().items()}
    rows.update({op: OpRow(op, _onnx_versions(op)) for op in EXPANDED_OPS[""]})
    for case in node_cases().values() if cases is None else cases:
        ops = {n.op_type for n in case.model.graph.node}
        if len(ops) != 1 or not claimed(case):
            continue
        row = rows[ops.pop()]
        row.cases += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row.primitives.update(run_case(case))
        except Exception:  # noqa: BLE001 - a failing case is a fact for the table, not an error here
            continue
        row.passed += 1
        row.dtypes.update(_input_dtypes(case.model))
    return sorted(rows.values(), key=lambda r: r.op)


def _onnx_versions(op: str) -> list[int]:
    """The opsets where the standard op ``op`` (re)defined its schema."""
    schemas = onnx.defs.get_all_schemas_with_history()
    return sorted({s.since_version for s in schemas if s.name == op and not s.domain})


def _input_dtypes(model: onnx.ModelProto) -> set[str]:
    first = model.graph.input[:1]
    return {LITE_DTYPES[v.type.tensor_type.elem_type].name for v in first}


REPORTS = Path(__file__).resolve().parent.parent / "docs" / "delegates" / "reports"
"""Where a checkout keeps the bundled delegates' lite-delegate-test reports (``NAME.md`` and ``NAME.json``)."""
DELEGATE_REPORTS = (("ORT", "ort"), ("TVM", "tvm"), ("NPU", "example_npu"), ("NPU int8", "example_npu_int8"))
"""The support table's delegate columns: (column title, report name), in this order."""


@dataclass
class DelegateColumn:
    """One delegate's column: its report's op cases by ONNX op, and the command that made the report."""

    title: str
    report: str
    cases: dict[str, list[dict]]
    command: str = ""


def delegate_columns(directory: str | Path = REPORTS) -> list[DelegateColumn]:
    """A column per report of ``DELEGATE_REPORTS`` found in ``directory`` that has node cases (a report of
    zoo models only, as the NPU's int8 mode has, gives none)."""
    columns = []
    for title, name in DELEGATE_REPORTS:
        path = Path(directory) / f"{name}.json"
        report = json.loads(path.read_text()) if path.is_file() else {"cases": []}
        cases = _op_cases(report["cases"])
        if cases:
            columns.append(DelegateColumn(title, name, cases, report.get("command", "")))
    return columns


def _op_cases(cases: Iterable[dict]) -> dict[str, list[dict]]:
    by_op: dict[str, list[dict]] = {}
    for case in cases:
        if case["case_id"].startswith("op:"):
            by_op.setdefault(case["op"], []).append(case)
    return by_op


def delegate_cell(cases: Sequence[Mapping]) -> str:
    """"taken/ran" over an op's node cases that ran natively (SKIPPED ones did not): "8/8", "0/6 (declined)",
    "5/6 (1 failing)"; "-" when none ran."""
    ran = [c for c in cases if c["category"] != "SKIPPED"]
    if not ran:
        return "-"
    taken = sum(c["category"] == "SUCCESS" for c in ran)
    failing = sum(c["category"] not in ("SUCCESS", "SUCCESS_UNDELEGATED") for c in ran)
    note = f" ({failing} failing)" if failing else " (declined)" if not taken else ""
    return f"{taken}/{len(ran)}{note}"


def delegate_cells(op: str, columns: Sequence[DelegateColumn]) -> list[str]:
    """The ONNX op's cell in each delegate column."""
    return [delegate_cell(column.cases.get(op, ())) for column in columns]


HEADER = """# Supported ONNX ops

Generated by `python -m lite.tools.support docs/ops.md` from ONNX's own node test cases (the
`onnx.backend.test` cases of the installed onnx package), run one op at a time: *passed* counts
the single-op cases that convert and match natively, *dtypes* the first input's dtypes among
them, *primitives* the .lite primitives the op became. Ops without single-op cases show `-`.
"""


def _columns_text(columns: Sequence[DelegateColumn]) -> list[str]:
    if not columns:
        return []
    lines = ["The delegate columns are read from the bundled delegates' committed",
             "[lite-delegate-test](delegates/testing.md) reports, which run the same node cases with the delegate",
             "and compare with the native kernels: of the op's cases the native kernels run, how many the delegate",
             "took and matched (`8/8`). The others it declined, with the reason in its report; `(declined)`: it",
             "took none; `(k failing)`: k cases failed (each listed with its reason in the report). `-`: no case",
             "ran natively.", ""]
    lines += [f"- {c.title}: [{c.report}.md](delegates/reports/{c.report}.md)"
              + (f", `{c.command}`" if c.command else "") for c in columns]
    return ["", *lines]


def markdown(rows: Sequence[OpRow], columns: Sequence[DelegateColumn] = ()) -> str:
    """The support table as a Markdown page, with a column per delegate report in ``columns``."""
    lines = [HEADER.rstrip(), *_columns_text(columns), "",
             f"{len(rows)} ONNX ops map to .lite primitives. QLinearConv and QLinearMatMul become their",
             "DequantizeLinear -> op -> QuantizeLinear group, and that group one quantized op where the scales are",
             "constants (the node cases feed scales as inputs, so they keep the three nodes). onnxruntime's",
             "`com.microsoft` quantized ops are taken the same way: "
             f"{', '.join(sorted(EXPANDED_OPS['com.microsoft']))}.",
             "",
             "| ONNX op | opsets | primitives | passed | dtypes (native) |" + "".join(f" {c.title} |" for c in columns),
             "|---|---|---|---|---|" + "---|" * len(columns)]
    for row in rows:
        cells = "".join(f" {cell} |" for cell in delegate_cells(row.op, columns))
        lines.append(f"| {row.op} | {', '.join(map(str, row.opsets))} | {', '.join(sorted(row.primitives)) or '-'} "
                     f"| {f'{row.passed}/{row.cases}' if row.cases else '-'} | {', '.join(sorted(row.dtypes)) or '-'} "
                     f"|{cells}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lite.tools.support",
                                     description="Write the support table measured on ONNX's node test cases.")
    parser.add_argument("output", nargs="?", help="the Markdown file to write (default: print it)")
    parser.add_argument("--reports", default=str(REPORTS), metavar="DIR",
                        help="the delegates' lite-delegate-test JSON reports (default: %(default)s)")
    args = parser.parse_args(argv)
    text = markdown(support_rows(), delegate_columns(args.reports))
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
