"""The compiled-kernel layer: where it caches, what build reports, and the model without it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.kernels import fast
from lite.kernels.fast import cache_loading
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime

REPO = Path(__file__).resolve().parents[3]


def depthwise_model():
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=8, pads=[1, 1, 1, 1]),
         helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], "dw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 20, 20])],
        [weight, bias, numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("DELITE_NUMBA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fast.cache_directory() == tmp_path / "delite" / "numba"
    monkeypatch.setenv("DELITE_NUMBA_CACHE", str(tmp_path / "mine"))
    assert fast.cache_directory() == tmp_path / "mine"


def test_code_compiled_with_other_options_is_not_found(monkeypatch):
    """numba's cache keys on the source only: the options name the cache's subfolder."""
    key = fast._cache_key()
    folder = Path(fast.numba_module().config.CACHE_DIR).name  # the key, then the level where there is one
    assert folder in (key, f"{key}-{fast.target_level()}") or os.environ.get("NUMBA_CACHE_DIR")
    monkeypatch.setitem(fast.JIT_OPTIONS, "error_model", "python")
    assert fast._cache_key() != key


def test_code_compiled_from_other_sources_is_not_found(monkeypatch, tmp_path):
    """A caller's cached code compiled in another file's function: a change there is a new folder."""
    (tmp_path / "kernel.py").write_text("A = 1\n")
    constants = tmp_path / "constants.py"
    constants.write_text("B = 2\n")
    monkeypatch.setattr(fast, "SOURCES", (tmp_path, constants))
    key = fast._cache_key()
    constants.write_text("B = 3\n")
    changed = fast._cache_key()
    (tmp_path / "other.py").write_text("")
    assert len({key, changed, fast._cache_key()}) == 3


def test_editing_the_numpy_elementwise_kernels_keeps_the_compiled_cache(monkeypatch):
    """The cache key reads SOURCES: lite/kernels/elementwise.py (numpy kernels) is not among them, so
    an edit there leaves every compiled kernel cached."""
    numpy_kernels = Path(fast.__file__).parents[1] / "elementwise.py"
    key, read = fast._cache_key(), Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: read(path) + (b"# edited\n" if path == numpy_kernels else b""))
    assert fast._cache_key() == key
    edited = Path(fast.__file__).parents[2] / "ops" / "activation.py"  # the constants compiled code reads
    monkeypatch.setattr(Path, "read_bytes", lambda path: read(path) + (b"# edited\n" if path == edited else b""))
    assert fast._cache_key() != key


def test_compiled_kernels_import_no_numpy_kernel_module():
    """What compiled code compiles in comes from lite.kernels.fast or lite.ops (SOURCES), never from
    the numpy kernels (lite.kernels.elementwise and the other op-family modules), whose edits would
    then have to recompile everything. Every import counts, function-local ones too."""
    package = Path(fast.__file__).parent
    numpy_kernels = {f"lite.kernels.{p.stem}" for p in package.parent.glob("*.py")} - {
        "lite.kernels.__init__", "lite.kernels.window"}  # NOTE: window: Geometry, a named tuple of shapes
    found = {}
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):  # NOTE: ``from lite.kernels import elementwise`` too
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found.update({(path.name, name): name for name in names if name in numpy_kernels})
    assert not found
    assert not any(Path(source).name == "elementwise.py" for source in fast.SOURCES)


ALLOCATIONS = {"empty", "zeros", "ones", "full", "arange", "empty_like", "zeros_like"}


def test_compiled_kernels_keep_an_address_of_their_own_scratch_only_inside_the_loop_using_it():
    """numba frees an array after the last block that uses it: an address of a kernel's own scratch
    kept in a variable before a loop points at freed memory inside it, which another thread's
    allocation takes (``test_blocked_winograd``'s two threads). So such addresses are read inside
    the loop (where the array is then still used); one passed straight to a call is read where
    it is used."""
    found = []
    for path in Path(fast.__file__).parent.glob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in function.decorator_list):
                found += [f"{path.name}:{line}" for line in _addresses_kept_outside_loops(function)]
    assert not found


def _allocates(value: ast.expr) -> bool:
    """Whether an assigned value is a new array: numpy's constructors, or a copy."""
    if not isinstance(value, ast.Call):
        return False
    name = ast.unparse(value.func)
    return name.removeprefix("np.") in ALLOCATIONS or name.endswith(".copy")


def _addresses_kept_outside_loops(function: ast.FunctionDef) -> list[int]:
    """Lines of ``function`` that keep the address of an array it allocates in a variable, outside
    any loop."""
    scratch = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign) and _allocates(node.value)
               for target in node.targets if isinstance(target, ast.Name)}
    looped = {id(node) for loop in ast.walk(function) if isinstance(loop, ast.For | ast.While)
              for node in ast.walk(loop)}
    return [node.lineno for node in ast.walk(function) if isinstance(node, ast.Assign) and id(node) not in looped
            and any(ast.unparse(part) in {f"{name}.ctypes.data" for name in scratch} for part in ast.walk(node.value))]


