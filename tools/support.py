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
import importlib
import importlib.util
import json
import re
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

CASES_PACKAGE = "onnx.backend.test.case.node"


def node_cases(ops: Iterable[str] | None = None) -> dict[str, object]:
    """ONNX's node test cases by name (model, data sets, tolerances): all of them, or with ``ops`` at
    least every case of those ONNX op types.

    onnx generates a case when its module is imported, running its reference code (all of them take
    seconds, most of it in 3-D pooling). With ``ops``, only the modules that may make a case of one of
    them run: those whose source names one, and those naming an op whose function (the "_expanded"
    cases) holds one or depends on its context. A module imported once keeps its cases for later calls.
    """
    modules = list(_case_modules())
    if ops is not None:
        ops = set(ops)
        named = re.compile(rf"(?<!\w)(?:{'|'.join(map(re.escape, sorted(ops))) or '(?!)'})(?!\w)")
        modules = [name for name in modules if _may_make(name, named, ops)]
    package = importlib.import_module(CASES_PACKAGE)
    package._TargetOpType = None  # NOTE: onnx's own collect_testcases(op_type) leaves its filter set
    with warnings.catch_warnings():  # the case generators overflow casts on purpose
        warnings.simplefilter("ignore")
        for name in modules:
            _generate(package, name)
    if any(_GENERATED[name] is None for name in modules):
        return {case.name: case for case in package._NodeTestCases}  # NOTE: cases not told apart: all so far
    return {case.name: case for name in modules for case in _GENERATED[name]}


_GENERATED: dict[str, list | None] = {}
"""The cases each module generated, by module name (None: imported before ``node_cases`` saw it)."""


def _generate(package, name: str) -> None:
    """Imports the case module ``name``, keeping the cases it adds to onnx's list."""
    if name not in _GENERATED:
        before = None if name in sys.modules else len(package._NodeTestCases)
        importlib.import_module(name)
        _GENERATED[name] = None if before is None else package._NodeTestCases[before:]


def _may_make(module: str, named: re.Pattern, ops: set[str]) -> bool:
    """Whether a case module may make a node of one of ``ops``: its source names one (``named``), or
    names an op whose function holds one or is built from its context (onnx expands a case's function
    into a case of its own)."""
    return named.search(_case_modules()[module]) is not None or any(
        _function_ops(op) is None or _function_ops(op) & ops for op in _quoted_ops(module))


@cache
def _quoted_ops(module: str) -> frozenset[str]:
    """The ONNX ops a case module's source names as strings."""
    words = re.findall(r"[\"']([A-Z][A-Za-z0-9]*)[\"']", _case_modules()[module])
    return frozenset(word for word in words if onnx.defs.has(word))


@cache
def _function_ops(op: str) -> frozenset[str] | None:
    """The op types of ``op``'s function body (empty: no function; None: built from its context)."""
    schema = onnx.defs.get_schema(op)
    if schema.has_context_dependent_function:
        return None
    return frozenset(n.op_type for n in schema.function_body.node) if schema.has_function else frozenset()


@cache
def _case_modules() -> dict[str, str]:
    """The case modules of ``CASES_PACKAGE`` (its ``ai_onnx_ml`` ones where onnx has ONNX_ML, as onnx
    collects them), each with its source."""
    spec = importlib.util.find_spec(CASES_PACKAGE)
    folder = Path(spec.origin).parent
    sources = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__" or (parts[0] == "ai_onnx_ml" and not onnx.ONNX_ML):
            continue
        sources[".".join((CASES_PACKAGE, *parts))] = path.read_text(encoding="utf-8")
    return sources


def claimed_ops() -> set[str]:
    """The standard ONNX ops the converter maps or expands: a claimed case's nodes are all of these."""
    return set(REGISTRY.supported_ops()) | EXPANDED_OPS[""]


def claimed(case) -> bool:
    """Whether every node of the case is a standard op the converter maps and every graph input
    and output has a dtype .lite stores (not string, complex or the float8 *fnuz types)."""
    ops = claimed_ops()
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
