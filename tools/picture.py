"""Pictures of a partitioned graph: every node as a box (op type, output shape, where it runs),
every tensor passed between nodes as an arrow, and a legend of the delegates and partitions.

The layout comes from graphviz's ``dot`` program, through the ``graphviz`` package, when
``dot`` is installed (``apt install graphviz``, ``brew install graphviz``). Without it a
built-in layered layout draws the same boxes, arrows, frames, ids and legend, less tidily.
Tests force the built-in one by replacing ``dot_svg`` with a function that returns None.

Every box is an SVG group ``<g class="node" id="n_K">`` (``in_K``/``out_K`` for graph inputs
and outputs), every arrow ``<g class="edge" id="e_K">`` and every partition's frame
``<g class="cluster" id="partition_K">``, so a page script or a test finds them by id.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import asdict, dataclass, replace

from lite.model import PartitionRow
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.tools import printable, printable_lines

FONT = "Helvetica,Arial,sans-serif"
NATIVE_COLOUR, FOLDED_COLOUR, IO_COLOUR = "#d9d9d9", "#f5f5f5", "#ffffff"
DELEGATE_COLOURS = ("#8dd3c7", "#fdb462", "#80b1d3", "#fb8072", "#bebada", "#b3de69", "#fccde5", "#ffed6f")


@dataclass(frozen=True)
class Box:
    """One drawn box: a graph node, or a graph input or output (``kind`` "node", "input", "output")."""

    id: str
    kind: str
    label: str
    shape: str
    place: str  # the graph kernel's name, "native", "folded", or "" for inputs and outputs
    colour: str
    details: dict[str, str]


@dataclass(frozen=True)
class Arrow:
    """A tensor passed from box ``source`` to box ``target``."""

    id: str
    source: str
    target: str
    tensor: str
    shape: str


@dataclass
class Scene:
    """What a picture shows: boxes in topological order, arrows, and the legend's (colour, text) lines."""

    boxes: list[Box]
    arrows: list[Arrow]
    legend: list[tuple[str, str]]

    def to_json(self) -> str:
        """The scene as JSON (the HTML page's script reads it)."""
        return json.dumps({"boxes": [asdict(b) for b in self.boxes], "arrows": [asdict(a) for a in self.arrows]})


def shape_text(tensor: TensorDef) -> str:
    """``1x64x56x56``; a dynamic dim shows as ``?``, a scalar as ``scalar``."""
    return "x".join("?" if d < 0 else str(d) for d in tensor.shape) or "scalar"


def delegate_colours(rows: list[PartitionRow]) -> dict[str, str]:
    """One colour per place a node runs: grey for native, pale for folded, a palette colour per delegate."""
    colours = {"native": NATIVE_COLOUR, "folded": FOLDED_COLOUR}
    delegates = [r.runs_on for r in rows if r.runs_on not in colours]
    for k, name in enumerate(dict.fromkeys(delegates)):
        colours[name] = DELEGATE_COLOURS[k % len(DELEGATE_COLOURS)]
    return colours


def scene(graph: GraphDef, rows: list[PartitionRow]) -> Scene:
    """The boxes, arrows and legend of ``graph`` placed as ``rows`` (the partition report) says.

    Every text read from the file (names, places, reasons) is ``printable``: a control character
    shows as its escape (and an SVG file stays well-formed XML, which allows none of them).
    """
    colours = delegate_colours(rows)
    by_name = {n.name: n for n in graph.nodes}
    boxes = [_input_box(k, graph.tensors[t]) for k, t in enumerate(graph.inputs) if not graph.tensors[t].is_const]
    producer = {graph.tensors[t].name: box.id for box, t in zip(boxes, graph.inputs, strict=False)}
    for k, row in enumerate(rows):
        node = by_name[row.node]
        boxes.append(_node_box(f"n_{k}", row, node.inputs, node.outputs, graph, colours[row.runs_on]))
        producer.update({graph.tensors[t].name: f"n_{k}" for t in node.outputs})
    boxes += [_output_box(k, graph.tensors[t]) for k, t in enumerate(graph.outputs)]
    arrows = _arrows(graph, [by_name[row.node] for row in rows], producer)
    return Scene([_printable_box(b) for b in boxes], [replace(a, tensor=printable(a.tensor)) for a in arrows],
                 [(colour, printable(text)) for colour, text in _legend(rows, colours)])


