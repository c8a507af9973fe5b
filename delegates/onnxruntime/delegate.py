"""ORTDelegate: partitions of the model emitted as ONNX graphs and run by ONNX Runtime."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import lite
from lite.delegates.onnxruntime.builder import OPSET, why_not
from lite.delegates.onnxruntime.emitters.registry import REGISTRY
from lite.delegates.onnxruntime.graph_kernel import ORTGraphKernel, SessionFactory
from lite.extras import ort_session_options, require

logger = logging.getLogger("lite")

Provider = str | tuple[str, dict[str, Any]]
BLOB_LAYOUT = 1  # bump when what a saved partition holds changes
STOP_SPINNING = "session.force_spinning_stop"
"""onnxruntime's session entry: "1" sends its pool's threads to sleep when a run returns, instead
of spinning on the cores the native kernels after a partition run on."""


class ORTDelegate(lite.SimpleDelegate):
    """Runs every run of supported kernels as one ONNX Runtime session (a third-party framework).

    Each partition is written back as an ONNX graph (opset 17), one emitter per primitive
    type (``lite.delegates.onnxruntime.emitters``): fused activations become real Relu / Clip
    nodes, constants become initializers, and the partition's boundary tensors its inputs and
    outputs. A primitive without an emitter, or with attribute values ONNX cannot express,
    stays native with the reason in ``Model.partition_report()``.

    ``Context.memory_limit`` holds for what onnxruntime allocates too: at prepare and at every
    resize a graph kernel counts its tensors at the actual shapes by ONNX shape inference and
    refuses more than the limit (``lite.delegates.onnxruntime.sizes``). onnxruntime's own arena
    limit is not used: it applies to allocators shared by the whole process, not to one session;
    so a graph whose tensors' sizes are set by values computed from data is refused instead.
    Partitions saved in the file (``lite-convert --delegate ort``) load only when they run what
    the emitters write, have the partition's boundary (bound by name) and pass that check
    (``lite.delegates.onnxruntime.saved``).

    Args:
        providers: execution providers in priority order: names, or (name, options) pairs as
            onnxruntime takes them; a comma-separated string also works. Default: the CPU.
            Unavailable ones are skipped; ``init()`` declines when none is available.
        session_options: an ``onnxruntime.SessionOptions`` for every session (graph optimisation
            level, profiling, ...). Its ``intra_op_num_threads``, if left at 0, is set to the
            Context's ``thread_num``; its ``log_severity_level``, if left unset, to errors only
            (``DELITE_LOG=debug`` keeps onnxruntime's warnings). Default: thread_num intra-op
            threads, 1 inter-op thread, errors only. Where native kernels run in the model too,
            its ``session.force_spinning_stop`` entry, if unset, is set to "1": onnxruntime's
            threads sleep when a partition's run returns rather than spin on the cores the native
            kernels after it need.
        ops: primitive types to take (default: every type with an emitter).
        min_nodes_per_partition: smaller runs of supported kernels stay native.

    Raises:
        lite.InputError: ``ops`` names a primitive type without an emitter.

    Example:
        >>> import lite
        >>> from lite.delegates.onnxruntime import ORTDelegate
        >>> ctx = lite.Context(thread_num=2, delegates=[ORTDelegate()])
        >>> model = lite.Model()
        >>> model.build_from_file("resnet18.lite", context=ctx)  # doctest: +SKIP
        >>> model.graph_kernels()[0].onnx_model.graph.node[0].op_type  # doctest: +SKIP
        'Conv'
    """

    def __init__(self, providers: Sequence[Provider] | str | None = None, session_options: Any = None,
                 ops: Iterable[str] | None = None, min_nodes_per_partition: int = 1):
        if isinstance(providers, str):
            providers = [p.strip() for p in providers.split(",") if p.strip()]
        self.providers = list(providers or ["CPUExecutionProvider"])
        self.session_options = session_options
        self.ops = set(REGISTRY.supported_types() if ops is None else ops)
        unknown = sorted(self.ops - set(REGISTRY.supported_types()))
        if unknown:
            raise lite.InputError(f"ORTDelegate has no emitter for {unknown}; it emits {REGISTRY.supported_types()}")
        self.min_nodes_per_partition = min_nodes_per_partition
        self._available: list[Provider] = []  # the providers init() found (the same for every build)

    def init(self) -> None:
        """Checks that onnxruntime imports and offers one of the providers; else raises NotSupportedError."""
        onnxruntime = require("onnxruntime", "ORTDelegate")
        offered = onnxruntime.get_available_providers()
        self._available = [p for p in self.providers if _provider_name(p) in offered]
        if not self._available:
            raise lite.NotSupportedError(f"none of the providers {[_provider_name(p) for p in self.providers]} is "
                                         f"available; onnxruntime {onnxruntime.__version__} offers {offered}")
        skipped = [_provider_name(p) for p in self.providers if p not in self._available]
        if skipped:
            logger.info("ORTDelegate: providers %s are not available; using %s", skipped, self._available)

    def is_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        """True when the kernel can be emitted as ONNX, else the reason it stays native."""
        if primitive.type not in self.ops and REGISTRY.find(primitive.type) is not None:
            return f"{primitive.type}: left out by ORTDelegate(ops=...)"
        return why_not(kernel) or True

    def create_graph_kernel(self, kernels: list[lite.Kernel], inputs: list[lite.Tensor],
                            outputs: list[lite.Tensor], model: lite.DelegateModel) -> ORTGraphKernel:
        """Emits the partition as ONNX (checked with onnx.checker); the session is created in prepare.

        Graph kernels are named onnxruntime_0, 1, ... in execution order, per model.
        """
        return ORTGraphKernel(kernels, inputs, outputs, model.kernel_name("onnxruntime"), self._session_factory(model),
                              memory_limit=model.context.memory_limit)

    # ---- ahead of time: lite-convert --delegate ort ---------------------------------------------------

    def blob_target(self) -> str:
        """Saved partitions are ONNX graphs of one opset: any onnxruntime that runs it loads them."""
        return json.dumps({"layout": BLOB_LAYOUT, "opset": OPSET})

    def save_graph_kernel(self, kernel: lite.Kernel) -> bytes | None:
        """The partition's ONNX graph (weights included), as emitted for this build."""
        return kernel.saved() if isinstance(kernel, ORTGraphKernel) else None

    def load_graph_kernel(self, blob: memoryview, target: str, kernels: list[lite.Kernel],
                          inputs: list[lite.Tensor], outputs: list[lite.Tensor],
                          model: lite.DelegateModel) -> ORTGraphKernel:
        """The saved ONNX graph, checked, instead of emitting it again; the session starts in prepare.

        Raises:
            lite.NotSupportedError: saved in another layout or for another opset.
            lite.ModelFormatError: the blob is not a valid ONNX graph with the partition's boundary (bound
                by name), holds ops ORTDelegate never emits (control flow included), or tensors over
                ``Context.memory_limit`` or of sizes set by data (``lite.delegates.onnxruntime.saved``).
        """
        if target != self.blob_target():
            raise lite.NotSupportedError(f"saved as {target!r}; this ORTDelegate loads {self.blob_target()!r}")
        return ORTGraphKernel(kernels, inputs, outputs, model.kernel_name("onnxruntime"),
                              self._session_factory(model), saved=blob, memory_limit=model.context.memory_limit)

    def _session_factory(self, model: lite.DelegateModel) -> SessionFactory:
        return _Sessions(self, model)

    def _options(self, thread_num: int, beside_native: bool = False) -> Any:
        import onnxruntime

        options = self.session_options
        if options is None:
            options = onnxruntime.SessionOptions()
            options.inter_op_num_threads = 1
        if beside_native and not _has_entry(options, STOP_SPINNING):
            options.add_session_config_entry(STOP_SPINNING, "1")
        options = ort_session_options(options)  # NOTE: a level the user set stays
        if options.intra_op_num_threads == 0:
            options.intra_op_num_threads = thread_num
        return options


def _has_entry(options: Any, key: str) -> bool:
    try:
        options.get_session_config_entry(key)
    except RuntimeError:  # NOTE: onnxruntime's answer for a key never set
        return False
    return True


class _Sessions:
    """A partition's session factory: sessions with the delegate's options, whose threads stop
    spinning when a run returns where native kernels run in the model too (decided at the first
    session, when the build has placed every kernel)."""

    def __init__(self, delegate: ORTDelegate, model: lite.DelegateModel):
        self.delegate, self.thread_num = delegate, model.context.thread_num
        self._model: lite.DelegateModel | None = model  # NOTE: dropped at the first session: no cycle after it
        self.beside_native = False

    def __call__(self, graph: bytes) -> Any:
        import onnxruntime

        if self._model is not None:
            self.beside_native = any(not isinstance(k, ORTGraphKernel) for k in self._model.kernels)
            self._model = None
        options = self.delegate._options(self.thread_num, self.beside_native)
        return onnxruntime.InferenceSession(graph, sess_options=options, providers=list(self.delegate._available))


def _provider_name(provider: Provider) -> str:
    return provider if isinstance(provider, str) else provider[0]


