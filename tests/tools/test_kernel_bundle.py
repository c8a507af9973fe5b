"""python -m lite.tools.kernel_bundle: its levels and what it says (the build itself:
tests/kernels/fast/test_bundle.py)."""

from __future__ import annotations

import json

import pytest

from lite.kernels import fast
from lite.kernels.fast import bundle, targets
from lite.tools import kernel_bundle


def test_levels_by_name_all_or_the_hosts():
    assert kernel_bundle._levels("all") == list(targets.LEVELS)
    assert kernel_bundle._levels("x86-64-v3, x86-64-v4") == ["x86-64-v3", "x86-64-v4"]
    assert len(kernel_bundle._levels("host")) <= 1
    with pytest.raises(SystemExit, match="unknown level.*avx9"):
        kernel_bundle._levels("x86-64-v3,avx9")


def test_a_level_without_entries_is_said_and_skipped(tmp_path, capsys):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": 1, "levels": {}}))
    assert kernel_bundle.main(["build", "--levels", "x86-64-v3", "--manifest", str(manifest),
                               "--out", str(tmp_path / "aot")]) == 0
    assert "x86-64-v3: no entries in manifest.json" in capsys.readouterr().out
    assert not (tmp_path / "aot").exists()


def test_a_stale_entry_is_reported_and_fails_the_build(tmp_path, capsys):
    """A kernel renamed since the manifest was recorded: the rest compiles, the build says which."""
    if fast.numba_module() is None or fast.target_level() == targets.HOST:
        pytest.skip("no numba, or no instruction-set level here")
    manifest = tmp_path / "manifest.json"
    entry = {"module": "lite.kernels.fast.activation", "function": "no_such_kernel", "args": ["float32"]}
    manifest.write_text(json.dumps({"format": 1, "levels": {fast.target_level(): [entry]}}))
    assert kernel_bundle.main(["build", "--levels", fast.target_level(), "--manifest", str(manifest),
                               "--out", str(tmp_path / "aot")]) == 1
    out = capsys.readouterr().out
    assert "not compiled: lite.kernels.fast.activation.no_such_kernel: AttributeError" in out
    assert "0 of 1 kernels" in out


@pytest.fixture
def numba_types():
    if fast.numba_module() is None:
        pytest.skip("no numba here")
    from numba.core import types

    return types


def test_argument_types_survive_the_manifest(numba_types):
    t = numba_types
    written = [t.Array(t.float32, 4, "C"), t.Array(t.int8, 2, "A", readonly=True), t.Array(t.uint8, 1, "F"),
               t.int64, t.float32, t.uint64, t.boolean, t.literal(3), t.literal(False), t.literal(True)]
    encoded = json.loads(json.dumps([kernel_bundle.encode_type(x) for x in written]))
    assert [kernel_bundle.decode_type(x) for x in encoded] == written


def test_types_the_manifest_cannot_carry_are_refused(numba_types):
    with pytest.raises(TypeError, match="cannot be written"):
        kernel_bundle.encode_type(numba_types.UniTuple(numba_types.int64, 2))
    for bad in ["__import__", "Array", {"array": "object_", "ndim": 1, "layout": "C", "readonly": False,
                                        "aligned": True}, {"tuple": []}, {"literal": "3"}, 3]:
        with pytest.raises(ValueError, match="manifest"):
            kernel_bundle.decode_type(bad)


def test_every_manifest_entry_names_a_kernel_and_types_this_code_has(numba_types):
    """The committed manifest against the sources: a renamed kernel or a type that no longer reads
    fails here, not silently at build."""
    from numba.core.registry import CPUDispatcher

    manifest = json.loads(bundle.MANIFEST.read_text())
    assert set(manifest["levels"]) <= set(targets.LEVELS) and manifest["levels"]
    modules = {m.__name__: m for m in kernel_bundle.kernel_modules()}
    for entries in manifest["levels"].values():
        assert entries
        for entry in entries:
            function = getattr(modules[entry["module"]], entry["function"])
            if entry.get("job"):
                assert callable(function) and not isinstance(function, CPUDispatcher)
            else:
                assert isinstance(function, CPUDispatcher)
                assert all(kernel_bundle.decode_type(t) is not None for t in entry["args"])