def _printable_box(box: Box) -> Box:
    return replace(box, label=printable(box.label), shape=printable(box.shape), place=printable(box.place),
                   details={printable(k): printable(v) for k, v in box.details.items()})


def _input_box(k: int, tensor: TensorDef) -> Box:
    details = {"graph input": tensor.name, "shape": shape_text(tensor), "dtype": str(tensor.dtype)}
    return Box(f"in_{k}", "input", tensor.name, shape_text(tensor), "", IO_COLOUR, details)


def _output_box(k: int, tensor: TensorDef) -> Box:
    details = {"graph output": tensor.name, "shape": shape_text(tensor), "dtype": str(tensor.dtype)}
    return Box(f"out_{k}", "output", tensor.name, shape_text(tensor), "", IO_COLOUR, details)


def _node_box(box_id: str, row: PartitionRow, inputs: list[int], outputs: list[int], graph: GraphDef,
              colour: str) -> Box:
    def listed(indices: list[int]) -> str:
        tensors = [graph.tensors[i] for i in indices if i >= 0]
        return ", ".join(f"{t.name} [{shape_text(t)}]" + (" (constant)" if t.is_const else "") for t in tensors)

    place = row.graph_kernel or row.runs_on
    details = {"node": row.node, "op type": row.op_type, "runs on": row.runs_on, "graph kernel": row.graph_kernel,
               "why not delegated": row.reason, "measured placement": row.placement, "inputs": listed(inputs),
               "outputs": listed(outputs)}
    shape = ", ".join(shape_text(graph.tensors[t]) for t in outputs)
    return Box(box_id, "node", row.op_type, shape, place, colour, {k: v for k, v in details.items() if v})


def _arrows(graph: GraphDef, nodes: list[NodeDef], producer: dict[str, str]) -> list[Arrow]:
    """An arrow for each tensor a node or a graph output reads from a box (constants are no box)."""
    seen: set[tuple[str, str, str]] = set()
    arrows: list[Arrow] = []
    targets = [(f"n_{k}", node.inputs) for k, node in enumerate(nodes)]
    targets += [(f"out_{k}", [t]) for k, t in enumerate(graph.outputs)]
    for target, inputs in targets:
        for t in inputs:
            tensor = graph.tensors[t] if t >= 0 else None
            key = (producer.get(tensor.name, ""), target, tensor.name) if tensor is not None else ("", "", "")
            if key[0] and key not in seen:
                seen.add(key)
                arrows.append(Arrow(f"e_{len(arrows)}", key[0], target, tensor.name, shape_text(tensor)))
    return arrows


def _legend(rows: list[PartitionRow], colours: dict[str, str]) -> list[tuple[str, str]]:
    nodes = Counter(r.runs_on for r in rows)
    partitions = Counter(where for where, _ in {(r.runs_on, r.graph_kernel) for r in rows if r.graph_kernel})
    lines = []
    for place, count in nodes.items():
        if place == "native":
            text = f"native CPU kernels: {_nodes(count)}"
        elif place == "folded":
            text = f"folded from shapes at build: {_nodes(count)}"
        else:
            text = f"{place}: {_nodes(count)} in {partitions[place]} partition(s)"
        lines.append((colours[place], text))
    return lines


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def tooltip(box: Box) -> str:
    """The hover text of a box: its details, one per line."""
    return "\n".join(f"{k}: {v}" for k, v in box.details.items())


# ---- graphviz ---------------------------------------------------------------------------------


def dot_svg(drawn: Scene) -> str | None:
    """The scene laid out by graphviz ``dot`` as SVG text, or None when ``dot`` (or the package) is missing."""
    try:
        import graphviz
    except ImportError:
        return None
    digraph = _digraph(graphviz, drawn)
    try:
        svg = digraph.pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return None
    return svg[svg.index("<svg"):]


