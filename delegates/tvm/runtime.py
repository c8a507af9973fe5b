"""The TVM runtime alone: devices, CPU features and the VM's calling convention, without TVM's compiler.

``import tvm`` loads the compiler and its Python packages (seconds); running a module compiled
ahead of time needs only ``tvm_ffi`` and ``libtvm_runtime`` (a tenth of a second), which is
all a device without a compiler has. Nothing here imports ``tvm``; when something already
did, the library it loaded is the one used.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.metadata
import logging
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from lite.aligned import ALIGNMENT, aligned_array
from lite.errors import MissingPackageError
from lite.tensor import Tensor

logger = logging.getLogger("lite")

DEVICE_TYPES = {"llvm": 1, "c": 1, "cuda": 2, "opencl": 4, "vulkan": 7, "metal": 8, "rocm": 10}
EXTRA_LIBRARIES = {"cuda": "libtvm_runtime_cuda.so"}  # device runtimes shipped beside libtvm_runtime
CPU_DLPACK = 1  # kDLCPU
EXIST, COMPUTE_VERSION = 0, 4  # TVM's DeviceAttrKind values
ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "popcnt", "movbe", "amx", "aes", "pclmul", "sha",
                "vaes", "vpclmul", "gfni", "abm", "adx", "asimd", "sve", "neon", "fp16", "dotprod", "i8mm", "bf16")


def ffi():
    """``tvm_ffi`` with ``libtvm_runtime`` loaded (globally, as ``import tvm`` loads it).

    Found through the installed package's metadata, not by importing ``tvm``: a device may have
    the runtime without the compiler.

    Raises:
        MissingPackageError: the TVM runtime is not installed.
    """
    library = runtime_library()
    try:
        tvm_ffi = _import_tvm_ffi()
    except ImportError as exc:
        library, problem = None, str(exc)
    else:
        problem = "libtvm_runtime.so not found"
    if library is None:
        raise MissingPackageError(f'TVMDelegate needs tvm, which is not installed here ({problem}): '
                                  'pip install "delite[tvm]"')
    _load_runtime(str(library))
    return tvm_ffi


def runtime_library(name: str = "libtvm_runtime.so") -> Path | None:
    """Where TVM's runtime library ``name`` is: ``$TVM_LIBRARY_PATH``, else the installed apache-tvm package."""
    override = os.environ.get("TVM_LIBRARY_PATH", "").strip()
    if override:
        path = Path(override) / name
    else:
        try:
            path = Path(importlib.metadata.distribution("apache-tvm").locate_file(f"tvm/lib/{name}"))
        except importlib.metadata.PackageNotFoundError:
            return None
    return path if path.is_file() else None


@functools.cache
def _load_runtime(path: str) -> None:
    """Loads one of TVM's runtime libraries globally, once (raises OSError when it cannot be loaded)."""
    if sys.modules.get("tvm") is None:  # NOTE: else ``import tvm`` loaded it already
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _import_tvm_ffi():
    """``tvm_ffi``, imported (the first time) without importing torch."""
    module = sys.modules.get("tvm_ffi")
    if module is not None:
        return module
    with _without_torch():
        import tvm_ffi
    return tvm_ffi


@contextlib.contextmanager
def _without_torch() -> Iterator[None]:
    """Keeps ``tvm_ffi`` from importing torch (1.2 s) for an interop the runtime does not use."""
    # NOTE: tvm_ffi imports torch, when installed, only to order symbol loading on one Windows setup;
    # a user who already imported torch keeps it.
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None
    try:
        yield
    finally:
        if blocked and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


@contextlib.contextmanager
def native_output_to_log() -> Iterator[None]:
    """Sends what native code writes on stderr meanwhile to the ``lite`` logger at debug level.

    TVM's C++ runtime prints a warning line per memory scope when it saves or loads a VM
    executable (tens of lines for one model), which says nothing to a user.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode(errors="replace").strip()
            if text:
                logger.debug("TVM runtime output: %s", text)


def tvm_version() -> str:
    """The installed TVM's version (a saved module runs only on the runtime that compiled it)."""
    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        import tvm

        return tvm.__version__


def device(kind: str):
    """Device 0 for a target kind ("llvm" -> the CPU), or None when this machine has none."""
    tvm_ffi = ffi()
    device_type = DEVICE_TYPES[kind]
    extra = runtime_library(EXTRA_LIBRARIES[kind]) if kind in EXTRA_LIBRARIES else None
    if extra is not None:
        try:
            _load_runtime(str(extra))
        except OSError:
            return None  # NOTE: the device's driver library (libcuda) is missing
    try:
        exists = tvm_ffi.get_global_func("runtime.GetDeviceAttr")(device_type, 0, EXIST)
    except Exception:  # NOTE: TVM raises when no runtime for this device type is registered
        return None
    return tvm_ffi.Device(device_type, 0) if exists else None


