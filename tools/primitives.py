"""The primitive reference: every .lite primitive, its attributes, the ONNX ops that become it.

``python -m lite.tools.primitives docs/primitives.md`` writes it from three sources:

- ``schema/ops.fbs``: each table's fields, types and defaults, and the comments above and beside
  each table and field (the schema's comments are the primitives' meaning);
- docs/ops.md's support table: which ONNX ops became which primitives when ONNX's own node test
  cases ran through the converter (``python -m lite.tools.support docs/ops.md`` measures it; running
  those cases again here would take minutes, so this reads what that run wrote), checked against
  ``lite.tools.converter.registry.REGISTRY`` for ops it maps that no case measured;
- the native kernel registry: which primitives run quantized (``lite/kernels/quantized.py``).

tests/tools/test_primitives.py checks that the committed page equals this module's output.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema" / "ops.fbs"
OPS_PAGE = ROOT / "docs" / "ops.md"

_DECLARATION = re.compile(r"(table|enum|union)\s+(\w+)\s*(?::\s*\w+)?\s*\{(.*)$")
_FIELD = re.compile(r"(\w+)\s*:\s*([\w\[\]]+)\s*(?:=\s*([^;]+?))?\s*;\s*(?://\s*(.*))?$")
_VALUE = re.compile(r"(\w+)\s*(?:=\s*(-?\d+))?\s*,?\s*(?://\s*(.*))?$")


@dataclass
class Member:
    """A table's field, an enum's value or a union's member, with its comments."""

    name: str
    type: str = ""
    default: str = ""
    doc: list[str] = field(default_factory=list)


@dataclass
class Declaration:
    """A table, enum or union of the schema: its comments, section and members, in file order."""

    kind: str
    name: str
    section: str
    doc: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)


# ---- the schema ---------------------------------------------------------------------


def _group_title(comment: str) -> bool:
    """A one-line comment that titles the tables after it ("unary math", "indexing")."""
    return bool(comment) and comment[0].islower() and ":" not in comment


class _Parser:
    """Reads ops.fbs line by line: comments wait for the declaration or member they precede."""

    def __init__(self) -> None:
        self.declarations: list[Declaration] = []
        self.section = ""
        self.pending: list[str] = []
        self.open: Declaration | None = None

    def line(self, text: str) -> None:
        text = text.strip()
        if text.startswith("//"):
            self._comment(text[2:].strip())
        elif not text:
            self.pending = [] if self.open is None else self.pending
        elif self.open is None:
            self._declaration(text)
        elif text.startswith("}"):
            self.open = None
        else:
            self._member(text)

    def _comment(self, comment: str) -> None:
        if comment.startswith("----"):
            self.section, self.pending = comment.strip("- "), []
        else:
            self.pending.append(comment)

    def _declaration(self, text: str) -> None:
        match = _DECLARATION.match(text)
        if match is None:
            self.pending = []  # NOTE: namespace, attribute and other lines
            return
        kind, name, rest = match.groups()
        doc, self.pending = self.pending, []
        if len(doc) == 1 and _group_title(doc[0]):
            self.section, doc = doc[0], []
        self.open = Declaration(kind, name, self.section, doc)
        self.declarations.append(self.open)
        body, _, trailing = rest.partition("//")
        self.open.doc += [trailing.strip()] if trailing.strip() else []
        if "}" in body:
            for part in filter(None, (p.strip() for p in body.split("}")[0].split(";"))):
                self._member(part + ";")
            self.open = None

    def _member(self, text: str) -> None:
        pattern = _FIELD if self.open.kind == "table" else _VALUE
        match = pattern.match(text)
        if match is None:
            raise ValueError(f"{SCHEMA.name}: cannot read {text!r} in {self.open.name}")
        doc, self.pending = self.pending, []
        if self.open.kind == "table":
            name, type_, default, comment = match.groups()
        else:
            (name, default, comment), type_ = match.groups(), ""
        self.open.members.append(Member(name, type_, default or "", doc + ([comment] if comment else [])))


def parse_schema(text: str) -> list[Declaration]:
    """The tables, enums and unions of an .fbs text, with their comments, in file order."""
    parser = _Parser()
    for line in text.splitlines():
        parser.line(line)
    return parser.declarations


# ---- what maps to each primitive ----------------------------------------------------