def _digraph(graphviz, drawn: Scene):
    digraph = graphviz.Digraph(
        graph_attr={"rankdir": "TB", "nodesep": "0.3", "ranksep": "0.4", "fontname": FONT, "fontsize": "11"},
        node_attr={"shape": "box", "style": "rounded,filled", "fontname": FONT, "fontsize": "10", "penwidth": "0.8"},
        edge_attr={"color": "#555555", "arrowsize": "0.6", "penwidth": "0.9"})
    if drawn.legend:  # graphviz rejects an empty table
        digraph.node("legend", _legend_label(drawn.legend), shape="plaintext", style="", id="legend")
    clusters: dict[str, list[Box]] = {}
    for box in drawn.boxes:
        if box.kind == "node" and box.place not in ("native", "folded"):
            clusters.setdefault(box.place, []).append(box)
        else:
            _dot_node(digraph, box)
    for k, (name, boxes) in enumerate(clusters.items()):
        with digraph.subgraph(name=f"cluster_{k}") as cluster:
            cluster.attr(label=_dot_text(name), style="dashed", color="#777777", fontsize="10", id=f"partition_{k}")
            for box in boxes:
                _dot_node(cluster, box)
    for arrow in drawn.arrows:
        digraph.edge(arrow.source, arrow.target, id=arrow.id, tooltip=_dot_text(f"{arrow.tensor} [{arrow.shape}]"))
    return digraph


def _dot_text(text: str) -> str:
    """``text`` as a graphviz escString keeps it: dot reads a backslash as an escape (``\\n`` a line
    break, ``\\x`` an x), which would undo ``printable``'s escapes."""
    return text.replace("\\", "\\\\")


def _dot_node(digraph, box: Box) -> None:
    attrs = {"id": box.id, "fillcolor": box.colour, "tooltip": _dot_text(tooltip(box))}
    if box.kind != "node":
        attrs.update(shape="ellipse", style="filled")
    elif box.place == "folded":
        attrs.update(style="rounded,filled,dashed")
    digraph.node(box.id, _box_label(box), **attrs)


def _box_label(box: Box) -> str:
    lines = [f"<b>{html.escape(box.label)}</b>", f'<font point-size="8">{html.escape(box.shape)}</font>']
    if box.kind == "node":
        lines.append(f'<font point-size="8" color="#333333">{html.escape(box.place)}</font>')
    return "<" + "<br/>".join(lines) + ">"


def _legend_label(legend: list[tuple[str, str]]) -> str:
    cells = "".join(f'<tr><td bgcolor="{colour}" width="14"> </td><td align="left">{html.escape(text)}</td></tr>'
                    for colour, text in legend)
    return f'<<table border="0" cellspacing="2" cellpadding="2">{cells}</table>>'


# ---- built-in layout --------------------------------------------------------------------------

BOX_W, BOX_H, DUMMY_W, GAP_X, GAP_Y, MARGIN, FRAME_PAD = 150, 46, 16, 24, 34, 12, 6


def builtin_svg(drawn: Scene) -> str:
    """The scene as SVG with a simple layered layout (used when graphviz's ``dot`` is missing).

    Boxes sit in layers by longest path from the inputs. An arrow spanning several layers runs
    straight down through a reserved slot in each layer between, and bends only in the gaps
    between layers, so it never crosses a box. Each layer is ordered by the mean position of its
    neighbours, keeping a partition's slots side by side, and each partition is framed by an
    outline around its slots, layer by layer.
    """
    layers, routes = _layers(drawn)
    group = _groups(drawn, routes)
    _order(layers, routes, group)
    x, y = _coordinates(layers)
    top = MARGIN + 18 * len(drawn.legend) + 24
    width = int(max(x.values(), default=0) + BOX_W / 2 + MARGIN)
    height = int(top + len(layers) * (BOX_H + GAP_Y) + MARGIN)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="{FONT}">',
             '<defs><marker id="arrowhead" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555555"/></marker></defs>',
             _builtin_legend(drawn.legend)]
    parts += [_builtin_frame(k, name, _frame_outline(layers, group, name, x, y, top))
              for k, name in enumerate(dict.fromkeys(group[b.id] for b in drawn.boxes if b.id in group))]
    parts += [_builtin_arrow(arrow, routes[arrow.id], x, y, top) for arrow in drawn.arrows]
    parts += [_builtin_box(box, x[box.id], y[box.id] + top) for box in drawn.boxes]
    return "\n".join(parts + ["</svg>"])


