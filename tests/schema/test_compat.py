"""Schema compatibility: frozen union tags and enum values, and golden models that must keep loading.

Frozen tags. A node stores its primitive as the positional tag of ``union Primitive``, and a tensor
its DataType as a number, so renumbering either misreads every existing file. The numbers are
frozen in primitive_tags.json (every enum and union of schema/*.fbs). To add a primitive, append
its table at the END of ``union Primitive`` (or a value at the end of an enum), run
schema/generate.sh, then append the new name with its tag to the json; the failing test prints the
line to add. Never edit or remove a recorded entry.

Frozen table fields. A table's fields are found by their slot, their place in the table, so a
field inserted before others, or removed, misreads every existing file. table_fields.json records
every table's fields in order; new fields go at the END of a table (older readers skip them).

Golden models. golden/v<N>.lite was written by format version N, with its input and expected outputs
in golden/v<N>.npz. Every later format version must still load every one of them and predict the
same outputs: a reader that learns version N+1 keeps reading version N. After bumping
FORMAT_VERSION, run ``python -m tests.schema.make_golden`` to add the new version's file (it never
overwrites an existing one).
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.schema.graph import FORMAT_VERSION
from tests.schema.make_golden import GOLDEN, write_golden

HERE = Path(__file__).resolve().parent
SCHEMA = HERE.parents[1] / "schema"
FROZEN: dict[str, dict[str, int]] = json.loads((HERE / "primitive_tags.json").read_text())
FROZEN_FIELDS: dict[str, list[str]] = json.loads((HERE / "table_fields.json").read_text())
GOLDEN_FILES = sorted(GOLDEN.glob("v*.lite"))
SAVED_GOLDEN_FILES = sorted(GOLDEN.glob("saved-v*.lite"))


def schema_enums() -> dict[str, dict[str, int]]:
    """Every enum and union of the .fbs files -> its members' values in the generated code."""
    text = "".join((SCHEMA / name).read_text() for name in ("model.fbs", "ops.fbs"))
    enums = {}
    for name in re.findall(r"^(?:enum|union) (\w+)", text, re.M):
        generated = getattr(importlib.import_module(f"lite.schema.fb.{name}"), name)
        enums[name] = {k: v for k, v in vars(generated).items() if not k.startswith("_")}
    return enums


def test_every_enum_and_union_is_frozen():
    missing = sorted(set(schema_enums()) - set(FROZEN))
    assert not missing, f"add {missing} with their values to tests/schema/primitive_tags.json"


@pytest.mark.parametrize("enum", sorted(FROZEN))
def test_frozen_values_never_change(enum):
    current = schema_enums().get(enum, {})
    changed = {name: (tag, current.get(name)) for name, tag in FROZEN[enum].items() if current.get(name) != tag}
    assert not changed, (
        f"{enum}: members renumbered or removed (name: (frozen, now)): {changed}. Existing .lite files "
        "would be misread: restore them, and append new members at the end instead")


@pytest.mark.parametrize("enum", sorted(FROZEN))
def test_new_members_are_appended_and_recorded(enum):
    last = max(FROZEN[enum].values())
    new = {name: tag for name, tag in schema_enums().get(enum, {}).items() if name not in FROZEN[enum]}
    early = {name: tag for name, tag in new.items() if tag <= last}
    assert not early, f"{enum}: {early} take frozen tags (<= {last}); append them at the end of {enum}"
    lines = "\n".join(f'    "{name}": {tag},' for name, tag in sorted(new.items(), key=lambda item: item[1]))
    assert not new, f"{enum} has new members: append them to tests/schema/primitive_tags.json:\n{lines}"


def schema_tables() -> dict[str, list[str]]:
    """Every table of the .fbs files -> its field names, in order."""
    text = "".join((SCHEMA / name).read_text() for name in ("model.fbs", "ops.fbs"))
    return {m.group(1): re.findall(r"^\s*(\w+)\s*:", m.group(2), re.M)
            for m in re.finditer(r"^table (\w+)\s*\{([^}]*)\}", text, re.M)}


@pytest.mark.parametrize("table", sorted(FROZEN_FIELDS))
def test_table_fields_are_only_appended(table):
    current = schema_tables().get(table, [])
    frozen = FROZEN_FIELDS[table]
    assert current[:len(frozen)] == frozen, (
        f"table {table}: fields {frozen} became {current}. Existing .lite files would be misread: restore them, "
        "and add new fields at the end of the table instead")
    new = current[len(frozen):]
    assert not new, f"table {table} has new fields {new}: append them to {table} in tests/schema/table_fields.json"


def test_every_table_is_frozen():
    missing = sorted(set(schema_tables()) - set(FROZEN_FIELDS))
    assert not missing, f"add {missing} with their fields to tests/schema/table_fields.json"


def test_the_current_format_version_has_a_golden_file():
    assert GOLDEN / f"v{FORMAT_VERSION}.lite" in GOLDEN_FILES, (
        f"format version {FORMAT_VERSION} has no golden model: run python -m tests.schema.make_golden")


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda path: path.stem)
def test_golden_model_predicts_its_stored_outputs(path):
    stored = np.load(path.with_suffix(".npz"))
    model = lite.Model()
    model.build_from_file(str(path), context=lite.Context())
    outputs = model.predict([stored[t.name] for t in model.get_inputs()])
    for tensor in outputs:
        np.testing.assert_allclose(tensor.get_data_to_numpy(), stored[tensor.name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda path: path.stem)
def test_golden_model_dynamic_batch_runs_row_by_row(path):
    stored = np.load(path.with_suffix(".npz"))
    model = lite.Model()
    model.build_from_file(str(path), context=lite.Context())
    (name,) = [t.name for t in model.get_inputs()]
    for row in range(len(stored[name])):
        for tensor in model.predict([stored[name][row:row + 1]]):
            np.testing.assert_allclose(tensor.get_data_to_numpy(), stored[tensor.name][row:row + 1],
                                       rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("path", SAVED_GOLDEN_FILES, ids=lambda path: path.stem)
def test_golden_model_with_a_saved_partition_loads_it_or_runs_natively(path):
    from lite.delegates.example_npu import ExampleNPUDelegate

    stored = np.load(path.with_suffix(".npz"))
    for suffix, delegates in (("", []), ("@npu", [ExampleNPUDelegate()])):
        model = lite.Model()
        model.build_from_file(str(path), context=lite.Context(delegates=delegates))
        assert {r.blob.split(":")[0] for r in model.partition_report() if r.blob} == {"loaded" if delegates
                                                                                      else "not used"}
        for tensor in model.predict([stored["x"]]):
            np.testing.assert_allclose(tensor.get_data_to_numpy(), stored[tensor.name + suffix], rtol=1e-6, atol=1e-6)


def test_the_current_format_version_has_a_saved_golden_file():
    assert GOLDEN / f"saved-v{FORMAT_VERSION}.lite" in SAVED_GOLDEN_FILES, (
        f"format version {FORMAT_VERSION} has no golden model with a saved partition: "
        "run python -m tests.schema.make_golden")


def test_make_golden_never_overwrites(tmp_path):
    path = write_golden(tmp_path)
    assert path.name == f"v{FORMAT_VERSION}.lite" and path.with_suffix(".npz").exists()
    with pytest.raises(FileExistsError, match="never rewritten"):
        write_golden(tmp_path)