def test_old_caches_are_pruned_to_the_most_recent(tmp_path):
    for age, name in enumerate(["jit-new", "jit-mid", "jit-old", "jit-oldest"]):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1000 - age, 1000 - age))
    (tmp_path / "placement").mkdir()  # not a compiler cache
    fast._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jit-mid", "jit-new", "placement"]


@pytest.mark.parametrize("why", ["no compiler", "switched off"])
def test_the_model_runs_on_numpy_kernels_without_the_compiler(monkeypatch, why):
    if why == "no compiler":
        monkeypatch.setattr(fast, "numba_module", lambda: None)
    else:
        monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    assert not fast.enabled()
    onnx_model = depthwise_model()
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1))
    x = np.random.default_rng(1).standard_normal((1, 8, 20, 20)).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    assert relative_l2(got, run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-6
    assert "jit" not in model.build_timings


BUILD_SCRIPT = """
import json, sys
import llvmlite.binding
parsed = []
parse_bitcode = llvmlite.binding.parse_bitcode
llvmlite.binding.parse_bitcode = lambda data: parsed.append(len(data)) or parse_bitcode(data)
import lite
import numpy as np
from lite.kernels.fast import activation
model = lite.Model()
model.build_from_file(sys.argv[1], context=lite.Context(thread_num=1))
registries = "numba.cpython.heapq" in sys.modules  # NOTE: imported by numba's refresh alone
values = np.linspace(-3, 3, 64).astype(np.float32)
sigmoid = np.empty_like(values)
activation.sigmoid_float32(values, sigmoid, np.float32(0))
parsed_loading = len(parsed)
from numba.core.runtime import rtsys
from lite.kernels.fast import cache_loading
runtime_loaded = isinstance(rtsys.library, cache_loading._LazyLinking)
import numba
@numba.njit(cache=False)
def fresh(values):
    out = np.empty_like(values)
    activation.sigmoid_float32(values, out, np.float32(0))  # NOTE: links the cached kernel's bitcode in
    return np.cumsum(values).max() + np.sort(values)[0] + out.sum()
fresh_right = float(fresh(values)) == float(np.cumsum(values).max() + np.sort(values)[0] + sigmoid.sum())
print(json.dumps({**model.build_timings, "registries": registries, "parsed_loading": parsed_loading,
                  "runtime_loaded": runtime_loaded,
                  "parsed_linking": len(parsed) - parsed_loading, "fresh_right": fresh_right,
                  "sigmoid_right": bool(np.allclose(sigmoid, 1 / (1 + np.exp(-values)), rtol=1e-6))}))
"""


@pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")
def test_the_first_build_compiles_and_reports_it_the_second_process_loads_from_the_cache(tmp_path):
    """The second process loads the cached kernels without numba's typing and lowering registries
    and without parsing their linking bitcode, and numba's runtime library from the file the first
    kept (``lite.kernels.fast.cache_loading``); a function it compiles afterwards still gets the
    registries, and links a cached kernel and the runtime in (its arrays are the runtime's)."""
    path = tmp_path / "dw.lite"
    path.write_bytes(convert(depthwise_model()))
    environment = {"DELITE_NUMBA_CACHE": str(tmp_path / "cache"), "DELITE_FAST_KERNELS": "1",
                   "DELITE_KERNEL_BUNDLE": "off"}  # NOTE: the bundle would spare the first process its compile

    def build_in_a_new_process() -> dict[str, float]:
        import os

        result = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(path)], cwd=REPO, capture_output=True,
                                text=True, env={**os.environ, **environment}, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout.strip().splitlines()[-1])

    first = build_in_a_new_process()
    assert list((tmp_path / "cache").rglob("*.nbi"))  # numba's cache index files
    second = build_in_a_new_process()
    assert first["jit"] > 0 and second["jit"] > 0
    assert second["jit"] < first["jit"] / 2, (first, second)
    assert first["registries"] and not second["registries"]
    assert second["parsed_loading"] == 0 and second["parsed_linking"] > 0, second
    assert not first["runtime_loaded"] and second["runtime_loaded"]
    assert list((tmp_path / "cache").rglob(cache_loading.RUNTIME_FILE))
    assert all(run[check] for run in (first, second) for check in ("fresh_right", "sigmoid_right"))