def _layers(drawn: Scene) -> tuple[list[list[str]], dict[str, list[str]]]:
    """Slots per layer (box ids, and dummy slots for long arrows) and each arrow's chain of slots."""
    sources: dict[str, list[str]] = {}
    for arrow in drawn.arrows:
        sources.setdefault(arrow.target, []).append(arrow.source)
    depth: dict[str, int] = {}
    for box in drawn.boxes:  # topological order
        depth[box.id] = 1 + max((depth[s] for s in sources.get(box.id, [])), default=-1)
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=0) + 1)]
    for box in drawn.boxes:
        layers[depth[box.id]].append(box.id)
    routes = {}
    for arrow in drawn.arrows:
        chain = [arrow.source]
        for level in range(depth[arrow.source] + 1, depth[arrow.target]):
            layers[level].append(f"{arrow.id}~{level}")
            chain.append(f"{arrow.id}~{level}")
        routes[arrow.id] = chain + [arrow.target]
    return layers, routes


def _groups(drawn: Scene, routes: dict[str, list[str]]) -> dict[str, str]:
    """The partition (graph kernel) of each slot in one: its delegated boxes, and the dummy slots of
    arrows between two of them."""
    group = {b.id: b.place for b in drawn.boxes if b.kind == "node" and b.place not in ("native", "folded")}
    for chain in routes.values():
        if chain[0] in group and group[chain[0]] == group.get(chain[-1]):
            group.update({slot: group[chain[0]] for slot in chain[1:-1]})
    return group


def _order(layers: list[list[str]], routes: dict[str, list[str]], group: dict[str, str], sweeps: int = 4) -> None:
    """Reorders each layer by the barycentre of its neighbours, down then up, ``sweeps`` times,
    keeping the slots of one partition side by side."""
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    for chain in routes.values():
        for a, b in zip(chain, chain[1:], strict=False):
            up.setdefault(b, []).append(a)
            down.setdefault(a, []).append(b)
    for layer in layers:
        layer[:] = _grouped(layer, group)
    for sweep in range(sweeps):
        neighbours, order = (up, range(1, len(layers))) if sweep % 2 == 0 else (down, range(len(layers) - 2, -1, -1))
        position = {slot: i for layer in layers for i, slot in enumerate(layer)}
        for level in order:
            def centre(slot: str, nb=neighbours, pos=position) -> float:
                near = nb.get(slot, [])
                return sum(pos[s] for s in near) / len(near) if near else pos[slot]
            layers[level].sort(key=centre)
            layers[level][:] = _grouped(layers[level], group)
            position.update({slot: i for i, slot in enumerate(layers[level])})


def _grouped(layer: list[str], group: dict[str, str]) -> list[str]:
    """``layer`` with the slots of each partition side by side, where their mean position was."""
    runs: dict[str, list[int]] = {}
    for i, slot in enumerate(layer):
        runs.setdefault(group.get(slot, slot), []).append(i)
    ranked = sorted(runs.values(), key=lambda run: sum(run) / len(run))
    return [layer[i] for run in ranked for i in run]


def _width(slot: str) -> int:
    return DUMMY_W if "~" in slot else BOX_W


def _coordinates(layers: list[list[str]]) -> tuple[dict[str, float], dict[str, float]]:
    widest = max((sum(_width(s) + GAP_X for s in layer) for layer in layers), default=0)
    x: dict[str, float] = {}
    y: dict[str, float] = {}
    for level, layer in enumerate(layers):
        left = MARGIN + (widest - sum(_width(s) + GAP_X for s in layer)) / 2
        for slot in layer:
            x[slot], y[slot] = left + _width(slot) / 2, level * (BOX_H + GAP_Y)
            left += _width(slot) + GAP_X
    return x, y


