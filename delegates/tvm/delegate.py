"""TVMDelegate: compiles runs of supported kernels with TVM (Relax) for a CPU, GPU or other target."""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import lite
from lite.arguments import strict_bool
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
        symbolic_batch: compile with a symbolic batch dim (True, False, or None: yes unless ``tuning_db``).
        min_nodes_per_partition: smaller runs stay native.
        max_partitions: keep only the largest this many partitions (0: all).
        trust_saved_code: load partitions compiled ahead of time and saved in the ``.lite`` file
            (``lite-convert --delegate tvm``). They are native machine code, which no check can make
            safe: only for files you trust (ones you converted). Off: such partitions are compiled
            here (or run natively), with the reason in the partition report. Only ``True`` turns it on;
            any other value that is not a bool (``"false"``, ``1``, None) is refused. The tools and Ray
            context descriptions read it as text: true/false, 1/0, yes/no, on/off.

    Raises:
        lite.InputError: ``target`` is neither a str nor a dict; ``trust_saved_code`` is not a bool,
            or ``symbolic_batch`` neither a bool nor None.

    Example:
        >>> import lite
        >>> from lite.delegates.tvm import TVMDelegate
        >>> ctx = lite.Context(thread_num=2, delegates=[TVMDelegate("llvm")])
        >>> model = lite.Model()
        >>> model.build_from_file("resnet18.lite", context=ctx)  # doctest: +SKIP
    """

    def __init__(self, target: str | dict[str, Any] = "llvm", cache_dir: str | os.PathLike | None = DEFAULT_CACHE,
                 tuning_db: str | os.PathLike | None = None, symbolic_batch: bool | None = None,
                 min_nodes_per_partition: int = 1, max_partitions: int = 0, trust_saved_code: bool = False):
        if not isinstance(target, (str, dict)):
            raise lite.InputError(f"target must be a TVM target name or dict, got {type(target).__name__}")
        self.target_spec = target
        self.cache_dir = cache_dir
        self.tuning_db = None if tuning_db is None else str(tuning_db)
        self.symbolic_batch = (tuning_db is None if symbolic_batch is None
                               else strict_bool(symbolic_batch, "TVMDelegate symbolic_batch"))
        self.min_nodes_per_partition = min_nodes_per_partition
        self.max_partitions = max_partitions
        self.trust_saved_code = trust_saved_code
        # NOTE: what init() and the first build resolve from the options (the same for every build); nothing
        # of a build is kept here: each model owns its graph kernels (Model.graph_kernels()), and one
        # delegate may build many.
        self.target = self.device = self.cache = self.database = None
        self.on_cpu = True
        self.kind = ""

    @property
    def trust_saved_code(self) -> bool:
        """Whether partitions compiled ahead of time (native code from the file) may load: only ``True``."""
        return self._trust_saved_code

    @trust_saved_code.setter
    def trust_saved_code(self, value: bool) -> None:
        self._trust_saved_code = strict_bool(value, "TVMDelegate trust_saved_code")

    def init(self) -> None:
        """Loads the TVM runtime and checks the target's device; raises lite.NotSupportedError when either
        is missing. TVM's compiler is imported only when something is compiled (``build()``): a model whose
        partitions were compiled ahead of time loads them with the runtime alone."""
        from lite.delegates.tvm import runtime
        from lite.delegates.tvm.targets import target_kind

        if self.target is not None:  # NOTE: the compiler resolved the target and its device already
            return
        self.kind = target_kind(self.target_spec)
        if self.kind not in runtime.DEVICE_TYPES or self.tuning_db is not None:
            self.compiler()  # NOTE: a kind the runtime alone cannot place, or a database: only compiling uses it
            return
        self.device = runtime.device(self.kind)
        if self.device is None:
            raise lite.NotSupportedError(f"target {self.kind}: no such device on this machine; the model runs "
                                         "without TVM")
        self.on_cpu = self.device.dlpack_device_type() == runtime.CPU_DLPACK

    def compiler(self) -> None:
        """Imports TVM's compiler and resolves what compiling needs: the full target (this CPU's mcpu and
        cores for "llvm"), the module cache and the tuning database. Idempotent."""
        if self.target is not None:
            return
        require("tvm", "TVMDelegate")
        from lite.delegates.tvm import cache, compiler, ops  # noqa: F401  (ops: the support table, imports tvm)

        target = compiler.resolve_target(self.target_spec)
        self.device = compiler.device_for(target)
        self.on_cpu = self.device.dlpack_device_type() == CPU_DLPACK
        directory = cache.default_directory() if self.cache_dir == DEFAULT_CACHE else self.cache_dir
        if (os.environ.get(cache.ENV, "").strip().lower() in cache.OFF_VALUES
                or str(directory).strip().lower() in cache.OFF_VALUES):
            directory = None  # NOTE: also "none"/"off" given as text (lite-benchmark --delegate-option cache_dir=off)
        self.cache = cache.ModuleCache(directory) if directory is not None else None
        self.database = compiler.open_database(self.tuning_db) if self.tuning_db is not None else None
        self.target = target

    def build(self, model: lite.DelegateModel) -> None:
        """Imports the compiler, sets TVM's thread count from the model's Context, then partitions
        (SimpleDelegate). Without the compiler (a runtime-only install) it takes nothing, and says why."""
        try:
            self.compiler()
        except lite.MissingPackageError as exc:  # NOTE: a runtime-only install runs saved partitions, compiles none
            for kernel in model:
                model.reject(kernel, f"TVM's compiler cannot be imported here ({exc}); only partitions compiled "
                                     "ahead of time (lite-convert --delegate tvm) run on TVM")
            return
        use_threads(model.context.thread_num)
        super().build(model)

    def fingerprint(self) -> str:
        """The options, the resolved target (with its CPU) and the tuning database's contents: a
        re-tuned database makes measured placement time the partitions again."""
        from lite.delegates.tvm.compiler import database_fingerprint

        self.compiler()
        return f"{super().fingerprint()} target={self.target} db={database_fingerprint(self.tuning_db)}"

    # ---- ahead of time: lite-convert --delegate tvm (lite.delegates.tvm.saved) ------------------------

    def blob_target(self) -> str:
        """TVM's version, the target and, on a CPU, its architecture and instruction-set features."""
        from lite.delegates.tvm.saved import describe_target

        self.compiler()
        return describe_target(self)

    def save_graph_kernel(self, kernel: lite.Kernel) -> bytes | None:
        """The compiled library of a partition (weights compiled in), its shapes and baked values."""
        from lite.delegates.tvm.kernel import TVMGraphKernel
        from lite.delegates.tvm.saved import save

        return save(kernel) if isinstance(kernel, TVMGraphKernel) else None

    def load_graph_kernel(self, blob: memoryview, target: str, kernels: list[lite.Kernel],
                          inputs: list[lite.Tensor], outputs: list[lite.Tensor],
                          model: lite.DelegateModel) -> lite.Kernel:
        """A partition compiled ahead of time, loaded by the TVM runtime alone (needs ``trust_saved_code``).

        Raises:
            lite.NotSupportedError: compiled for another target kind, TVM version, CPU or GPU
                architecture, or ``trust_saved_code`` is off.
        """
        from lite.delegates.tvm.saved import SavedTVMKernel, check_target

        check_target(self, target)
        use_threads(model.context.thread_num)
        return SavedTVMKernel(self, blob, kernels, inputs, outputs, name=model.kernel_name("tvm"))

    def is_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        """True when a Relax emitter compiles ``kernel``; else the reason shown in the partition report."""
        from lite.delegates.tvm.ops import why_not

        return why_not(kernel) or True

    def create_graph_kernel(self, kernels: list[lite.Kernel], inputs: list[lite.Tensor],
                            outputs: list[lite.Tensor], model: lite.DelegateModel) -> TVMGraphKernel:
        """One TVMGraphKernel per partition (tvm_0, tvm_1, ... per model); nothing is compiled before its prepare()."""
        from lite.delegates.tvm.kernel import TVMGraphKernel

        return TVMGraphKernel(self, kernels, inputs, outputs, name=model.kernel_name("tvm"))


def use_threads(thread_num: int) -> None:
    """Sets TVM's thread count from the Context, unless the user exported one."""
    # NOTE: TVM reads TVM_NUM_THREADS once, when its thread pool starts (the first parallel kernel);
    # a value the user exported wins.
    os.environ.setdefault(THREADS_ENV, str(thread_num))
    if os.environ[THREADS_ENV] != str(thread_num):
        logger.info("TVM uses %s=%s threads (Context.thread_num=%d)", THREADS_ENV, os.environ[THREADS_ENV], thread_num)


def module_sources(model: lite.Model) -> Counter[str]:
    """How a model's TVM graph kernels obtained their modules: "compiled", from the disk "cache", or "memory"."""
    from lite.delegates.tvm.kernel import TVMGraphKernel

    return Counter(source for k in model.graph_kernels() if isinstance(k, TVMGraphKernel) for source, _ in k.events)
