"""Partitions compiled ahead of time: saved into the ``.lite`` file, loaded with the TVM runtime alone.

``lite-convert model.onnx -o model.lite --delegate tvm`` builds the model, then saves each
compiled partition (``save``): the exported library (its weights compiled in), the shapes it
serves (the batch dim symbolic or not) and the values it baked in, in ``lite.blob``'s layout.
Beside the blob the file records what it was compiled for (``describe_target``): the TVM
version, the target, and for a CPU its architecture and instruction-set features.

On the device, ``SavedTVMKernel`` loads the library with ``tvm_ffi`` and ``libtvm_runtime``
(``lite.delegates.tvm.runtime``): TVM's compiler is not imported. Shapes the library does not
serve (a resize beyond its static shapes) compile the partition again, as a ``TVMGraphKernel``
would, where the compiler is installed.

The library is native machine code: a hostile file could run anything through it, and no
check can tell. ``TVMDelegate(trust_saved_code=True)`` is therefore required to load one; the
checks here (sha256 by the runtime, target, version, CPU features, layout) catch accidents
(a corrupt file, another machine), not attacks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.blob import load_json, pack, position, tensor_at, unpack
from lite.delegates.tvm import runtime
from lite.errors import ModelFormatError, NotSupportedError
from lite.kernel import Kernel
from lite.tensor import Tensor

if TYPE_CHECKING:
    from lite.delegates.tvm.kernel import TVMGraphKernel
    from lite.delegates.tvm.lowering import Lowered
    from lite.delegates.tvm.settings import TVMSettings

LAYOUT = 1  # bump when what a blob holds changes
POOLED_ALLOCATOR = 2
logger = logging.getLogger("lite")
OPERATORS = ("add", "sub", "mul", "floordiv", "floormod", "max", "min")
_APPLY = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__, "floordiv": int.__floordiv__,
          "floormod": int.__mod__, "max": max, "min": min}
Dims = list[Any]  # per dim: an int, "batch", or [operator, a, b]


# ---- ahead of time (needs TVM's compiler) -------------------------------------------------------

def describe_target(delegate: TVMSettings) -> str:
    """What a saved partition needs to run: TVM's version, the target and (CPU) the instruction set."""
    target = delegate.target
    text = {"layout": LAYOUT, "tvm": runtime.tvm_version(), "kind": delegate.kind, "target": str(target)}
    if delegate.on_cpu:
        text["cpu"] = runtime.cpu_description()
    elif "arch" in target.attrs:
        text["arch"] = str(target.attrs["arch"])
    return json.dumps(text, sort_keys=True)


def save(kernel: TVMGraphKernel) -> bytes | None:
    """The blob of a compiled partition; None before it compiled (shapes unknown at build).

    The partition is compiled again with its weights as parameters (``lower(...,
    weights_as_params=True)``), so the library holds code only and the weights come from the
    ``.lite`` file at load; where that fails, the library with the weights compiled in is saved.
    """
    if kernel.compiled is None:
        return None
    lowered, executable = _code_only(kernel)
    baked = _baked_positions(kernel.kernels, lowered.baked)
    weights = [[*position(kernel.kernels, t), t.dtype.name, list(t.shape)] for t in lowered.weights]
    header = {"symbolic": lowered.symbolic, "params": [_dims_json(lowered.dims[t]) for t in lowered.params],
              "outputs": [_dims_json(lowered.dims[t]) for t in lowered.outputs],
              "baked": [position for position, _ in baked], "weights": weights}
    arrays = {"library": np.frombuffer(_library_bytes(executable, lowered, kernel), np.uint8)}
    arrays.update({f"baked{i}": value for i, (_, value) in enumerate(baked)})
    return pack(header, arrays)