def _frame_outline(layers: list[list[str]], group: dict[str, str], name: str, x: dict[str, float],
                   y: dict[str, float], top: float) -> list[tuple[float, float]]:
    """The outline around partition ``name``'s slots: in each layer it spans them (padded), and
    between layers its sides run straight across the gap, where no box is."""
    spans = []
    for layer in layers:
        slots = [s for s in layer if group.get(s) == name]
        if slots:
            left = min(x[s] - _width(s) / 2 for s in slots) - FRAME_PAD
            right = max(x[s] + _width(s) / 2 for s in slots) + FRAME_PAD
            spans.append((left, right, y[slots[0]] + top - FRAME_PAD, y[slots[0]] + top + BOX_H + FRAME_PAD))
    right_side = [(r, y_) for _, r, y0, y1 in spans for y_ in (y0, y1)]
    left_side = [(left, y_) for left, _, y0, y1 in reversed(spans) for y_ in (y1, y0)]
    return right_side + left_side


def _builtin_frame(k: int, name: str, outline: list[tuple[float, float]]) -> str:
    points = " ".join(f"{px:.1f},{py:.1f}" for px, py in outline + outline[:1])
    left, top = outline[-1]
    return (f'<g id="partition_{k}" class="cluster"><title>{html.escape(name)}</title>'
            f'<polygon points="{points}" fill="none" stroke="#777777" stroke-dasharray="5 2"/>'
            f'<text x="{left:.1f}" y="{top - 3:.1f}" font-size="9" fill="#555555">{html.escape(name)}</text></g>')


def _builtin_legend(legend: list[tuple[str, str]]) -> str:
    rows = [f'<rect x="{MARGIN}" y="{MARGIN + 18 * k}" width="14" height="12" fill="{colour}" stroke="#444444"/>'
            f'<text x="{MARGIN + 20}" y="{MARGIN + 18 * k + 10}" font-size="11">{html.escape(text)}</text>'
            for k, (colour, text) in enumerate(legend)]
    return '<g id="legend">' + "".join(rows) + "</g>"


def _builtin_arrow(arrow: Arrow, chain: list[str], x: dict[str, float], y: dict[str, float], top: float) -> str:
    """An arrow from the bottom of its source to the top of its target, straight down through each
    dummy slot between (it bends only in the gaps between layers)."""
    points = [(x[chain[0]], y[chain[0]] + top + BOX_H)]
    points += [(x[slot], y[slot] + top + dy) for slot in chain[1:-1] for dy in (0, BOX_H)]
    points.append((x[chain[-1]], y[chain[-1]] + top))
    path = "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in points)
    ends = f'data-source="{arrow.source}" data-target="{arrow.target}"'
    return (f'<g id="{arrow.id}" class="edge" {ends}><title>{html.escape(arrow.tensor)} [{arrow.shape}]</title>'
            f'<path d="{path}" fill="none" stroke="#555555" marker-end="url(#arrowhead)"/></g>')


def _builtin_box(box: Box, cx: float, top: float) -> str:
    rx = BOX_H / 2 if box.kind != "node" else 6
    dash = ' stroke-dasharray="4 2"' if box.place == "folded" else ""
    lines = [box.label, box.shape] + ([box.place] if box.kind == "node" else [])
    styles = ['font-size="11" font-weight="bold"'] + ['font-size="9"'] * (len(lines) - 1)
    texts = "".join(f'<text x="{cx:.1f}" y="{top + 14 + 13 * i:.1f}" {style} text-anchor="middle">'
                    f'{html.escape(line)}</text>' for i, (line, style) in enumerate(zip(lines, styles, strict=True)))
    return (f'<g id="{box.id}" class="node"><title>{html.escape(tooltip(box))}</title>'
            f'<rect x="{cx - BOX_W / 2:.1f}" y="{top:.1f}" width="{BOX_W}" height="{BOX_H}" rx="{rx}" '
            f'fill="{box.colour}" stroke="#444444"{dash}/>{texts}</g>')


def drawn_svg(drawn: Scene) -> tuple[str, bool]:
    """The scene as SVG, laid out by graphviz where ``dot`` is installed, and whether it was."""
    svg = dot_svg(drawn)
    return (svg, True) if svg is not None else (builtin_svg(drawn), False)


def render_svg(graph: GraphDef, rows: list[PartitionRow]) -> tuple[str, bool]:
    """The SVG picture of ``graph`` placed as ``rows`` says, and whether graphviz laid it out."""
    return drawn_svg(scene(graph, rows))


