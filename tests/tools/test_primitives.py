"""docs/primitives.md: generated from schema/ops.fbs, docs/ops.md and the kernel registry, never stale."""

import re

from lite.tools.primitives import OPS_PAGE, ROOT, SCHEMA, markdown, parse_schema

PAGE = ROOT / "docs" / "primitives.md"


def test_the_committed_page_is_the_generated_one():
    assert PAGE.read_text() == markdown(SCHEMA.read_text(), OPS_PAGE.read_text()), (
        "docs/primitives.md is stale: run python -m lite.tools.primitives docs/primitives.md")


def test_every_union_member_has_its_section_and_index_row():
    (union,) = [d for d in parse_schema(SCHEMA.read_text()) if d.kind == "union"]
    text = PAGE.read_text()
    headings = set(re.findall(r"^### (\w+)$", text, re.MULTILINE))
    assert len(union.members) > 100
    for tag, member in enumerate(union.members, 1):
        assert member.name in headings, member.name
        assert f"| {tag} | [{member.name}](#{member.name.lower()}) |" in text


def test_fields_defaults_and_comments_are_read():
    tables = {d.name: d for d in parse_schema(SCHEMA.read_text()) if d.kind == "table"}
    conv = {m.name: m for m in tables["Conv2DFusion"].members}
    assert conv["pad_mode"].type == "PadMode" and conv["pad_mode"].default == "PAD"
    assert "top, left, bottom, right" in " ".join(tables["Conv2DFusion"].doc)
    assert tables["Reshape"].doc == ["inputs: x, shape (int64)"]  # a comment beside a one-line table
    assert [m.name for m in tables["Reshape"].members] == ["allowzero"]
    assert "downscaling" in " ".join({m.name: m for m in tables["Resize"].members}["antialias"].doc)


def test_the_page_says_what_maps_and_what_runs_quantized():
    section = PAGE.read_text().split("### Conv2DFusion\n")[1].split("\n### ")[0]
    assert "ONNX ops: Conv, QLinearConv." in section and "Quantized: yes" in section
    assert "| `pad_mode` | [PadMode](#padmode) | PAD |" in section
    where = PAGE.read_text().split("### Where\n")[1].split("\n### ")[0]
    assert "Quantized: no." in where