def _code_only(kernel: TVMGraphKernel):
    """The partition lowered and compiled with its weights as parameters; else what it compiled to."""
    from lite.delegates.tvm.compiler import compile_module
    from lite.delegates.tvm.lowering import lower

    delegate, compiled = kernel.delegate, kernel.compiled
    try:
        lowered = lower(kernel.kernels, kernel.inputs, kernel.outputs, compiled.lowered.symbolic,
                        weights_as_params=True)
        return lowered, compile_module(lowered.mod, delegate.target, delegate.database)
    except Exception as exc:  # NOTE: the library with weights compiled in is still right, only bigger
        logger.info("TVM %s: compiling with weights as parameters failed (%s: %s); saving the weights compiled in",
                    kernel.name, type(exc).__name__, exc)
        return compiled.lowered, compiled.library


def _library_bytes(library, lowered: Lowered, kernel: TVMGraphKernel) -> bytes:
    """The shared library of ``library`` (compiled from ``lowered``) as bytes."""
    from lite.delegates.tvm.compiler import compile_module

    with tempfile.TemporaryDirectory(prefix="delite-tvm-") as folder:
        path = Path(folder) / "partition.so"
        with runtime.native_output_to_log():
            try:
                library.export_library(str(path))
            except Exception:  # NOTE: a module loaded from the disk cache cannot be exported again: compile it
                delegate = kernel.delegate
                compile_module(lowered.mod, delegate.target, delegate.database).export_library(str(path))
        return path.read_bytes()


def _dims_json(dims: list) -> Dims:
    from tvm import tirx

    names = {tirx.Add: "add", tirx.Sub: "sub", tirx.Mul: "mul", tirx.FloorDiv: "floordiv", tirx.FloorMod: "floormod",
             tirx.Max: "max", tirx.Min: "min"}

    def one(dim) -> Any:
        if isinstance(dim, int):
            return dim
        if isinstance(dim, tirx.IntImm):
            return int(dim.value)
        if isinstance(dim, tirx.Var):
            return "batch"
        return [names[type(dim)], one(dim.a), one(dim.b)]

    return [one(d) for d in dims]


def _baked_positions(kernels: list[Kernel], baked: dict[Tensor, np.ndarray]) -> list[tuple[list[int], np.ndarray]]:
    """Each baked value with the (kernel, input) position that reads it in the partition."""
    return [(position(kernels, t), value) for t, value in baked.items()]


# ---- on the device (the runtime alone) ----------------------------------------------------------

def check_target(delegate: TVMSettings, target: str) -> None:
    """Raises NotSupportedError unless a partition saved for ``target`` can run with ``delegate`` here."""
    try:
        saved = load_json(target)
        kind, version = saved["kind"], saved["tvm"]
    except (ValueError, TypeError, KeyError) as exc:
        raise NotSupportedError(f"unreadable target description ({type(exc).__name__}: {exc})") from exc
    if saved.get("layout") != LAYOUT:
        raise NotSupportedError(f"saved in blob layout {saved.get('layout')}; this Delite reads layout {LAYOUT}")
    if kind != delegate.kind:
        raise NotSupportedError(f"compiled for target {kind!r}; this TVMDelegate targets {delegate.kind!r}")
    if version != runtime.tvm_version():
        raise NotSupportedError(f"compiled by TVM {version}; this runtime is TVM {runtime.tvm_version()}")
    if delegate.on_cpu:
        _check_cpu(saved.get("cpu"))
    elif saved.get("arch") and saved["arch"] != _device_arch(delegate):
        raise NotSupportedError(f"compiled for {saved['arch']}; this GPU is {_device_arch(delegate)}")
    if delegate.trust_saved_code is not True:  # NOTE: a bool by its setter; nothing else may enable it
        raise NotSupportedError("it is native code compiled elsewhere, which no check can make safe: "
                                "TVMDelegate(trust_saved_code=True) loads it, for files you trust")


def _check_cpu(saved: Any) -> None:
    here = runtime.cpu_description()
    if not isinstance(saved, dict) or saved.get("machine") != here["machine"]:
        got = saved.get("machine") if isinstance(saved, dict) else saved
        raise NotSupportedError(f"compiled for a {got} CPU; this one is {here['machine']}")
    missing = sorted(set(saved.get("features") or ()) - set(here["features"]))
    if missing:
        raise NotSupportedError(f"compiled for a CPU with {', '.join(missing[:8])}, which this one lacks")