def onnx_ops_by_primitive(ops_page: str) -> tuple[dict[str, list[str]], list[str]]:
    """From docs/ops.md's table: primitive -> the ONNX ops whose cases became it, and the
    mapped ONNX ops no single-op case measured (the registry's ops missing from the table included)."""
    from lite.tools.converter.qoperator import EXPANDED_OPS
    from lite.tools.converter.registry import REGISTRY

    by_primitive: dict[str, list[str]] = {}
    measured = set()
    for line in ops_page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.startswith("| ") or cells[0] in ("ONNX op", "---"):
            continue
        if cells[2] != "-":
            measured.add(cells[0])
            for primitive in cells[2].split(", "):
                by_primitive.setdefault(primitive, []).append(cells[0])
    mapped = set(REGISTRY.supported_ops()) | EXPANDED_OPS[""]
    return by_primitive, sorted(mapped - measured)


def quantized_form(op_type: str) -> str:
    """How the native backend runs ``op_type`` on int8 tensors carrying QuantParams, or "no"."""
    from lite.kernels.quantized import quantized_kernel_class

    kernel = quantized_kernel_class(op_type, np.dtype(np.int8))
    if kernel is None:
        return "no"
    sentence = " ".join((kernel.__doc__ or "").split()).split(". ")[0].rstrip(".")
    return f"yes, `{kernel.__name__}`" + (f": {sentence}" if sentence else "")


# ---- the page -----------------------------------------------------------------------


FIELD_MEANINGS = {
    "kernel_size": "the window's size per spatial axis (kH, kW for 2-D)",
    "stride": "the step per spatial axis; empty: 1 on every axis",
    "strides": "the step per spatial axis; empty: 1 on every axis",
    "dilation": "the spacing of the window's taps per spatial axis; empty: 1 on every axis",
    "pad_list": "explicit pads when pad_mode is PAD, ONNX's order: the begins of every spatial axis, then the "
                "ends ([top, left, bottom, right] for 2-D); empty: none",
    "pad_mode": "PAD: pad_list; SAME_UPPER / SAME_LOWER: ONNX's auto_pad, computed from the input size; VALID: none",
    "group": "channel groups (ONNX's group; the input channels for a depthwise convolution)",
    "in_channel": "the input channels as the converter recorded them; the kernels read the weight's shape",
    "out_channel": "the output channels as the converter recorded them; the kernels read the weight's shape",
    "output_paddings": "extra size added to one side of each spatial axis of the output (ONNX's output_padding)",
    "activation_type": "an activation fused after the op, applied to its output",
    "round_mode": "how the output size rounds: FLOOR, or CEIL (ONNX's ceil_mode = 1)",
    "is_global": "the window is the whole spatial extent (ONNX's GlobalMaxPool / GlobalAveragePool)",
    "keep_dims": "keep each reduced axis as a dim of size 1",
    "epsilon": "added to the variance before its square root",
    "Activation.activation_type": "the activation (any ActivationType)",
    "Activation.alpha": "the alpha of the ActivationType comments (LEAKY_RELU, HARD_SIGMOID, ELU, SELU, CELU, "
                        "THRESHOLDED_RELU, SWISH)",
    "Activation.beta": "the beta of the ActivationType comments (HARD_SIGMOID, SELU)",
    "Activation.min_val": "CLIP's lower bound",
    "Activation.max_val": "CLIP's upper bound",
}
"""Meanings of uncommented fields that recur across tables (as ``lite/ops/geometry.py`` and the
kernels read them), by ``Table.field`` or by field; a field's own comment in the schema comes first."""


def _meaning(table: str, member: Member) -> str:
    return " ".join(member.doc) or FIELD_MEANINGS.get(f"{table}.{member.name}") or FIELD_MEANINGS.get(member.name, "-")


HEADER = """# Primitives

Generated by `python -m lite.tools.primitives docs/primitives.md`: do not edit (a test checks
that this page equals the generated text). Sources: `schema/ops.fbs` (fields, types, defaults and
the schema's comments, which are the meaning), the support table of [ops.md](ops.md) (which ONNX
ops became each primitive when ONNX's node test cases ran through the converter) and the native
kernel registry (the quantized form).

A primitive's semantics follow the ONNX operator of the same purpose unless its comment says
otherwise; inputs and outputs are the ONNX op's unless the comment lists them. In a delegate,
`primitive.type` is the name below and `primitive.attrs` maps each attribute's name to its value,
the default filled in: numbers, `bool`, a tuple for a `[...]` vector, and an enum's value name
as a string (`"PAD"`, `"RELU"`; the enums are at the end). The meaning of each op in code is
`lite.ops`. *Quantized*: every primitive with a float kernel also runs on quantized tensors
(tensors that carry `QuantParams`): by its own integer kernel where one is registered, else by
dequantize, the float kernel, quantize (`lite/kernels/quantized.py`). *ONNX ops*: an op is listed
under every primitive its cases became, helpers included (Gemm's alpha becomes a MulFusion,
QLinearConv its DequantizeLinear -> Conv2DFusion -> QuantizeLinear group). An attribute's meaning
is its schema comment, else, for the fields many tables share, a note of this generator's; `-`: the
schema says nothing more, and the field is the ONNX op's attribute of that purpose.
"""


