"""TVMDelegate: compiles runs of supported kernels with TVM (Relax) for a CPU, GPU or other target."""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import lite
from lite.extras import require

if TYPE_CHECKING:  # NOTE: importing the kernel imports tvm; init() must be able to decline without it
    from lite.delegates.tvm.kernel import TVMGraphKernel

logger = logging.getLogger("lite")

DEFAULT_CACHE = "default"
THREADS_ENV = "TVM_NUM_THREADS"
CPU_DLPACK = 1  # kDLCPU


class TVMDelegate(lite.SimpleDelegate):
    """Compiles each partition into one TVM Relax function and runs it with the Relax VM.

    Every supported run of kernels (see ``lite.delegates.tvm.ops.EMITTERS``; the partition
    report gives the reason for every kernel left out) becomes one Relax function: subgraph
    inputs are its parameters, weights its constants, and the batch dim is symbolic where the
    ops allow it, so resizing the batch does not recompile. Compiled modules are cached on disk.

    Untuned code for ``llvm`` is correct but slow (often 10-100x slower than onnxruntime):
    tune the model with ``lite-tune`` and pass the database as ``tuning_db``.

    Args:
        target: a TVM target name (``"llvm"``: this CPU, with its ``mcpu`` and core count;
            ``"cuda"``: GPU 0) or dict (``{"kind": "llvm", "mcpu": "skylake"}``). The old
            CLI form ``"llvm -mcpu=skylake"`` is accepted too.
        cache_dir: where compiled modules are cached; ``"default"``: ``$DELITE_TVM_CACHE``
            or ``~/.cache/delite/tvm`` (under ``$XDG_CACHE_HOME`` when set); None (or "off")
            disables the cache, as does ``DELITE_TVM_CACHE=off``.
        tuning_db: a MetaSchedule database directory written by ``lite-tune``; its tuned
            kernels replace the untuned ones. Tuning is per static shape, so with a database
            the batch dim is static unless ``symbolic_batch=True``.
        symbolic_batch: compile with a symbolic batch dim (None: yes unless ``tuning_db``).
        min_nodes_per_partition: smaller runs stay native.
        max_partitions: keep only the largest this many partitions (0: all).

    Raises:
        lite.InputError: ``target`` is neither a str nor a dict.

    Example:
        >>> import lite
        >>> from lite.delegates.tvm import TVMDelegate
        >>> ctx = lite.Context(thread_num=2, delegates=[TVMDelegate("llvm")])
        >>> model = lite.Model()
        >>> model.build_from_file("resnet18.lite", context=ctx)  # doctest: +SKIP
    """

    def __init__(self, target: str | dict[str, Any] = "llvm", cache_dir: str | os.PathLike | None = DEFAULT_CACHE,
                 tuning_db: str | os.PathLike | None = None, symbolic_batch: bool | None = None,
                 min_nodes_per_partition: int = 1, max_partitions: int = 0):
        if not isinstance(target, (str, dict)):
            raise lite.InputError(f"target must be a TVM target name or dict, got {type(target).__name__}")
        self.target_spec = target
        self.cache_dir = cache_dir
        self.tuning_db = None if tuning_db is None else str(tuning_db)
        self.symbolic_batch = tuning_db is None if symbolic_batch is None else bool(symbolic_batch)
        self.min_nodes_per_partition = min_nodes_per_partition
        self.max_partitions = max_partitions
        # NOTE: what init() resolves from the options (the same for every build); nothing of a build is kept
        # here: each model owns its graph kernels (Model.graph_kernels()), and one delegate may build many.
        self.target = self.device = self.cache = self.database = None
        self.on_cpu = True

    def init(self) -> None:
        """Imports TVM and checks the target's device; raises lite.NotSupportedError when either is missing."""
        require("tvm", "TVMDelegate")
        from lite.delegates.tvm import cache, compiler, ops  # noqa: F401  (ops: the support table, imports tvm)

        self.target = compiler.resolve_target(self.target_spec)
        self.device = compiler.device_for(self.target)
        self.on_cpu = self.device.dlpack_device_type() == CPU_DLPACK
        directory = cache.default_directory() if self.cache_dir == DEFAULT_CACHE else self.cache_dir
        if (os.environ.get(cache.ENV, "").strip().lower() in cache.OFF_VALUES
                or str(directory).strip().lower() in cache.OFF_VALUES):
            directory = None  # NOTE: also "none"/"off" given as text (lite-benchmark --delegate-option cache_dir=off)
        self.cache = cache.ModuleCache(directory) if directory is not None else None
        self.database = compiler.open_database(self.tuning_db) if self.tuning_db is not None else None

    def build(self, model: lite.DelegateModel) -> None:
        """Sets TVM's thread count from the model's Context, then partitions (SimpleDelegate)."""
        # NOTE: TVM reads TVM_NUM_THREADS once, when its thread pool starts (the first parallel kernel);
        # a value the user exported wins.
        os.environ.setdefault(THREADS_ENV, str(model.context.thread_num))
        if os.environ[THREADS_ENV] != str(model.context.thread_num):
            logger.info("TVM uses %s=%s threads (Context.thread_num=%d)", THREADS_ENV, os.environ[THREADS_ENV],
                        model.context.thread_num)
        super().build(model)

    def fingerprint(self) -> str:
        """The options, the resolved target (with its CPU) and the tuning database's contents: a
        re-tuned database makes measured placement time the partitions again."""
        from lite.delegates.tvm.compiler import database_fingerprint

        return f"{super().fingerprint()} target={self.target} db={database_fingerprint(self.tuning_db)}"

    def is_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        """True when a Relax emitter compiles ``kernel``; else the reason shown in the partition report."""
        from lite.delegates.tvm.ops import why_not

        return why_not(kernel) or True

    def create_graph_kernel(self, kernels: list[lite.Kernel], inputs: list[lite.Tensor],
                            outputs: list[lite.Tensor], model: lite.DelegateModel) -> TVMGraphKernel:
        """One TVMGraphKernel per partition (tvm_0, tvm_1, ... per model); nothing is compiled before its prepare()."""
        from lite.delegates.tvm.kernel import TVMGraphKernel

        return TVMGraphKernel(self, kernels, inputs, outputs, name=model.kernel_name("tvm"))


def module_sources(model: lite.Model) -> Counter[str]:
    """How a model's TVM graph kernels obtained their modules: "compiled", from the disk "cache", or "memory"."""
    from lite.delegates.tvm.kernel import TVMGraphKernel

    return Counter(source for k in model.graph_kernels() if isinstance(k, TVMGraphKernel) for source, _ in k.events)
