"""TVMGraphKernel: one partition compiled by TVM and run by the Relax VM."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from lite.delegates.tvm.cache import cache_key
from lite.delegates.tvm.compiler import compile_module, database_fingerprint
from lite.delegates.tvm.lowering import Lowered, lower
from lite.delegates.tvm.runtime import VMCalls
from lite.delegates.tvm.settings import TVMSettings
from lite.kernel import Kernel
from lite.tensor import Tensor

logger = logging.getLogger("lite")

MODULES_KEPT = 4  # compiled shape variants a graph kernel keeps in memory


class Compiled:
    """A lowered partition and the VM function that runs it."""

    def __init__(self, lowered: Lowered, library, device: tvm.runtime.Device, source: str):
        self.lowered = lowered
        self.library = library  # an Executable when compiled here, a loaded Module when it came from the cache
        self.vm = relax.VirtualMachine(library, device)
        self.function = self.vm["main"]  # NOTE: looked up once; a lookup per call costs ~1 us
        self.source = source  # where it came from first: "compiled" or "cache" (disk)


class TVMGraphKernel(VMCalls, Kernel):
    """Runs one partition as a single Relax function compiled by TVM.

    ``prepare()`` lowers the partition (weights become constants of the module) and compiles
    it, or loads it from the on-disk cache; with dynamic input shapes that waits for the first
    ``resize()``. ``resize()`` keeps the module when it serves the new shapes (a symbolic
    batch serves every batch size) and otherwise lowers and compiles again (through the caches).
    ``execute()`` passes the inputs to the VM zero-copy (DLPack) and copies the results into
    the runtime's output arrays.

    Attributes:
        kernels: the native kernels of the partition, in topological order.
        compiled: what runs now (None before the first compilation).
        events: (source, seconds) of every module this kernel obtained; source is "compiled",
            "cache" or "memory".
    """

    def __init__(self, delegate: TVMSettings, kernels: list[Kernel], inputs: list[Tensor], outputs: list[Tensor],
                 name: str):
        # NOTE: the model keeps the weights named in ``constants``: a resize that changes more than the batch
        # lowers the partition again and needs them (and the runtime's fallback does too).
        super().__init__(inputs, outputs, name=name, constants=[t for k in kernels for t in k.inputs])
        self.delegate = delegate
        self.on_cpu, self.device = delegate.on_cpu, delegate.device
        self.kernels = kernels
        self.arguments = [t for t in inputs if not t.value_known]
        self.compiled: Compiled | None = None
        self.modules: OrderedDict[str, Compiled] = OrderedDict()
        self.events: list[tuple[str, float]] = []
        self.lower_only = False  # set by lite-tune, which needs the Relax modules and no compilation
        self.lowered: Lowered | None = None
        self._staging: dict[Tensor, np.ndarray] = {}
        self._shapes: list[tuple[int, ...]] = []

    @property
    def compilations(self) -> int:
        """How many times TVM compiled this partition (cache loads not counted)."""
        return sum(source == "compiled" for source, _ in self.events)

    def shapes_known(self) -> bool:
        return all(-1 not in t.shape for t in [*self.arguments, *self.outputs])

    def prepare(self) -> None:
        """Compiles (or loads) the partition when shapes are static; else the first resize does.

        A failure here propagates: the runtime then runs the partition's native kernels
        (``Context(fallback=True)``) and says why in the partition report.
        """
        if self.shapes_known():
            self._compile_for_current_shapes()

    def resize(self) -> None:
        """Keeps the module if it serves the new shapes, else lowers and compiles for them.

        A failure propagates: with ``Context(fallback=True)`` the runtime then runs the
        partition's native kernels.
        """
        self._compile_for_current_shapes()

    def _compile_for_current_shapes(self) -> None:
        if self.compiled is not None and self.compiled.lowered.serves():
            self._shapes = [t.shape for t in self.arguments]
            return
        self.lowered = lower(self.kernels, self.inputs, self.outputs, self.delegate.symbolic_batch)
        if self.lower_only:
            return
        try:
            self.compiled = self._obtain(self.lowered)
        except Exception as exc:
            if not self.lowered.symbolic:
                raise
            logger.info("TVM %s: compiling with a symbolic batch failed (%s: %s); compiling static shapes",
                        self.name, type(exc).__name__, exc)
            self.lowered = lower(self.kernels, self.inputs, self.outputs, False)
            self.compiled = self._obtain(self.lowered)
        self._shapes = [t.shape for t in self.arguments]
        self._staging = {}

    def _obtain(self, lowered: Lowered) -> Compiled:
        start = time.perf_counter()
        delegate = self.delegate
        key = cache_key(lowered.mod, lowered.digest(), str(delegate.target), database_fingerprint(delegate.tuning_db))
        compiled = self.modules.get(key)
        if compiled is not None:
            self.modules.move_to_end(key)
            source = "memory"
        else:
            library = delegate.cache.load(key) if delegate.cache is not None else None
            source = "cache"
            if library is None:
                library = compile_module(lowered.mod, delegate.target, delegate.database)
                source = "compiled"
                if delegate.cache is not None:
                    delegate.cache.store(key, library, str(delegate.target))
            compiled = Compiled(lowered, library, delegate.device, source)
            self.modules[key] = compiled
            while len(self.modules) > MODULES_KEPT:
                self.modules.popitem(last=False)
        compiled.lowered = lowered
        seconds = time.perf_counter() - start
        self.events.append((source, seconds))
        logger.info("TVM %s: %s module (%s batch) in %.3f s", self.name, source,
                    "symbolic" if lowered.symbolic else "static", seconds)
        return compiled

    def execute(self) -> None:
        """Inputs to the VM (zero-copy where aligned), run, results into the output arrays."""
        if self.compiled is None or [t.shape for t in self.arguments] != self._shapes:
            self.resize()  # NOTE: defensive; the runtime calls resize() before a predict with new shapes
        result = self.compiled.function(*[self._argument(t) for t in self.arguments])
        results = [result] if len(self.outputs) == 1 else list(result)
        for tensor, value in zip(self.outputs, results, strict=True):
            self._store(tensor, value)

    def dump(self, directory: str | Path) -> list[Path]:
        """Writes the Relax script of the partition's module to ``<name>.relax.py``; returns the paths.

        Nothing is written while shapes are unknown (a dynamic model before its first predict).
        Constants (weights) are left out of the script.
        """
        lowered = self.compiled.lowered if self.compiled is not None else self.lowered
        if lowered is None:
            if not self.shapes_known():
                return []
            lowered = self.lowered = lower(self.kernels, self.inputs, self.outputs, self.delegate.symbolic_batch)
        path = Path(directory) / f"{self.name}.relax.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# {self.name}: {len(self.kernels)} kernels ({', '.join(k.name for k in self.kernels[:8])}"
                  f"{', ...' if len(self.kernels) > 8 else ''}) for target {self.delegate.target}\n")
        path.write_text(header + lowered.mod.script(show_meta=False))
        return [path]
