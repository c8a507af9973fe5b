"""Kernels compiled ahead of time: seeding a new cache from a bundle, and a bundle built in one
process found, with nothing compiled, by a fresh one (the manifest: tests/tools/test_kernel_bundle.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lite.kernels import fast
from lite.kernels.fast import bundle, cache_loading, targets

REPO = Path(__file__).resolve().parents[3]


def _fake_bundle(root: Path, info: dict) -> Path:
    level = root / info["level"]
    (level / "lite" / "kernels" / "fast").mkdir(parents=True)
    (level / "lite" / "kernels" / "fast" / "f-1.py312.nbi").write_bytes(b"index")
    (level / "lite" / "kernels" / "fast" / "f-1.py312.1.nbc").write_bytes(b"code")
    (level / "lite" / "kernels" / "fast" / "notes.txt").write_text("not a cache file")
    (level / cache_loading.RUNTIME_FILE).write_bytes(b"runtime")
    (level / bundle.INFO).write_text(json.dumps(info))
    return level


def test_a_new_cache_folder_is_seeded_from_the_bundle_made_for_it(tmp_path, monkeypatch):
    info = bundle.bundle_info("jit-abc", "x86-64-v3", "0.99")
    _fake_bundle(tmp_path / "aot", info)
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", str(tmp_path / "aot"))
    folder = tmp_path / "cache"
    assert bundle.seed(folder, "jit-abc", "x86-64-v3", "0.99") == 3
    assert (folder / cache_loading.RUNTIME_FILE).read_bytes() == b"runtime"
    assert sorted(p.name for p in (folder / "lite" / "kernels" / "fast").iterdir()) == ["f-1.py312.1.nbc",
                                                                                       "f-1.py312.nbi"]
    # numba rewrites a cache file by renaming a new one over it: the bundle's file stays as it was
    index = folder / "lite" / "kernels" / "fast" / "f-1.py312.nbi"
    (index.parent / "new").write_bytes(b"rewritten")
    os.replace(index.parent / "new", index)
    assert (tmp_path / "aot" / "x86-64-v3" / "lite" / "kernels" / "fast" / "f-1.py312.nbi").read_bytes() == b"index"


@pytest.mark.parametrize("other", [("jit-other", "x86-64-v3", "0.99"), ("jit-abc", "x86-64-v4", "0.99"),
                                   ("jit-abc", "x86-64-v3", "0.98")])
def test_a_bundle_made_for_other_sources_another_level_or_numba_is_not_copied(tmp_path, monkeypatch, other):
    _fake_bundle(tmp_path / "aot", bundle.bundle_info("jit-abc", "x86-64-v3", "0.99"))
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", str(tmp_path / "aot"))
    assert bundle.seed(tmp_path / "cache", *other) == 0
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("info_text", ["{not json", "x" * (bundle.MAX_INFO_BYTES + 1), "[]"])
def test_an_unreadable_bundle_description_copies_nothing(tmp_path, monkeypatch, info_text):
    level = _fake_bundle(tmp_path / "aot", bundle.bundle_info("jit-abc", "x86-64-v3", "0.99"))
    (level / bundle.INFO).write_text(info_text)
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", str(tmp_path / "aot"))
    assert bundle.seed(tmp_path / "cache", "jit-abc", "x86-64-v3", "0.99") == 0


@pytest.mark.parametrize(("wanted", "reason"), [
    (("jit-abc", "x86-64-v3", "0.99"), ""),
    (("jit-other", "x86-64-v3", "0.99"), "the installed one was made for other sources or compiler options"),
    (("jit-abc", "x86-64-v3", "0.98"), "the installed one was made for numba 0.99"),
    (("jit-other", "x86-64-v3", "0.98"), "made for other sources or compiler options: rebuild it with python -m "
                                         "lite.tools.kernel_bundle build, numba 0.99"),
    (("jit-abc", "x86-64-v4", "0.99"), "none installed for x86-64-v4 in ")])
def test_the_reason_a_bundle_is_not_copied_names_what_differs(tmp_path, monkeypatch, wanted, reason):
    _fake_bundle(tmp_path / "aot", bundle.bundle_info("jit-abc", "x86-64-v3", "0.99"))
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", str(tmp_path / "aot"))
    said = bundle.unused_reason(*wanted)
    assert reason in said and bool(said) == bool(reason)
    assert (bundle.seed(tmp_path / "cache", *wanted) == 0) == bool(reason)


def test_an_unreadable_or_switched_off_bundle_says_so(tmp_path, monkeypatch):
    level = _fake_bundle(tmp_path / "aot", bundle.bundle_info("jit-abc", "x86-64-v3", "0.99"))
    (level / bundle.INFO).write_text("[]")
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", str(tmp_path / "aot"))
    assert bundle.unused_reason("jit-abc", "x86-64-v3", "0.99").endswith("bundle.json is unreadable")
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", "off")
    assert bundle.unused_reason("jit-abc", "x86-64-v3", "0.99") == "DELITE_KERNEL_BUNDLE=off"


def test_no_bundle_when_switched_off(tmp_path, monkeypatch):
    _fake_bundle(tmp_path / "aot", bundle.bundle_info("jit-abc", "x86-64-v3", "0.99"))
    monkeypatch.setenv("DELITE_KERNEL_BUNDLE", "off")
    assert bundle.bundle_root() is None
    assert bundle.seed(tmp_path / "cache", "jit-abc", "x86-64-v3", "0.99") == 0


SMALL_MANIFEST = [
    {"module": "lite.kernels.fast.activation", "function": "gelu_float32",
     "args": [{"array": "float32", "ndim": 1, "layout": "C", "readonly": False, "aligned": True},
              {"array": "float32", "ndim": 1, "layout": "C", "readonly": False, "aligned": True}, "float32"]},
]

_FRESH = """
import json, sys
import numpy as np
from lite.kernels import fast
from lite.kernels.fast import activation
x = np.linspace(-3, 3, 64, dtype=np.float32)
out = np.empty_like(x)
activation.gelu_float32(x, out, np.float32(0))
stats = activation.gelu_float32.stats
from numba.core.runtime import rtsys
from lite.kernels.fast import cache_loading
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "seeded": fast.seeded_files(), "level": fast.target_level(), "first": float(out[0]),
                  "runtime_loaded": isinstance(rtsys.library, cache_loading._LazyLinking)}))