def _device_arch(delegate: TVMSettings) -> str:
    return "sm_" + runtime.compute_version(delegate.device).replace(".", "")


class SavedTVMKernel(runtime.VMCalls, Kernel):
    """A partition compiled ahead of time, run by the TVM runtime alone.

    ``prepare()`` loads the saved library (no compiler). When the partition's shapes leave
    what the library serves, ``resize()`` compiles it again as a ``TVMGraphKernel``
    (``recompiled``), where TVM's compiler is installed; where it is not, that fails, and the
    runtime runs the partition's native kernels (``Context(fallback=True)``).

    Raises:
        ModelFormatError: the blob is malformed (checked when the kernel is made).
    """

    def __init__(self, delegate: TVMSettings, blob: memoryview, kernels: list[Kernel], inputs: list[Tensor],
                 outputs: list[Tensor], name: str):
        super().__init__(inputs, outputs, name=name, constants=[t for k in kernels for t in k.inputs])
        self.delegate, self.kernels = delegate, kernels
        self.on_cpu, self.device = delegate.on_cpu, delegate.device
        self.arguments = [t for t in inputs if not t.value_known]
        header, arrays = unpack(blob)
        self.library = arrays.get("library")
        self.symbolic, self.dims, self.baked = _parse_header(header, arrays, kernels, len(self.arguments),
                                                             len(outputs))
        self.weights = _weights(header.get("weights", []), kernels)
        self.prepared: list = []  # the weights as main_transform_params made them
        if self.library is None or self.library.dtype != np.uint8 or self.library.ndim != 1:
            raise ModelFormatError("TVM blob: no library")
        self.vm = self.function = None
        self.recompiled: TVMGraphKernel | None = None
        self._staging: dict[Tensor, np.ndarray] = {}

    def prepare(self) -> None:
        """Loads the library when shapes are known (else the first resize does)."""
        if all(-1 not in t.shape for t in [*self.arguments, *self.outputs]):
            self.resize()

    def resize(self) -> None:
        """Keeps the library if it serves the current shapes; else compiles the partition (TVMGraphKernel)."""
        if self.serves():
            self.recompiled = None
            if self.function is None:
                self.vm, self.function = _load_vm(self.library, self.device)
                if self.weights:
                    self.prepared = list(self.vm["main_transform_params"]([self._argument(t) for t in self.weights]))
            return
        if self.recompiled is None:
            from lite.delegates.tvm.kernel import TVMGraphKernel

            self.delegate.compiler()
            self.recompiled = TVMGraphKernel(self.delegate, self.kernels, self.inputs, self.outputs, self.name)
        self.recompiled.resize()

    def serves(self) -> bool:
        """True when the saved library computes the partition at the tensors' current shapes and values."""
        batch = None
        if self.symbolic:
            sizes = {t.shape[0] for t in self.arguments if t.shape}
            if len(sizes) != 1:
                return False
            batch = sizes.pop()
        try:
            for tensor, dims in zip([*self.arguments, *self.outputs], self.dims, strict=True):
                if len(dims) != len(tensor.shape) or any(_evaluate(d, batch) != s
                                                         for d, s in zip(dims, tensor.shape, strict=True)):
                    return False
        except ValueError:  # NOTE: "batch" in a static library's shapes: it serves nothing
            return False
        return all(t.data is not None and t.data.shape == v.shape and np.array_equal(t.data, v)
                   for t, v in self.baked)

    def execute(self) -> None:
        """Inputs to the VM (zero-copy where aligned), run, results into the output arrays."""
        if self.recompiled is not None:
            self.recompiled.execute()
            return
        if self.function is None:
            self.resize()
        result = self.function(*[self._argument(t) for t in self.arguments], *self.prepared)
        results = [result] if len(self.outputs) == 1 else list(result)
        for tensor, value in zip(self.outputs, results, strict=True):
            self._store(tensor, value)


