"""Geometry of a drawn partition picture (``lite-inspect --svg``/``--html``), read back from its SVG.

Both layouts (graphviz's ``dot`` and the built-in one) write every box as ``<g class="node" id=...>``,
every arrow as ``<g class="edge">`` and every partition frame as ``<g class="cluster">``. ``check``
reports what would make a reader misread the picture: an arrow segment that runs through or ends
in a box it does not connect, a partition with no frame around all its nodes, and a box inside a
partition's frame that is not in that partition.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

SVG = "{http://www.w3.org/2000/svg}"
Point = tuple[float, float]
Rect = tuple[float, float, float, float]  # left, top, right, bottom
SHAPES = ("rect", "polygon", "path", "ellipse", "polyline")


@dataclass(frozen=True)
class Edge:
    """One arrow: its group id, the boxes it joins, and its drawn line as a polyline (curves sampled)."""

    id: str
    source: str
    target: str
    points: list[Point]


@dataclass
class Picture:
    """Boxes by id, arrows, and partition frames (each an outline polygon) read from one SVG."""

    boxes: dict[str, Rect]
    edges: list[Edge]
    frames: list[list[Point]]


@dataclass
class Problems:
    """What ``check`` found; empty lists when the picture reads right."""

    crossings: list[str] = field(default_factory=list)  # "e_7 runs into n_2"
    unframed: list[str] = field(default_factory=list)  # partition names
    strays: list[str] = field(default_factory=list)  # "n_5 inside example_npu_0's frame"

    def __bool__(self) -> bool:
        return bool(self.crossings or self.unframed or self.strays)


def partitions_of(rows: Iterable) -> dict[str, set[str]]:
    """Box ids per graph kernel from a partition report (the picture names row ``k``'s box ``n_k``)."""
    partitions: dict[str, set[str]] = {}
    for k, row in enumerate(rows):
        if row.graph_kernel:
            partitions.setdefault(row.graph_kernel, set()).add(f"n_{k}")
    return partitions


def svg_of(page: str) -> str:
    """The ``<svg>`` element of an HTML page (or the text itself when it is an SVG file)."""
    start = page.index("<svg")
    return page[start:page.index("</svg>", start) + len("</svg>")]


def read_picture(svg: str, ends: dict[str, tuple[str, str]] | None = None) -> Picture:
    """Boxes, arrows and frames of an SVG picture (all in the coordinates of the graph's group).
    ``ends`` (arrow id -> source and target box ids) names the boxes of arrows the SVG does not name."""
    root = ET.fromstring(svg_of(svg))
    boxes: dict[str, Rect] = {}
    edges: list[Edge] = []
    frames: list[list[Point]] = []
    for group in root.iter(f"{SVG}g"):
        kind = group.get("class", "")
        shapes = [e for e in group.iter() if e.tag[len(SVG):] in SHAPES]
        if not shapes:
            continue
        shape = shapes[0]
        if kind == "node":
            boxes[group.get("id", "")] = bounds([p for s in shapes for p in outline(s)])
        elif kind == "edge":
            edges.append(_edge(group, shape, ends or {}))
        elif kind == "cluster":
            frames.append(outline(shape))
    return Picture(boxes, edges, frames)


def _edge(group: ET.Element, shape: ET.Element, ends: dict[str, tuple[str, str]]) -> Edge:
    source, target = group.get("data-source"), group.get("data-target")
    if group.get("id", "") in ends:
        source, target = ends[group.get("id", "")]
    elif source is None or target is None:  # graphviz titles an edge "source->target"
        title = html.unescape(group.findtext(f"{SVG}title", ""))
        source, arrow, target = title.partition("->")
        if not arrow:
            raise ValueError(f"arrow {group.get('id')} does not name its boxes: pass ends")
    return Edge(group.get("id", ""), source, target, outline(shape))


def outline(shape: ET.Element) -> list[Point]:
    """The points of a shape element: a rect's or ellipse's corners, a polygon's points, a path sampled."""
    tag = shape.tag[len(SVG):]
    number = lambda name: float(shape.get(name, "0"))  # noqa: E731
    if tag == "rect":
        x, y, w, h = number("x"), number("y"), number("width"), number("height")
        return [(x, y), (x + w, y), (x + w, y + h), (x, y + h), (x, y)]
    if tag == "ellipse":
        cx, cy, rx, ry = number("cx"), number("cy"), number("rx"), number("ry")
        return [(cx - rx, cy - ry), (cx + rx, cy - ry), (cx + rx, cy + ry), (cx - rx, cy + ry)]
    if tag in ("polygon", "polyline"):
        values = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", shape.get("points", ""))]
        return list(zip(values[::2], values[1::2], strict=True))
    return path_points(shape.get("d", ""))


def path_points(d: str, steps: int = 16) -> list[Point]:
    """An absolute ``M``/``L``/``C`` path as a polyline, each cubic Bezier sampled at ``steps`` points."""
    points: list[Point] = []
    for command, values in re.findall(r"([MLCmlc])([^MLCmlc]*)", d):
        if command.islower():
            raise ValueError(f"relative path commands are not read: {d[:60]}")
        numbers = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", values)]
        pairs = list(zip(numbers[::2], numbers[1::2], strict=True))
        if command in "ML":
            points += pairs
        else:
            for k in range(0, len(pairs) - 2, 3):
                points += list(_bezier(points[-1], *pairs[k:k + 3], steps))
    return points


def _bezier(p0: Point, p1: Point, p2: Point, p3: Point, steps: int) -> Iterator[Point]:
    for i in range(1, steps + 1):
        t = i / steps
        a, b, c, d = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t ** 3
        yield (a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0], a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1])


