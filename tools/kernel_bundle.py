"""Compiles the fast kernels ahead of time, for every instruction-set level, into the package.

    python -m lite.tools.kernel_bundle build            # every level, into lite/kernels/fast/aot
    python -m lite.tools.kernel_bundle build --levels host
    python -m lite.tools.kernel_bundle record           # rewrites the manifest (a developer's step)

``build`` reads the manifest (``lite/kernels/fast/aot_manifest.json``: per level, each kernel and the
argument types it is called with) and compiles each entry in a child process that targets the level,
with the bundle's folder as its cache; nothing runs, so one machine builds every level. A wheel built
afterwards ships the folder, and a fresh install copies the level of its CPU into its empty cache
(``lite.kernels.fast.bundle``). ``record`` runs the zoo's models (float, and int8 as onnxruntime's
quantizer writes them, at one and two threads) in a child per level the host can run, and writes what
each compiled. Kernels outside the manifest compile on first use, as without a bundle.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from lite.kernels.fast import bundle, targets

CHILD_TIMEOUT_S = 1800.0
"""Seconds one level's child may take (recording runs every zoo model, in four forms, at two thread counts)."""

FLOAT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet",
                "inception_block", "bert_encoder")
INT8_MODELS = ("resnet18", "mobilenet_v2", "inception_block", "bert_encoder")
INT8_MODES = ("static", "dynamic", "weight-only")
THREADS = (1, 2)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    levels = _levels(args.levels)
    if not levels:
        print("kernel_bundle: this CPU has none of the levels (or DELITE_KERNEL_TARGET=host): nothing to do")
        return 0
    if args.command == "record":
        return record(levels, Path(args.manifest))
    return build(levels, Path(args.manifest), Path(args.out))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lite.tools.kernel_bundle", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "record"))
    parser.add_argument("--levels", default="all",
                        help="all, host (the level of this CPU), or names separated by commas: "
                        + ", ".join(targets.LEVELS) + " (record: only levels this CPU can run)")
    parser.add_argument("--manifest", default=str(bundle.MANIFEST), help="the manifest read (build) or written")
    parser.add_argument("--out", default=str(bundle.BUNDLE), help="the bundle folder (build); one subfolder a level")
    return parser


def _levels(text: str) -> list[str]:
    from llvmlite import binding

    host = targets.host_level(binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten())
    if text == "all":
        return list(targets.LEVELS)
    if text == "host":
        return [host] if host else []
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in targets.LEVELS]
    if unknown:
        raise SystemExit(f"kernel_bundle: unknown level(s) {', '.join(unknown)}; expected {', '.join(targets.LEVELS)}")
    return names


# ---- the manifest's entries: which kernels, for which argument types -----------------------------------------


def encode_type(numba_type) -> Any:
    """A numba argument type as JSON: arrays by dtype, dimensions, layout and flags; scalars by name;
    integer and boolean literals by value. Other types raise ``TypeError`` (the manifest cannot carry them)."""
    from numba.core import types

    if isinstance(numba_type, types.Array):
        return {"array": str(numba_type.dtype), "ndim": numba_type.ndim, "layout": numba_type.layout,
                "readonly": not numba_type.mutable, "aligned": numba_type.aligned}
    if isinstance(numba_type, types.BooleanLiteral):
        return {"literal": bool(numba_type.literal_value)}
    if isinstance(numba_type, types.IntegerLiteral):
        return {"literal": int(numba_type.literal_value)}
    if isinstance(numba_type, types.Integer | types.Float | types.Boolean):
        return str(numba_type)
    raise TypeError(f"a kernel argument of numba type {numba_type} cannot be written to the manifest")