"""


def test_a_bundle_is_found_by_a_fresh_process_with_an_empty_cache(tmp_path):
    """lite.tools.kernel_bundle build compiles the manifest into a bundle; a fresh process with an
    empty cache copies it and loads the kernel, and numba's runtime library, without compiling them."""
    if fast.numba_module() is None or fast.target_level() == targets.HOST:
        pytest.skip("no numba, or no instruction-set level here")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": 1, "levels": {fast.target_level(): SMALL_MANIFEST}}))
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    built = subprocess.run([sys.executable, "-m", "lite.tools.kernel_bundle", "build", "--levels", fast.target_level(),
                            "--manifest", str(manifest), "--out", str(tmp_path / "aot")],
                           capture_output=True, text=True, env=environ, cwd=REPO, timeout=600)
    assert built.returncode == 0, built.stderr
    assert f"{fast.target_level()}: 1 of 1 kernels" in built.stdout
    runs = []
    for bundle_root in (str(tmp_path / "aot"), "off"):
        environ.update(DELITE_KERNEL_BUNDLE=bundle_root, DELITE_NUMBA_CACHE=str(tmp_path / f"cache-{len(runs)}"))
        fresh = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, env=environ, cwd=REPO,
                               timeout=600)
        assert fresh.returncode == 0, fresh.stderr
        runs.append(json.loads(fresh.stdout.splitlines()[-1]))
    with_bundle, without = runs
    assert with_bundle["seeded"] >= 3 and with_bundle["hits"] == 1 and with_bundle["misses"] == 0
    assert with_bundle["runtime_loaded"] and not without["runtime_loaded"]
    assert without["seeded"] == 0 and without["hits"] == 0 and without["misses"] == 1
    assert with_bundle["first"] == without["first"]