def bounds(points: list[Point]) -> Rect:
    """The bounding rectangle of ``points``."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def check(svg: str, partitions: dict[str, set[str]], margin: float = 1.0,
          ends: dict[str, tuple[str, str]] | None = None) -> Problems:
    """The misdrawings of a picture: arrows through or into foreign boxes (each box grown by ``margin``),
    partitions (graph kernel -> box ids) with no frame around all their boxes, and boxes inside a
    partition's frame that are not in it. ``ends`` is as for ``read_picture``."""
    picture = read_picture(svg, ends)
    problems = Problems(crossings=crossings(picture, margin))
    for name, members in partitions.items():
        frame = next((f for f in picture.frames if all(_framed(picture.boxes[b], f) for b in members)), None)
        if frame is None:
            problems.unframed.append(name)
            continue
        problems.strays += [f"{b} inside {name}'s frame" for b, rect in picture.boxes.items()
                            if b not in members and _framed(rect, frame)]
    return problems


def crossings(picture: Picture, margin: float = 1.0) -> list[str]:
    """Every arrow segment that meets a box other than the arrow's own two (boxes grown by ``margin``)."""
    found = []
    for edge in picture.edges:
        for box_id, rect in picture.boxes.items():
            if box_id in (edge.source, edge.target):
                continue
            grown = (rect[0] - margin, rect[1] - margin, rect[2] + margin, rect[3] + margin)
            if any(segment_meets(a, b, grown) for a, b in zip(edge.points, edge.points[1:], strict=False)):
                found.append(f"{edge.id} ({edge.source}->{edge.target}) runs into {box_id}")
    return found


def segment_meets(a: Point, b: Point, rect: Rect) -> bool:
    """Whether the segment ``a``-``b`` has a point inside ``rect`` (Liang-Barsky clipping)."""
    low, high = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    for p, q in ((-dx, a[0] - rect[0]), (dx, rect[2] - a[0]), (-dy, a[1] - rect[1]), (dy, rect[3] - a[1])):
        if p == 0:
            if q < 0:
                return False
        elif p < 0:
            low = max(low, q / p)
        else:
            high = min(high, q / p)
        if low > high:
            return False
    return True


def _framed(rect: Rect, frame: list[Point]) -> bool:
    """Whether a box lies inside a frame polygon (its centre and its corners pulled in by 1)."""
    left, top, right, bottom = rect[0] + 1, rect[1] + 1, rect[2] - 1, rect[3] - 1
    corners = [((left + right) / 2, (top + bottom) / 2), (left, top), (right, top), (right, bottom), (left, bottom)]
    return all(inside(p, frame) for p in corners)


def inside(point: Point, polygon: list[Point]) -> bool:
    """Whether ``point`` is inside ``polygon`` (even-odd rule)."""
    x, y = point
    result = False
    for (x1, y1), (x2, y2) in zip(polygon, polygon[1:] + polygon[:1], strict=True):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            result = not result
    return result