def decode_type(encoded: Any):
    """The numba type ``encode_type`` wrote."""
    from numba.core import types

    if isinstance(encoded, str):
        scalar = getattr(types, encoded, None)
        if not isinstance(scalar, types.Integer | types.Float | types.Boolean):
            raise ValueError(f"manifest: {encoded!r} is not a numba scalar type")
        return scalar
    if isinstance(encoded, dict) and isinstance(encoded.get("literal"), bool | int):
        value = encoded["literal"]
        return types.literal(value if isinstance(value, bool) else int(value))
    if isinstance(encoded, dict) and "array" in encoded:
        dtype = decode_type(encoded["array"])
        return types.Array(dtype, int(encoded["ndim"]), str(encoded["layout"]), readonly=bool(encoded["readonly"]),
                           aligned=bool(encoded["aligned"]))
    raise ValueError(f"manifest: cannot read the type {encoded!r}")


def kernel_modules() -> list[ModuleType]:
    """Every module of ``lite.kernels.fast``, imported."""
    package = bundle.MANIFEST.parent
    return [importlib.import_module(f"lite.kernels.fast.{p.stem}") for p in sorted(package.glob("*.py"))
            if p.stem != "__init__"]


def compiled_entries() -> list[dict[str, Any]]:
    """What this process compiled or loaded: each jitted function with its argument types, and each
    crew job compiled as a C function, sorted (the manifest's entries for one level)."""
    from numba.core.registry import CPUDispatcher

    from lite.kernels.fast import crew

    entries = []
    for module in kernel_modules():
        for name, value in sorted(vars(module).items()):
            if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__:
                for signature in value.signatures:
                    try:
                        encoded = [encode_type(t) for t in signature]
                    except TypeError:
                        continue  # NOTE: compiled again when used; the rest of the bundle stands
                    entries.append({"module": module.__name__, "function": name, "args": encoded})
    for function in crew.compiled_jobs():
        entries.append({"module": function.__module__, "function": function.__name__, "job": True})
    return sorted(entries, key=lambda e: json.dumps(e, sort_keys=True))


def compile_entries(entries: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """Compiles (into the cache) every manifest entry; (how many compiled, a line per entry that
    could not be)."""
    from lite.kernels.fast import crew

    done, failed = 0, []
    crew.dispatch_address()
    for entry in entries:
        try:
            function = getattr(importlib.import_module(entry["module"]), entry["function"])
            if entry.get("job"):
                crew.job_address(function)
            else:
                function.compile(tuple(decode_type(t) for t in entry["args"]))
            done += 1
        except Exception as error:  # NOTE: a stale entry (renamed, retyped) must not stop the build
            failed.append(f"{entry['module']}.{entry['function']}: {type(error).__name__}: {error}")
    return done, failed


# ---- build ----------------------------------------------------------------------------------------------------


def build(levels: list[str], manifest_path: Path, out: Path) -> int:
    """Compiles the manifest's entries for each level into ``out/<level>``; 1 if one failed."""
    manifest = json.loads(manifest_path.read_text())
    status = 0
    for level in levels:
        entries = manifest["levels"].get(level)
        if not entries:
            print(f"{level}: no entries in {manifest_path.name} (record on a machine that has the level)")
            continue
        start = time.perf_counter()
        folder = out / level
        shutil.rmtree(folder, ignore_errors=True)
        result = _child({"action": "build", "level": level, "entries": entries, "folder": str(folder)}, level)
        for line in result["failed"]:
            print(f"  {level}: not compiled: {line}")
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{level}: {result['compiled']} of {len(entries)} kernels in {time.perf_counter() - start:.1f} s, "
              f"{size / 2**20:.1f} MiB -> {folder}")
        status |= bool(result["failed"])
    return status


def _build_child(request: dict[str, Any]) -> dict[str, Any]:
    from lite.kernels import fast

    numba = fast.numba_module()
    folder = Path(numba.config.CACHE_DIR)
    compiled, failed = compile_entries(request["entries"])
    target = Path(request["folder"])
    shutil.copytree(folder, target)
    info = fast.bundle_info()
    (target / bundle.INFO).write_text(json.dumps(info, indent=1) + "\n")
    return {"compiled": compiled, "failed": failed}


# ---- record ---------------------------------------------------------------------------------------------------