CREW_SCRIPT = """
import json, sys, numpy as np, lite
from lite.kernels.fast import crew
model = lite.Model()
model.build_from_file(sys.argv[1], context=lite.Context(thread_num=2))
built = {"jobs": crew._compiled_job.cache_info().currsize, "run": len(crew.run.signatures),
         "callback": crew.dispatch_address.cache_info().currsize}
model.predict([np.ones((1, 8, 20, 20), np.float32)])
predicted = {"jobs": crew._compiled_job.cache_info().currsize, "run": len(crew.run.signatures),
             "callback": crew.dispatch_address.cache_info().currsize}
print(json.dumps([crew.crew() is not None, built, predicted]))
"""


@pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")
def test_the_crew_and_its_jobs_compile_at_build(tmp_path):
    path = tmp_path / "dw.lite"
    path.write_bytes(convert(depthwise_model()))
    result = subprocess.run([sys.executable, "-c", CREW_SCRIPT, str(path)], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "DELITE_FAST_KERNELS": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    has_crew, built, predicted = json.loads(result.stdout.strip().splitlines()[-1])
    if not has_crew:
        pytest.skip("no crew here")
    assert built == predicted  # nothing compiled in the first predict
    # the depthwise planes' job and the epilogue's; ``run`` has a second signature where the OpenBLAS
    # callback was compiled (for its C int arguments) rather than loaded from the cache
    assert built["jobs"] == 2 and built["callback"] == 1 and built["run"] in (1, 2)


class _Binding:
    """llvmlite.binding's host queries, answering for another machine."""

    def __init__(self, name: str, features: str):
        self.name, self.features = name, features

    def get_host_cpu_name(self) -> str:
        return self.name

    def get_host_cpu_features(self):
        return type("Features", (), {"flatten": lambda _self: self.features})()


@pytest.mark.parametrize(("name", "features", "expected"), [
    ("emeraldrapids", "+avx2,+avx512f,+fma", "+avx2,+avx512f,+fma,-prefer-256-bit"),
    ("znver3", "+avx2,+fma,-avx512f", None),  # no AVX-512: nothing to widen
    ("cascadelake", "+avx2,+avx512f,+fma", None),  # slows its clock for 512-bit arithmetic
])
def test_loops_are_widened_on_avx512_cores_that_keep_their_clock(monkeypatch, name, features, expected):
    """Compiled for the host (``DELITE_KERNEL_TARGET=host``, or a CPU without a level)."""
    import llvmlite

    monkeypatch.setattr(llvmlite, "binding", _Binding(name, features))
    monkeypatch.setenv("DELITE_KERNEL_TARGET", "host")
    numba = type("Numba", (), {"config": type("Config", (), {"CPU_FEATURES": None, "CPU_NAME": None})()})()
    assert fast._choose_target(numba) == "host"
    features = numba.config.CPU_FEATURES
    assert features == expected


@pytest.mark.parametrize(("name", "features", "wide"), [
    ("emeraldrapids", "+avx2,+avx512f,+fma", True),
    ("znver3", "+avx2,+fma,-avx512f", False),  # sixteen 256-bit registers
    ("cascadelake", "+avx2,+avx512f,+fma", False),  # kept at 256 bits: LLVM splits 512-bit vectors
])
def test_the_register_tile_is_wide_only_where_the_code_gets_512_bit_registers(monkeypatch, name, features, wide):
    import llvmlite

    monkeypatch.setattr(llvmlite, "binding", _Binding(name, features))
    monkeypatch.setenv("DELITE_KERNEL_TARGET", "host")
    numba = type("Numba", (), {"config": type("Config", (), {"CPU_FEATURES": None, "CPU_NAME": None})()})()
    fast._choose_target(numba)
    monkeypatch.setattr(fast, "numba_module", lambda: numba)
    assert fast.wide_registers() == wide


def test_the_register_tile_is_narrow_without_the_compiler(monkeypatch):
    monkeypatch.setattr(fast, "numba_module", lambda: None)
    assert not fast.wide_registers()


def test_features_the_user_set_are_kept(monkeypatch):
    import llvmlite

    monkeypatch.setattr(llvmlite, "binding", _Binding("emeraldrapids", "+avx512f"))
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2")
    numba = type("Numba", (), {"config": type("Config", (), {"CPU_FEATURES": "+avx2", "CPU_NAME": None})()})()
    assert fast._choose_target(numba) == "host"
    assert numba.config.CPU_FEATURES == "+avx2"


def test_hosts_whose_features_cannot_be_read_keep_llvms_defaults(monkeypatch):
    import llvmlite

    class Unreadable(_Binding):
        def get_host_cpu_features(self):
            raise RuntimeError("failed to get host cpu features")

    monkeypatch.setattr(llvmlite, "binding", Unreadable("generic", ""))
    numba = type("Numba", (), {"config": type("Config", (), {"CPU_FEATURES": None, "CPU_NAME": None})()})()
    assert fast._choose_target(numba) == "host"  # NOTE: no level without the features
    features = numba.config.CPU_FEATURES
    assert features is None
