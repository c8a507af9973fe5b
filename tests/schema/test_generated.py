"""The committed flatbuffers code matches the .fbs files; attribute codecs cover the schema."""

import filecmp
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lite.schema.primitives import ENUM_FIELDS, PRIMITIVE_TYPES, default_attrs

SCHEMA = Path(__file__).resolve().parents[2] / "schema"


@pytest.mark.skipif(shutil.which("flatc") is None, reason="flatc (Debian: flatbuffers-compiler) not installed")
def test_committed_code_matches_schema(tmp_path):
    subprocess.run([str(SCHEMA / "generate.sh"), str(tmp_path / "fb")], check=True)
    diff = filecmp.dircmp(SCHEMA / "fb", tmp_path / "fb")
    assert not (diff.diff_files or diff.left_only or diff.right_only), "run schema/generate.sh"


def test_every_enum_field_is_decoded_by_name():
    text = (SCHEMA / "ops.fbs").read_text()
    enums = set(re.findall(r"^enum (\w+)", text, re.M))
    fields = re.findall(r"(\w+): (\w+)\s*[;=]", text)
    enum_fields = {name for name, type_ in fields if type_ in enums}
    assert enum_fields == set(ENUM_FIELDS)


def test_every_primitive_has_defaults():
    for op_type in PRIMITIVE_TYPES:
        assert isinstance(default_attrs(op_type), dict)