def record(levels: list[str], manifest_path: Path) -> int:
    """Runs the zoo's workloads per level (each a level this CPU runs) and writes the manifest."""
    from llvmlite import binding

    host_features = binding.get_host_cpu_features().flatten()
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"format": 1, "levels": {}}
    for level in levels:
        if not targets.runs(level, host_features):
            print(f"{level}: this CPU cannot run it; its entries stay as they were")
            continue
        start = time.perf_counter()
        manifest["levels"][level] = _child({"action": "record"}, level)["entries"]
        print(f"{level}: {len(manifest['levels'][level])} entries in {time.perf_counter() - start:.1f} s")
    manifest["workloads"] = {"float": list(FLOAT_MODELS), "int8": list(INT8_MODELS), "int8_modes": list(INT8_MODES),
                             "threads": list(THREADS)}
    manifest_path.write_text(manifest_text(manifest))
    return 0


def manifest_text(manifest: dict[str, Any]) -> str:
    """The manifest as JSON with one entry per line (diffs show which kernels changed)."""
    levels = ",\n".join(f" {json.dumps(level)}: [\n" + ",\n".join(f"  {json.dumps(e, sort_keys=True)}" for e in entries)
                        + "\n ]" for level, entries in sorted(manifest["levels"].items()))
    head = {k: v for k, v in sorted(manifest.items()) if k != "levels"}
    return json.dumps(head, sort_keys=True)[:-1] + ', "levels": {\n' + levels + "\n}}\n"


def _record_child() -> dict[str, Any]:
    import numpy as np

    from lite.tools import zoo
    from lite.tools.converter import convert
    from lite.tools.converter.quantize import quantize_onnx

    rng = np.random.default_rng(0)
    for name in FLOAT_MODELS:
        _run(convert(zoo.MODELS[name]()), rng)
    for name in INT8_MODELS:
        model = zoo.MODELS[name]()
        samples = {i.name: np.stack([_random(i, rng) for _ in range(4)]) for i in _inputs(model)}
        for mode in INT8_MODES:
            _run(convert(quantize_onnx(model, mode, samples if mode == "static" else None)), rng)
    return {"entries": compiled_entries()}


def _run(data: bytes, rng) -> None:
    import lite

    for threads in THREADS:
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(thread_num=threads))
        inputs = model.get_inputs()
        for tensor in inputs:
            tensor.set_data_from_numpy(_random_array(tensor.dtype, tensor.shape, rng))
        model.predict(inputs)


def _inputs(model) -> list:
    return list(model.graph.input)


def _random(value, rng):
    import onnx

    tensor = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
    return _random_array(dtype, [d.dim_value or 1 for d in tensor.shape.dim], rng)


def _random_array(dtype, shape, rng):
    import numpy as np

    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


# ---- the child processes --------------------------------------------------------------------------------------


def _child(request: dict[str, Any], level: str) -> dict[str, Any]:
    """Runs ``request`` in a fresh Python targeting ``level`` with an empty cache; its JSON answer."""
    with tempfile.TemporaryDirectory(prefix="delite-kernels-") as cache:
        environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES",
                                                                     "NUMBA_CACHE_DIR")}
        environ.update(DELITE_KERNEL_TARGET=level, DELITE_NUMBA_CACHE=cache, DELITE_KERNEL_BUNDLE="off")
        request_path = Path(cache) / "request.json"
        request_path.write_text(json.dumps(request))
        code = "import sys; from lite.tools.kernel_bundle import child; child(sys.argv[1])"
        done = subprocess.run([sys.executable, "-c", code, str(request_path)], env=environ, capture_output=True,
                              text=True, timeout=CHILD_TIMEOUT_S)
        if done.returncode != 0:
            raise SystemExit(f"kernel_bundle: the {level} child failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def child(request_path: str) -> None:
    """A child's entry point: reads the request, prints the answer as one JSON line."""
    request = json.loads(Path(request_path).read_text())
    answer = _build_child(request) if request["action"] == "build" else _record_child()
    print(json.dumps(answer))


if __name__ == "__main__":
    sys.exit(main())