def compute_version(dev) -> str:
    """A GPU's compute version ("9.0"), as TVM reports it."""
    return str(ffi().get_global_func("runtime.GetDeviceAttr")(dev.dlpack_device_type(), dev.index, COMPUTE_VERSION))


def cpu_description() -> dict[str, object]:
    """This CPU's architecture and instruction-set features (what compiled code may require)."""
    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags = set(value.split())
                break
    return {"machine": platform.machine(), "features": sorted(f for f in flags if f.startswith(ISA_PREFIXES))}


class VMCalls:
    """How a graph kernel hands arrays to a Relax VM function and takes the results back.

    Subclasses set ``on_cpu`` and ``device`` and call ``_argument`` / ``_store``; staging
    buffers live in ``_staging``.
    """

    on_cpu: bool = True
    device = None

    @functools.cached_property
    def _ffi(self):
        """``tvm_ffi``, looked up once per kernel (``ffi()`` reads the package metadata)."""
        return ffi()

    def _argument(self, tensor: Tensor):
        """The tensor's data as a TVM tensor: zero-copy (DLPack) on the CPU when 64-byte aligned.

        # NOTE: TVM's CPU kernels assume 64-byte aligned inputs (misaligned ones crash AVX-512 code).
        # tvm_ffi.from_dlpack checks alignment and contiguity itself and raises, at no cost when they
        # hold (reading the address in Python costs more than the whole call), so anything it refuses
        # (misaligned or strided) is copied into an aligned staging buffer first. The runtime makes a
        # graph kernel's inputs read-only while it runs: DLPack 1.0 (a versioned capsule) carries that.
        """
        tvm_ffi = self._ffi
        array = tensor.data
        if not self.on_cpu or array.size == 0:  # NOTE: numpy exports an empty array with strides TVM refuses
            return self._upload(tensor, array)
        try:
            capsule = array.__dlpack__(max_version=(1, 0))
            return tvm_ffi.from_dlpack(capsule, require_alignment=ALIGNMENT, require_contiguous=True)
        except (RuntimeError, BufferError, ValueError, TypeError):
            staging = self._staging.get(tensor)
            if staging is None or staging.shape != array.shape or staging.dtype != array.dtype:
                staging = self._staging[tensor] = aligned_array(array.shape, array.dtype)
            np.copyto(staging, array)
            return tvm_ffi.from_dlpack(staging, require_alignment=ALIGNMENT, require_contiguous=True)

    def _upload(self, tensor: Tensor, array: np.ndarray):
        """A device copy of ``array`` in a buffer kept per input (GPU and other non-CPU targets).

        # NOTE: through the runtime's own functions, not ``tvm.runtime``: a saved partition runs where
        # ``import tvm`` (the compiler) fails.
        """
        tvm_ffi = self._ffi
        buffer, dtype = self._staging.get(tensor), tvm_ffi.dtype(array.dtype.name)
        if buffer is None or tuple(buffer.shape) != array.shape or buffer.dtype != dtype:
            allocate = tvm_ffi.get_global_func("runtime.TVMTensorAllocWithScope")
            buffer = self._staging[tensor] = allocate(tvm_ffi.Shape(array.shape), dtype, self.device, None)
        source = np.ascontiguousarray(array)
        tvm_ffi.get_global_func("runtime.TVMTensorCopyFromBytes")(buffer, ctypes.c_void_p(source.ctypes.data),
                                                                  source.nbytes)
        return buffer

    def _store(self, tensor: Tensor, value) -> None:
        """Copies a result into the runtime's output array (a device result: straight into it)."""
        data = tensor.data
        if data is None or data.shape != tuple(value.shape) or not data.flags.writeable:
            # NOTE: the runtime preallocates outputs; this keeps the kernel correct if it did not
            tensor.set_data_from_numpy(np.array(np.from_dlpack(value)) if self.on_cpu else self._download(value))
        elif self.on_cpu:
            np.copyto(data, np.from_dlpack(value))
        elif data.flags.c_contiguous:
            self._copy_out(value, data)  # NOTE: as bytes, not DLPack, which refuses bfloat16 arrays
        else:
            np.copyto(data, self._download(value))

    def _download(self, value) -> np.ndarray:
        """A device tensor's values in a new numpy array."""
        array = np.empty(tuple(value.shape), np.dtype(str(value.dtype)))
        self._copy_out(value, array)
        return array

    def _copy_out(self, value, array: np.ndarray) -> None:
        """Copies a device tensor's values into the C-contiguous ``array`` of its shape and dtype."""
        self._ffi.get_global_func("runtime.TVMTensorCopyToBytes")(value, ctypes.c_void_p(array.ctypes.data),
                                                                  array.nbytes)
