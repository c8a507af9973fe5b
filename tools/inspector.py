"""lite-inspect: which kernel runs where, and why; a picture of the partitioned graph."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

import lite
from lite.delegates import load_delegate, parse_options
from lite.model import PartitionRow
from lite.schema.reader import read_model
from lite.tools import (
    add_model,
    add_placement,
    add_version,
    chosen_model,
    placement_options,
    placement_table,
    printable,
    printable_lines,
)
from lite.tools.annotate import annotated_onnx
from lite.tools.picture import render_html, render_svg
from lite.tools.sources import load_source

EXAMPLES = """examples:
  lite-inspect model.lite
  lite-inspect zoo:inception_block --delegate example_npu --html page.html
  lite-inspect model.onnx --delegate example_npu --html partitions.html
  lite-inspect model.lite --delegate tvm --delegate-option target=llvm --svg graph.svg
  lite-inspect model.onnx --delegate ort --dump-partitions partitions/
  lite-inspect model.lite --delegate example_npu --annotated-onnx placed.onnx   (open placed.onnx in Netron)
  lite-inspect zoo:mobilenet_v2 --delegate example_npu --delegate ort --placement measured
  lite-inspect model_tvm.lite --delegate tvm --delegate-option trust_saved_code=true   (saved partitions)
"""


WIDTH = 40  # the widest a table column gets


def clipped(text: str, width: int = WIDTH) -> str:
    """``text`` cut to ``width`` characters, its middle replaced by "..." when it is longer (a node name's
    start and end both tell which node it is)."""
    if len(text) <= width:
        return text
    head = (width - 3) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head):]


def format_table(rows: list[PartitionRow]) -> str:
    """The partition report as an aligned text table with a summary line."""
    header = ("node", "op type", "runs on", "graph kernel", "why not delegated")
    cells = [header] + [(r.node, f"{r.op_type} {r.quantized}".strip(), r.runs_on, r.graph_kernel, r.reason)
                        for r in rows]
    return aligned(cells) + "\n" + summary(rows)


def aligned(cells: list[tuple[str, ...]]) -> str:
    """Rows of cells as a table: every column but the last clipped and padded, a rule under the header.
    Characters a terminal would act on (read from a file) show as escapes (``printable``)."""
    cells = [tuple(map(printable, row)) for row in cells]
    last = len(cells[0]) - 1
    widths = [min(max(len(c[i]) for c in cells), WIDTH) for i in range(last)]
    lines = ["  ".join(clipped(c[i]).ljust(widths[i]) for i in range(last)) + "  " + c[last] for c in cells]
    lines.insert(1, "-" * (sum(widths) + 2 * last + len(cells[0][last])))
    return "\n".join(lines)


def saved_table(graph, rows: list[PartitionRow]) -> str:
    """The delegate partitions saved in the file (``lite-convert --delegate``) and what this build did with each."""
    by_node = {r.node: r for r in rows}
    header = ("saved partition", "delegate", "nodes", "MB", "this build")
    cells = [header]
    for partition in graph.partitions:
        first = by_node.get(graph.nodes[partition.nodes[0]].name)
        status = first.blob if first is not None and first.blob else "not used: its nodes do not run in this build"
        cells.append((partition.name, partition.delegate, str(len(partition.nodes)),
                      f"{len(memoryview(partition.blob)) / 1e6:.1f}", status))
    targets = sorted({f"  {printable(p.delegate)}: {printable(p.target)}" for p in graph.partitions})
    return "\n".join([aligned(cells), "built for:", *targets])


def idle_delegates(delegates: list, rows: list[PartitionRow]) -> list[str]:
    """The class names of ``delegates`` that run no node (they declined, or supported nothing)."""
    used = {r.runs_on for r in rows}
    return [type(d).__name__ for d in delegates if type(d).__name__ not in used]


def summary(rows: list[PartitionRow]) -> str:
    """One line: how many nodes each place runs, and every delegate that declined in init()."""
    delegated = [r for r in rows if r.graph_kernel]
    partitions = {r.graph_kernel for r in delegated}
    folded = sum(r.runs_on == "folded" for r in rows)
    declines = sorted({printable(part) for r in rows for part in r.reason.split("; ")
                       if ": declined in init(): " in part})
    saved = [r for r in rows if r.blob]
    loaded = sum(r.blob.startswith("loaded") for r in saved)
    quantized = sum(bool(r.quantized) for r in rows)
    return (f"{len(rows)} nodes: {len(delegated)} delegated in {len(partitions)} partition(s), "
            f"{len(rows) - len(delegated) - folded} native, {folded} folded from shapes"
            + (f"; {quantized} quantized" if quantized else "")
            + (f"; saved partitions cover {len(saved)} nodes, {loaded} loaded" if saved else "")
            + "".join(f"\n  {decline.replace(': declined in init(): ', ' declined: ')}" for decline in declines))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lite-inspect", description="Show where each node of a model runs and why.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(parser)
    add_version(parser)
    parser.add_argument("--delegate", action="append", default=[],
                        help="native, example_npu, tvm, ort or module:Class (repeatable, priority order)")
    parser.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                        help="constructor option for the delegates (repeatable)")
    add_placement(parser)
    parser.add_argument("--html", type=Path, help="write a self-contained HTML page with the picture")
    parser.add_argument("--svg", type=Path, help="write the picture as SVG")
    parser.add_argument("--annotated-onnx", type=Path, metavar="PATH",
                        help="write the graph as Delite runs it as ONNX, each node's placement and decline reason "
                             "in its metadata and description (open it in Netron)")
    parser.add_argument("--dump-partitions", type=Path, metavar="DIR",
                        help="write what each graph kernel runs (for ort: <graph kernel>.onnx) into DIR")
    parser.add_argument("--require-delegate", action="store_true",
                        help="exit 3 when a delegate given with --delegate runs no node")
    args = parser.parse_args(argv)
    chosen_model(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lite-inspect``."""
    args = parse_args(argv)
    try:
        data, _, _ = load_source(args.model)
        options = parse_options(args.delegate_option)
        delegates = [d for d in (load_delegate(s, options) for s in args.delegate) if d is not None]
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(delegates=delegates, **placement_options(args)))
        graph = read_model(data)
    except (lite.LiteError, OSError) as exc:
        print(f"lite-inspect: {printable_lines(exc)}", file=sys.stderr)
        return 1
    rows = model.partition_report()
    print(format_table(rows))
    if graph.partitions:
        print("\n" + saved_table(graph, rows))
    if model.placement_report():
        print("\n" + placement_table(model.placement_report()))
    write_pictures(args, graph, rows)
    if args.annotated_onnx:
        onnx.save_model(annotated_onnx(graph, rows), str(args.annotated_onnx))
        print(f"wrote {args.annotated_onnx}")
    if args.dump_partitions:
        for path in dump_partitions(model, rows, args.dump_partitions):
            print(f"wrote {path}")
    idle = idle_delegates(delegates, rows)
    if args.require_delegate and idle:
        print(f"lite-inspect: {', '.join(idle)} ran no node (the reasons are in the table)", file=sys.stderr)
        return 3
    return 0


def write_pictures(args: argparse.Namespace, graph, rows: list[PartitionRow]) -> None:
    """Writes the --html page and the --svg picture that were asked for, saying where."""
    pictures = []
    if args.html:
        pictures.append((args.html, *render_html(graph, rows, Path(args.model).name, summary(rows))))
    if args.svg:
        pictures.append((args.svg, *render_svg(graph, rows)))
    for path, text, _ in pictures:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if not all(laid_out for _, _, laid_out in pictures):
        print("note: graphviz's dot was not found, so the picture uses the built-in layout "
              "(install graphviz, e.g. apt install graphviz, for a tidier one)", file=sys.stderr)


def dump_partitions(model: lite.Model, rows: list[PartitionRow], directory: Path) -> list[Path]:
    """Calls ``dump(directory)`` on every graph kernel that has one, in partition-report order."""
    kernels = {k.name: k for k in model.graph_kernels()}
    names = dict.fromkeys(r.graph_kernel for r in rows if r.graph_kernel)
    dumps = [getattr(kernels[name], "dump", None) for name in names]
    return [path for dump in dumps if dump is not None for path in dump(directory)]


if __name__ == "__main__":
    sys.exit(main())