def _parse_header(header: dict, arrays: dict[str, np.ndarray], kernels: list[Kernel], params: int,
                  outputs: int) -> tuple[bool, list[Dims], list[tuple[Tensor, np.ndarray]]]:
    """The blob's shapes and baked values, checked against the partition (a blob is untrusted input)."""
    try:
        dims = [*header["params"], *header["outputs"]]
        if len(header["params"]) != params or len(header["outputs"]) != outputs:
            raise ValueError(f"{len(header['params'])} parameters and {len(header['outputs'])} outputs, the "
                             f"partition has {params} and {outputs}")
        for shape in dims:
            for dim in shape:
                _evaluate(dim, 1)
        baked = []
        for i, place in enumerate(header["baked"]):
            if f"baked{i}" not in arrays:
                raise ValueError(f"baked value {i} has no array")
            baked.append((tensor_at(kernels, place), arrays[f"baked{i}"]))
        return bool(header["symbolic"]), dims, baked
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
        raise ModelFormatError(f"TVM blob: malformed header: {type(exc).__name__}: {exc}") from exc


def _weights(entries: Any, kernels: list[Kernel]) -> list[Tensor]:
    """The model's constants the library takes as parameters, each checked against what was saved."""
    try:
        weights = []
        for k, i, dtype, shape in entries:
            tensor = tensor_at(kernels, [k, i])
            if not tensor.is_const or tensor.data is None or tensor.dtype.name != dtype or list(tensor.shape) != shape:
                raise ValueError(f"weight at kernel {k}, input {i} is not the model's {dtype}{shape} constant")
            weights.append(tensor)
        return weights
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelFormatError(f"TVM blob: malformed weights: {type(exc).__name__}: {exc}") from exc


def _evaluate(dim: Any, batch: int | None) -> int:
    """A saved dim's value at ``batch``; ValueError for a form ``save`` does not write."""
    if isinstance(dim, int) and not isinstance(dim, bool):
        return dim
    if dim == "batch" and batch is not None:
        return batch
    if isinstance(dim, list) and len(dim) == 3 and dim[0] in OPERATORS:
        left, right = _evaluate(dim[1], batch), _evaluate(dim[2], batch)
        if dim[0] in ("floordiv", "floormod") and right == 0:
            raise ValueError("division by zero in a saved shape")
        return _APPLY[dim[0]](left, right)
    raise ValueError(f"saved dim {dim!r}")


@contextlib.contextmanager
def _library_file(library: np.ndarray) -> Iterator[str]:
    """A path the dynamic loader opens, holding ``library``: an in-memory file where the system has
    them (Linux ``memfd_create``), else a private temporary file; gone afterwards."""
    # NOTE: TVM picks a loader by the file name's suffix, so an in-memory file is named through a symlink
    with tempfile.TemporaryDirectory(prefix="delite-tvm-") as folder:
        path = os.path.join(folder, "partition.so")
        in_memory = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
        handle = (os.memfd_create("delite-tvm-partition") if in_memory
                  else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            view = memoryview(library).cast("B")
            while view:
                view = view[os.write(handle, view):]
            if in_memory:
                os.symlink(f"/proc/{os.getpid()}/fd/{handle}", path)
            yield path
        finally:
            os.close(handle)


def _load_vm(library: np.ndarray, device):
    """The Relax VM of a saved library and its ``main``."""
    tvm_ffi = runtime.ffi()
    with _library_file(library) as path, runtime.native_output_to_log():
        module = tvm_ffi.load_module(path)
        vm = module["vm_load_executable"]()
    devices = [device] if device.dlpack_device_type() == runtime.CPU_DLPACK else [device, tvm_ffi.device("cpu", 0)]
    arguments = [value for d in devices for value in (d.dlpack_device_type(), d.index, POOLED_ALLOCATOR)]
    vm["vm_initialization"](*arguments)
    return vm, vm["main"]
