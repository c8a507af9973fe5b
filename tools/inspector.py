"""lite-inspect: which kernel runs where, and why; a picture of the partitioned graph."""

from __future__ import annotations

import argparse
import colorsys
import html
import sys
from pathlib import Path

import lite
from lite.delegates import load_delegate, parse_options
from lite.loader import load_lite_bytes
from lite.model import PartitionRow
from lite.schema.graph import GraphDef
from lite.schema.reader import read_model
from lite.tools import add_version

EXAMPLES = """examples:
  lite-inspect model.lite
  lite-inspect model.onnx --delegate example_npu --html partitions.html
  lite-inspect model.lite --delegate tvm --delegate-option target=llvm --svg graph.svg
  lite-inspect model.onnx --delegate ort --dump-partitions partitions/
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
    cells = [header] + [(r.node, r.op_type, r.runs_on, r.graph_kernel, r.reason) for r in rows]
    widths = [min(max(len(c[i]) for c in cells), WIDTH) for i in range(4)]
    lines = ["  ".join(clipped(c[i]).ljust(widths[i]) for i in range(4)) + "  " + c[4] for c in cells]
    lines.insert(1, "-" * (sum(widths) + 8 + len(header[4])))
    return "\n".join(lines) + "\n" + summary(rows)


def idle_delegates(delegates: list, rows: list[PartitionRow]) -> list[str]:
    """The class names of ``delegates`` that run no node (they declined, or supported nothing)."""
    used = {r.runs_on for r in rows}
    return [type(d).__name__ for d in delegates if type(d).__name__ not in used]


def summary(rows: list[PartitionRow]) -> str:
    """One line: how many nodes each place runs, and every delegate that declined in init()."""
    delegated = [r for r in rows if r.graph_kernel]
    partitions = {r.graph_kernel for r in delegated}
    folded = sum(r.runs_on == "folded" for r in rows)
    declines = sorted({part for r in rows for part in r.reason.split("; ") if ": declined in init(): " in part})
    return (f"{len(rows)} nodes: {len(delegated)} delegated in {len(partitions)} partition(s), "
            f"{len(rows) - len(delegated) - folded} native, {folded} folded from shapes"
            + "".join(f"\n  {decline.replace(': declined in init(): ', ' declined: ')}" for decline in declines))


def layers(graph: GraphDef, names: list[str]) -> dict[str, int]:
    """Depth of each node (longest path from the graph inputs) for the picture."""
    by_name = {n.name: n for n in graph.nodes}
    producer = {t: n.name for n in graph.nodes for t in n.outputs}
    depth: dict[str, int] = {}
    for name in names:  # topological order
        parents = [producer[t] for t in by_name[name].inputs if t in producer and producer[t] in depth]
        depth[name] = 1 + max((depth[p] for p in parents), default=-1)
    return depth


def _colour(key: str, keys: list[str]) -> str:
    if key == "native":
        return "#d9d9d9"
    if key == "folded":
        return "#f2f2f2"
    hue = (keys.index(key) * 0.618) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.75, 0.6)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def render_svg(graph: GraphDef, rows: list[PartitionRow]) -> str:
    """An SVG of the graph: one box per node, coloured by the partition it runs in."""
    names = [r.node for r in rows]
    depth = layers(graph, names)
    slot: dict[str, tuple[int, int]] = {}
    per_layer: dict[int, int] = {}
    for name in names:
        slot[name] = (per_layer.get(depth[name], 0), depth[name])
        per_layer[depth[name]] = per_layer.get(depth[name], 0) + 1
    w, h, gap_x, gap_y = 150, 34, 20, 30
    width = max(per_layer.values(), default=1) * (w + gap_x) + gap_x
    height = (max(per_layer, default=0) + 1) * (h + gap_y) + gap_y
    keys = sorted({r.graph_kernel or r.runs_on for r in rows})
    centre = {n: (gap_x + x * (w + gap_x) + w / 2, gap_y + y * (h + gap_y) + h / 2) for n, (x, y) in slot.items()}
    producer = {t: n.name for n in graph.nodes for t in n.outputs}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">']
    for node in graph.nodes:
        for t in node.inputs:
            if t in producer and producer[t] in centre and node.name in centre:
                (x1, y1), (x2, y2) = centre[producer[t]], centre[node.name]
                parts.append(f'<line x1="{x1}" y1="{y1 + h / 2}" x2="{x2}" y2="{y2 - h / 2}" stroke="#888"/>')
    for row in rows:
        cx, cy = centre[row.node]
        tip = html.escape(f"{row.node} ({row.op_type}): {row.graph_kernel or row.runs_on} {row.reason}")
        parts.append(f'<g><title>{tip}</title><rect x="{cx - w / 2}" y="{cy - h / 2}" width="{w}" height="{h}" '
                     f'rx="5" fill="{_colour(row.graph_kernel or row.runs_on, keys)}" stroke="#444"/>'
                     f'<text x="{cx}" y="{cy + 4}" font-size="11" text-anchor="middle">'
                     f'{html.escape(row.op_type)}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(graph: GraphDef, rows: list[PartitionRow], title: str) -> str:
    """A self-contained HTML page: summary, the picture, and the table."""
    table = "".join(
        f"<tr><td>{html.escape(r.node)}</td><td>{html.escape(r.op_type)}</td><td>{html.escape(r.runs_on)}</td>"
        f"<td>{html.escape(r.graph_kernel)}</td><td>{html.escape(r.reason)}</td></tr>" for r in rows)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(summary(rows))}</p>{render_svg(graph, rows)}"
            "<table><tr><th>node</th><th>op type</th><th>runs on</th><th>graph kernel</th>"
            f"<th>why not delegated</th></tr>{table}</table></body></html>")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lite-inspect", description="Show where each node of a model runs and why.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help=".lite or .onnx model")
    add_version(parser)
    parser.add_argument("--delegate", action="append", default=[],
                        help="native, example_npu, tvm, ort or module:Class (repeatable, priority order)")
    parser.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                        help="constructor option for the delegates (repeatable)")
    parser.add_argument("--html", type=Path, help="write a self-contained HTML page with the picture")
    parser.add_argument("--svg", type=Path, help="write the picture as SVG")
    parser.add_argument("--dump-partitions", type=Path, metavar="DIR",
                        help="write what each graph kernel runs (for ort: <graph kernel>.onnx) into DIR")
    parser.add_argument("--require-delegate", action="store_true",
                        help="exit 3 when a delegate given with --delegate runs no node")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lite-inspect``."""
    args = parse_args(argv)
    try:
        data = load_lite_bytes(args.model)
        options = parse_options(args.delegate_option)
        delegates = [d for d in (load_delegate(s, options) for s in args.delegate) if d is not None]
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(delegates=delegates))
        graph = read_model(data)
    except (lite.LiteError, OSError) as exc:
        print(f"lite-inspect: {exc}", file=sys.stderr)
        return 1
    rows = model.partition_report()
    print(format_table(rows))
    if args.html:
        args.html.write_text(render_html(graph, rows, args.model.name))
        print(f"wrote {args.html}")
    if args.svg:
        args.svg.write_text(render_svg(graph, rows))
        print(f"wrote {args.svg}")
    if args.dump_partitions:
        for path in dump_partitions(model, rows, args.dump_partitions):
            print(f"wrote {path}")
    idle = idle_delegates(delegates, rows)
    if args.require_delegate and idle:
        print(f"lite-inspect: {', '.join(idle)} ran no node (the reasons are in the table)", file=sys.stderr)
        return 3
    return 0


def dump_partitions(model: lite.Model, rows: list[PartitionRow], directory: Path) -> list[Path]:
    """Calls ``dump(directory)`` on every graph kernel that has one, in partition-report order."""
    kernels = {k.name: k for k in model.graph_kernels()}
    names = dict.fromkeys(r.graph_kernel for r in rows if r.graph_kernel)
    dumps = [getattr(kernels[name], "dump", None) for name in names]
    return [path for dump in dumps if dump is not None for path in dump(directory)]


if __name__ == "__main__":
    sys.exit(main())