def _default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str):
        return value or '""'
    return "{}" if not isinstance(value, int | float) else repr(value)


def _type(type_: str, enums: set[str]) -> str:
    inner = type_.strip("[]")
    shown = f"[{inner}](#{inner.lower()})" if inner in enums else inner
    return f"[{shown}]" if type_.startswith("[") else shown


def _table_section(table: Declaration, enums: set[str], ops: list[str], tag: int) -> list[str]:
    from lite.schema.primitives import default_attrs

    defaults = default_attrs(table.name)
    lines = [f"### {table.name}", "", " ".join([f"Union tag {tag}.", *table.doc]), ""]
    if table.members:
        lines += ["| attribute | type | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{m.name}` | {_type(m.type, enums)} | {_default(defaults.get(m.name, m.default))} | "
                  f"{_meaning(table.name, m)} |" for m in table.members]
    else:
        lines.append("No attributes.")
    mapped = ", ".join(ops) if ops else "none directly (the converter's fusions or the runtime make it)"
    return [*lines, "", f"ONNX ops: {mapped}.", "", f"Quantized: {quantized_form(table.name)}.", ""]


def _enum_section(enum: Declaration) -> list[str]:
    lines = [f"### {enum.name}", "", *([" ".join(enum.doc), ""] if enum.doc else []), "| value | meaning |",
             "|---|---|"]
    return [*lines, *(f"| `{m.name}` | {' '.join(m.doc) or '-'} |" for m in enum.members), ""]


def _index(members: list[str], by_primitive: dict[str, list[str]]) -> list[str]:
    lines = ["| tag | primitive | ONNX ops | quantized |", "|---|---|---|---|"]
    for tag, name in enumerate(members, 1):
        quantized = "yes" if quantized_form(name) != "no" else "no"
        lines.append(f"| {tag} | [{name}](#{name.lower()}) | {', '.join(by_primitive.get(name, [])) or '-'} | "
                     f"{quantized} |")
    return [*lines, ""]


def markdown(schema_text: str, ops_page: str) -> str:
    """The primitive reference page."""
    declarations = parse_schema(schema_text)
    union = next(d for d in declarations if d.kind == "union" and d.name == "Primitive")
    members = [m.name for m in union.members]
    tables = {d.name: d for d in declarations if d.kind == "table"}
    enums = [d for d in declarations if d.kind == "enum"]
    by_primitive, unmeasured = onnx_ops_by_primitive(ops_page)
    lines = [HEADER, f"{len(members)} primitives, in the order of the `Primitive` union (its tag, stored "
             "in each node).", "", *_index(members, by_primitive)]
    section = None
    for tag, name in enumerate(members, 1):
        table = tables[name]
        if table.section != section:
            section = table.section
            lines += [f"## {section[0].upper()}{section[1:]}", ""]
        lines += _table_section(table, {e.name for e in enums}, by_primitive.get(name, []), tag)
    others = [t for name, t in tables.items() if name not in members]
    for table in others:
        lines += [f"## {table.name} (part of another table)", "", " ".join(table.doc), "",
                  "| field | type | meaning |", "|---|---|---|",
                  *(f"| `{m.name}` | {m.type} | {_meaning(table.name, m)} |" for m in table.members), ""]
    lines += ["## Enums", "", *(line for enum in enums for line in _enum_section(enum))]
    if unmeasured:
        lines += ["## ONNX ops mapped without a measured case", "",
                  "These convert, but no single-op case of ONNX's tests showed which primitives they become: "
                  + ", ".join(unmeasured) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Writes the reference to the given path (or prints it)."""
    parser = argparse.ArgumentParser(prog="python -m lite.tools.primitives", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the markdown file to write (default: print it)")
    args = parser.parse_args(argv)
    text = markdown(SCHEMA.read_text(), OPS_PAGE.read_text())
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