# ---- HTML page --------------------------------------------------------------------------------

PAGE_STYLE = """
body{font-family:Helvetica,Arial,sans-serif;margin:0 16px;color:#222}
h1{font-size:20px;margin:12px 0 4px}
#summary{white-space:pre-wrap;margin:0 0 8px}
#layout{display:grid;grid-template-columns:minmax(0,1fr) 340px;gap:12px;align-items:start}
#picture{overflow:auto;max-height:80vh;border:1px solid #ccc;background:#fff}
#picture.fit svg{width:100%;height:auto}
#details{position:sticky;top:8px;border:1px solid #ccc;padding:8px;font-size:13px;overflow-wrap:anywhere}
#details dt{font-weight:bold;margin-top:6px}#details dd{margin:0}
g.node{cursor:pointer}
g.picked polygon,g.picked path,g.picked rect,g.picked ellipse{stroke:#d62728;stroke-width:3}
g.lit path,g.lit polygon{stroke:#d62728;stroke-width:2}
table{border-collapse:collapse;margin:12px 0;font-size:13px}
td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
tr[data-box]{cursor:pointer}tr[data-box]:hover{background:#f3f3f3}
"""

PAGE_SCRIPT = """
const scene = JSON.parse(document.getElementById('scene').textContent);
const boxes = Object.fromEntries(scene.boxes.map(b => [b.id, b]));
function pick(id, scroll) {
  document.querySelectorAll('.picked,.lit').forEach(e => e.classList.remove('picked', 'lit'));
  const g = document.getElementById(id);
  if (g) { g.classList.add('picked'); if (scroll) g.scrollIntoView({block: 'center', inline: 'center'}); }
  scene.arrows.filter(a => a.source === id || a.target === id)
    .forEach(a => { const e = document.getElementById(a.id); if (e) e.classList.add('lit'); });
  const list = document.createElement('dl');
  for (const [key, value] of Object.entries(boxes[id].details)) {
    const dt = document.createElement('dt'); dt.textContent = key;
    const dd = document.createElement('dd'); dd.textContent = value;
    list.append(dt, dd);
  }
  document.getElementById('details').replaceChildren(list);
}
for (const id of Object.keys(boxes)) {
  const g = document.getElementById(id);
  if (g) g.addEventListener('click', () => pick(id, false));
}
document.querySelectorAll('tr[data-box]').forEach(tr => tr.addEventListener('click', () => pick(tr.dataset.box, true)));
document.getElementById('fit').addEventListener('change',
  e => document.getElementById('picture').classList.toggle('fit', e.target.checked));
"""


def render_html(graph: GraphDef, rows: list[PartitionRow], title: str, summary: str) -> tuple[str, bool]:
    """A self-contained HTML page (no external files): the summary, the picture with each node's
    details and decline reason on hover and click, and the partition table; and whether
    graphviz laid the picture out."""
    drawn = scene(graph, rows)
    svg, laid_out = drawn_svg(drawn)
    node_ids = [b.id for b in drawn.boxes if b.kind == "node"]
    table = "".join(
        f'<tr data-box="{box_id}">' + "".join(f"<td>{html.escape(printable(cell))}</td>" for cell in
                                              (r.node, r.op_type, r.runs_on, r.graph_kernel, r.reason)) + "</tr>"
        for box_id, r in zip(node_ids, rows, strict=True))
    title, summary = printable(title), printable_lines(summary)
    note = "" if laid_out else "<p><i>graphviz's dot was not found: drawn with the built-in layout.</i></p>"
    data = drawn.to_json().replace("</", "<\\/")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{PAGE_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p id='summary'>{html.escape(summary)}</p>{note}"
            "<label><input type='checkbox' id='fit'> fit the picture to the width</label>"
            f"<div id='layout'><div id='picture'>{svg}</div>"
            "<aside id='details'>Click a box (or a table row) for its details; hover for a summary.</aside></div>"
            "<table><tr><th>node</th><th>op type</th><th>runs on</th><th>graph kernel</th><th>why not delegated</th>"
            f"</tr>{table}</table><script type='application/json' id='scene'>{data}</script>"
            f"<script>{PAGE_SCRIPT}</script></body></html>")
    return page, laid_out
