"""lite-delegate-test: a delegate checked op by op and model by model against Delite's native kernels.

Each case runs the delegate and the native kernels on the same inputs (native is the oracle) and
ends in one category, as ExecuTorch's backend test suite reports them: SUCCESS (delegated,
matched), SUCCESS_UNDELEGATED (declined, with the reason), SKIPPED (the native reference itself
cannot run it), or a failure: INIT_FAIL, BUILD_FAIL, PREPARE_FAIL, RUN_FAIL, OUTPUT_MISMATCH,
RESIZE_FAIL, SAVE_LOAD_FAIL, NONDETERMINISTIC.

Cases:

- ``op:<ONNX node case>``: every single-op node case of ``onnx.backend.test`` that the converter
  claims (``lite.tools.support``) and the native kernels pass;
- ``model:<zoo model>`` (``_int8`` with ``--quantized``: the static QDQ int8 form), and its checks
  ``:resize`` (another batch, and sequence length for the encoder, after the build; the model with static
  shapes where the native kernels resize it, else its dynamic form),
  ``:save_load`` (partitions saved with ``compile_into`` and loaded in a fresh
  process; only for delegates that save them) and ``:fallback`` (its graph kernels made to fail
  in ``prepare()``: the model must run natively with the same outputs).

Every case also predicts twice: outputs that differ between the two are NONDETERMINISTIC. Cases
run in worker processes (``-j N``), each bounded by ``--timeout``; a worker that dies or hangs is
replaced and its case fails in the phase it was in. Known gaps go in an expected-failures file
(``case_id  reason`` lines, ``#`` comments, shell-style wildcards allowed): the exit status is 1
only for an unexpected failure.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import json
import logging
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np

CATEGORIES = ("SUCCESS", "SUCCESS_UNDELEGATED", "SKIPPED", "INIT_FAIL", "BUILD_FAIL", "PREPARE_FAIL", "RUN_FAIL",
              "OUTPUT_MISMATCH", "RESIZE_FAIL", "SAVE_LOAD_FAIL", "NONDETERMINISTIC")
PASSING = ("SUCCESS", "SUCCESS_UNDELEGATED", "SKIPPED")
PHASE_FAILURES = {"init": "INIT_FAIL", "build": "BUILD_FAIL", "prepare": "PREPARE_FAIL", "run": "RUN_FAIL",
                  "resize": "RESIZE_FAIL", "save_load": "SAVE_LOAD_FAIL", "native": "SKIPPED"}
TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}  # relative L2 error, by declared precision
ZOO_SIZES: dict[str, dict[str, Any]] = {  # small enough for a CI run
    "resnet18": {"image_size": 64}, "mobilenet_v2": {"image_size": 64}, "squeezenet": {"image_size": 64},
    "inception_block": {}, "mobilenet_v3_large": {"image_size": 64}, "efficientnet_b0": {"image_size": 64},
    "bert_encoder": {"seq_len": 16, "layers": 2, "width": 128, "heads": 4, "feed_forward": 512},
    "resnet50": {"image_size": 64},
}
DEFAULT_MODELS = ("resnet18", "mobilenet_v2", "squeezenet", "inception_block", "mobilenet_v3_large",
                  "efficientnet_b0", "bert_encoder")
BASE_DIMS = {"batch": 1, "seq": 16}
RESIZED_DIMS = {"batch": 2, "seq": 8}
CALIBRATION_SAMPLES = 8
SIMULATED_FAILURE = "lite-delegate-test: simulated prepare() failure (fallback check)"
EXAMPLES = """examples:
  lite-delegate-test --delegate ort --ops Relu,Add
  lite-delegate-test --delegate example_npu --suite models --models resnet18,bert_encoder --quantized
  lite-delegate-test --delegate mypkg.npu:NPUDelegate --delegate-option device=0 -j 2 \\
      --expected-failures npu_expected.txt --markdown report.md --json report.json

Exit status: 0 every outcome expected, 1 an unexpected failure, 2 a usage error.
"""


# ---- cases and results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One check: an ONNX node case (``kind`` "op") or a zoo model (``kind`` "model") and its ``check``."""

    kind: str
    name: str
    op: str
    check: str = "main"  # model cases: main, resize, save_load or fallback
    quantized: bool = False

    @property
    def id(self) -> str:
        if self.kind == "op":
            return f"op:{self.name}"
        model = f"model:{self.name}{'_int8' if self.quantized else ''}"
        return model if self.check == "main" else f"{model}:{self.check}"


@dataclass
class Result:
    """What one case showed. ``sqnr_db`` is None when the outputs are identical."""

    case_id: str
    op: str
    category: str
    message: str = ""
    nodes_delegated: int = 0
    nodes_total: int = 0
    max_abs_error: float = 0.0
    mean_relative_error: float = 0.0
    sqnr_db: float | None = None
    seconds: float = 0.0
    expected: str | None = None  # the expected-failures file's reason, when it lists the case

    @property
    def failed(self) -> bool:
        return self.category not in PASSING

    @property
    def unexpected(self) -> bool:
        """A failure the expected-failures file does not list."""
        return self.failed and self.expected is None

    @property
    def fixed(self) -> bool:
        """Listed as an expected failure, yet it passed."""
        return not self.failed and self.expected is not None and self.category != "SKIPPED"


@dataclass(frozen=True)
class Settings:
    """The delegate under test and how to run it (sent to every worker)."""

    delegate: str
    options: tuple[tuple[str, Any], ...] = ()
    timeout: float = 300.0
    thread_num: int = 1  # more lets the runtime change BLAS's threads between predicts: not bit-exact

    def context(self, **options) -> Any:
        """A ``lite.Context`` with a fresh instance of the delegate."""
        import lite

        return lite.Context(thread_num=self.thread_num, delegates=[self.load()], **options)

    def load(self):
        """A fresh instance of the delegate."""
        from lite.delegates import load_delegate

        return load_delegate(self.delegate, dict(self.options))


class Stop(Exception):
    """Ends a case with ``category`` and a message."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


def op_cases(ops: Iterable[str] | None = None) -> list[Case]:
    """The single-op ONNX node cases the converter claims, of the ONNX op types ``ops`` (default: all)."""
    from lite.tools.support import claimed, node_cases

    wanted = None if ops is None else set(ops)
    found = []
    for name, onnx_case in sorted(node_cases(wanted).items()):
        types = {n.op_type for n in onnx_case.model.graph.node}
        if len(types) == 1 and claimed(onnx_case) and (wanted is None or types & wanted):
            found.append(Case("op", name, types.pop()))
    return found


def model_cases(models: Iterable[str], quantized: bool, save_load: bool) -> list[Case]:
    """Each zoo model's checks (and its int8 form's, with ``quantized``); save_load only when the delegate saves."""
    checks = ("main", "resize", *(("save_load",) if save_load else ()), "fallback")
    forms = (False, True) if quantized else (False,)
    return [Case("model", m, f"model {m}", c, q) for m in models for q in forms for c in checks]


# ---- the delegate, observed --------------------------------------------------------------------------------


class Probe:
    """Hooks one delegate instance to know the phase a failure came from and what it took.

    Its ``build`` sees every ``DelegateModel.replace`` and hooks the graph kernel's ``prepare`` and
    ``resize``; with ``fail_prepare`` each graph kernel raises after its own ``prepare()``.
    """

    def __init__(self, delegate, report: Callable[[str], None], fail_prepare: bool = False):
        self.phase = "init"
        self.taken = 0
        self._report, self._fail = report, fail_prepare
        inner = delegate.build
        delegate.build = functools.partial(self._build, inner)

    def enter(self, phase: str) -> None:
        self.phase = phase
        self._report(phase)

    def _build(self, inner, model) -> None:
        self.enter("build")
        replace = model.replace

        def hooked(start: int, end: int, kernel):
            self._hook(kernel)
            self.taken += end - start
            return replace(start, end, kernel)

        model.replace = hooked
        inner(model)

    def _hook(self, kernel) -> None:
        prepare, resize = kernel.prepare, kernel.resize

        def hooked_prepare() -> None:
            self.enter("prepare")
            prepare()
            if self._fail:
                raise RuntimeError(SIMULATED_FAILURE)

        def hooked_resize() -> None:
            self.enter("prepare" if self.phase in ("build", "prepare") else "resize")
            resize()

        kernel.prepare, kernel.resize = hooked_prepare, hooked_resize


_REPORT: Callable[[str], None] = lambda phase: None  # noqa: E731 - replaced in a worker: sends the phase


def delegated_model(settings: Settings, data: bytes, fallback: bool = False, fail_prepare: bool = False):
    """(the model built with the delegate, its Probe). Raises Stop on a decline in init() or a failure."""
    import lite

    delegate = settings.load()
    probe = Probe(delegate, _REPORT, fail_prepare)
    probe.enter("init")
    try:
        delegate.init()
    except lite.NotSupportedError as exc:
        raise Stop("SUCCESS_UNDELEGATED", f"declined in init(): {exc}") from exc
    except Exception as exc:
        raise Stop("INIT_FAIL", described(exc)) from exc
    model = lite.Model()
    try:
        context = lite.Context(thread_num=settings.thread_num, delegates=[delegate], fallback=fallback)
        model.build(data, lite.ModelType.LITE, context)
    except Exception as exc:
        raise Stop(PHASE_FAILURES[probe.phase if probe.phase != "init" else "build"], described(exc)) from exc
    probe.enter("run")
    return model, probe


def described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def native_model(data: bytes):
    import lite

    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=1))
    return model


def predict(model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [t.get_data_to_numpy() for t in model.predict(list(inputs))]


def delegated_counts(model) -> tuple[int, int, str]:
    """(nodes a delegate runs, nodes, the distinct reasons the others give)."""
    rows = model.partition_report()
    taken = sum(r.runs_on not in ("native", "folded") for r in rows)
    reasons = list(dict.fromkeys(r.reason for r in rows if r.reason))
    if not reasons and rows and all(r.runs_on == "folded" for r in rows):
        reasons = ["every node is computed once from shapes at build (folded)"]
    return taken, len(rows), "; ".join(reasons[:3]) or "no node offered"


# ---- comparing -------------------------------------------------------------------------------------------


@dataclass
class Errors:
    """The worst errors over the outputs compared so far."""

    max_abs: float = 0.0
    mean_relative: float = 0.0
    sqnr_db: float | None = None

    def add(self, got: np.ndarray, want: np.ndarray) -> None:
        a, e = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        finite = np.isfinite(a) & np.isfinite(e)
        diff, e = np.abs(a[finite] - e[finite]), e[finite]
        if not diff.size or not diff.any():
            return
        self.max_abs = max(self.max_abs, float(diff.max()))
        scale = float(np.abs(e).mean())
        self.mean_relative = max(self.mean_relative, float(diff.mean() / scale) if scale else float("inf"))
        signal, noise = float(np.sum(e * e)), float(np.sum(diff * diff))
        sqnr = 10 * np.log10(signal / noise) if signal else float("-inf")
        self.sqnr_db = float(sqnr) if self.sqnr_db is None else min(self.sqnr_db, float(sqnr))


def floating(dtype: np.dtype) -> bool:
    """numpy's floats and ml_dtypes' (bfloat16, float8, float4): compared by value, NaN matching NaN."""
    from lite.ops.dtypes import BFLOAT16, NARROW_FLOATS

    return dtype.kind in "fc" or dtype in (BFLOAT16, *NARROW_FLOATS)


def mismatch(got: np.ndarray, want: np.ndarray, rtol: float) -> str | None:
    """Why ``got`` is not ``want``: dtype, shape, non-finite values, integers not equal, or a relative
    L2 error over ``rtol``; None when they match."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype.name}{list(got.shape)}, native {want.dtype.name}{list(want.shape)}"
    if not floating(want.dtype):
        wrong = int(np.count_nonzero(got != want))
        return f"{wrong} of {want.size} values differ" if wrong else None
    a, e = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(e)
    if not np.array_equal(np.isfinite(a), finite) or not np.array_equal(a[~finite], e[~finite], equal_nan=True):
        return "NaN/Inf where native has other values"
    error, norm = np.linalg.norm(a[finite] - e[finite]), np.linalg.norm(e[finite])
    if error <= rtol * norm + rtol * 1e-3 * np.sqrt(max(e.size, 1)):
        return None
    return f"relative L2 error {error / norm if norm else error:.3g} > {rtol:g}"


@dataclass
class Reference:
    """What the delegate's outputs are checked against, for one input set."""

    native: list[np.ndarray]
    float_model: list[np.ndarray] | None = None  # quantized cases: the float model's outputs
    steps: list[float] = field(default_factory=list)  # quantized cases: each output's quantization step


def check_outputs(got: list[np.ndarray], ref: Reference, rtol: float, names: list[str], errors: Errors) -> None:
    """Raises Stop("OUTPUT_MISMATCH") where an output is off; adds every output's errors to ``errors``."""
    if len(got) != len(ref.native):
        raise Stop("OUTPUT_MISMATCH", f"{len(got)} outputs, native has {len(ref.native)}")
    for i, (g, want) in enumerate(zip(got, ref.native, strict=True)):
        if g.shape == want.shape:
            errors.add(g, want)
        why = quantized_mismatch(g, want, ref, i) if ref.float_model is not None else mismatch(g, want, rtol)
        if why:
            raise Stop("OUTPUT_MISMATCH", f"output {names[i]!r}: {why}")


def quantized_mismatch(got: np.ndarray, native: np.ndarray, ref: Reference, i: int) -> str | None:
    """An int8 model's output: its error against the float model may exceed native int8's by one step."""
    if got.shape != native.shape:
        return f"shape {list(got.shape)}, native {list(native.shape)}"
    real = ref.float_model[i].astype(np.float64)
    ours, theirs = np.abs(got - real).max(initial=0), np.abs(native - real).max(initial=0)
    allowed = theirs + ref.steps[i] + 1e-6
    if ours <= allowed:
        return None
    return (f"max error against the float model {ours:.4g} > native int8's {theirs:.4g} + one output "
            f"step {ref.steps[i]:.4g}")


def tolerance(settings: Settings) -> tuple[str, float]:
    """The delegate's declared ``precision`` (a class or instance attribute; float32 when absent) and its
    relative tolerance."""
    precision = str(getattr(settings.load(), "precision", "float32"))
    return precision, TOLERANCES.get(precision, TOLERANCES["float32"])


# ---- running one case ------------------------------------------------------------------------------------


def run_case(case: Case, settings: Settings) -> Result:
    """Runs ``case`` in this process and says how it went (never raises for the delegate's failures)."""
    start = time.perf_counter()
    result = Result(case.id, case.op, "SUCCESS")
    errors = Errors()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check = _op_check if case.kind == "op" else MODEL_CHECKS[case.check]
            check(case, settings, result, errors)
    except Stop as stop:
        result.category, result.message = stop.category, str(stop)
    except Exception as exc:  # noqa: BLE001 - the tool's own bug would otherwise end the whole run
        result.category, result.message = "RUN_FAIL", f"delegate-test error: {described(exc)}"
    result.max_abs_error, result.mean_relative_error, result.sqnr_db = errors.max_abs, errors.mean_relative, \
        errors.sqnr_db
    result.seconds = time.perf_counter() - start
    return result


def _op_check(case: Case, settings: Settings, result: Result, errors: Errors) -> None:
    """One node case: the native kernels must pass it, then the delegate must match them."""
    from lite.tools.support import node_cases

    data, feeds = _native_node_case(node_cases([case.op])[case.name])
    native = native_model(data)
    refs = [Reference(predict(native, inputs)) for inputs in feeds]
    delegate = settings.load()
    if getattr(delegate, "min_nodes_per_partition", 1) > 1:
        settings = _single_node(settings)
    _compare_delegated(settings, data, feeds, refs, result, errors)


@dataclass(frozen=True)
class _SingleNodeSettings(Settings):
    """Settings whose delegate offers single nodes (op cases: ``min_nodes_per_partition`` lowered to 1)."""

    def load(self):
        delegate = super().load()
        delegate.min_nodes_per_partition = 1
        return delegate


def _single_node(settings: Settings) -> Settings:
    return _SingleNodeSettings(settings.delegate, settings.options, settings.timeout, settings.thread_num)


def _native_node_case(onnx_case) -> tuple[bytes, list[list[np.ndarray]]]:
    """(the case's .lite bytes, its input sets); Stop("SKIPPED") when the native kernels fail it."""
    from lite.schema.writer import write_model
    from lite.tools.converter import convert_to_graph
    from lite.tools.support import as_array
    from lite.tools.support import run_case as run_native

    try:
        run_native(onnx_case)
        graph, _ = convert_to_graph(onnx_case.model)
    except Exception as exc:  # noqa: BLE001 - a case the native kernels fail has no oracle
        raise Stop("SKIPPED", f"the native kernels fail this case: {described(exc)[:200]}") from exc
    return write_model(graph), [[as_array(v) for v in inputs] for inputs, _ in onnx_case.data_sets]


def _compare_delegated(settings: Settings, data: bytes, feeds: list[list[np.ndarray]], refs: list[Reference],
                       result: Result, errors: Errors) -> None:
    """Builds with the delegate, predicts each input set twice (must agree) and compares with ``refs``."""
    model, _ = delegated_model(settings, data)
    result.nodes_delegated, result.nodes_total, reasons = delegated_counts(model)
    names = [t.name for t in model.get_outputs()]
    rtol = tolerance(settings)[1]
    for inputs, ref in zip(feeds, refs, strict=True):
        got = _twice(model, inputs, "run")
        check_outputs(got, ref, rtol, names, errors)
    if not result.nodes_delegated:
        raise Stop("SUCCESS_UNDELEGATED", reasons)


def _twice(model, inputs: Sequence[np.ndarray], phase: str) -> list[np.ndarray]:
    """Two predicts on the same inputs; Stop when one fails (in ``phase``) or they differ."""
    try:
        first, second = predict(model, inputs), predict(model, inputs)
    except Exception as exc:
        raise Stop(PHASE_FAILURES[phase], described(exc)) from exc
    for a, b in zip(first, second, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():  # bit for bit, NaNs too
            raise Stop("NONDETERMINISTIC", "two predicts on the same inputs gave different outputs")
    return first


# ---- model cases -----------------------------------------------------------------------------------------


@dataclass
class ZooModel:
    """A zoo model as the checks use it: .lite bytes, inputs, and the float reference for an int8 form."""

    data: bytes
    onnx_inputs: list[tuple[str, int, list]]  # (name, ONNX elem type, dims)
    float_data: bytes | None = None
    steps: list[float] = field(default_factory=list)


@functools.cache
def zoo_model(name: str, quantized: bool, dynamic: bool) -> ZooModel:
    """The zoo model at its small size (dynamic batch/sequence for resizing), quantized static QDQ if asked."""
    from lite.tools import zoo
    from lite.tools.converter import convert
    from lite.tools.converter.quantize import quantize_onnx

    model = zoo.MODELS[name](dynamic_batch=dynamic, **ZOO_SIZES[name])
    inputs = [(v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
              for v in model.graph.input]
    if not quantized:
        return ZooModel(convert(model), inputs)
    rng = np.random.default_rng(1)
    samples = {n: np.stack([random_input(t, _dims(d, BASE_DIMS), rng) for _ in range(CALIBRATION_SAMPLES)])
               for n, t, d in inputs}
    q = quantize_onnx(model, "static", samples)
    steps = [output_step(q, o.name) for o in q.graph.output]
    return ZooModel(convert(q), inputs, convert(model), steps)


def output_step(model, output: str) -> float:
    """The scale of the DequantizeLinear writing ``output`` (one quantization step of it); 0 where a float op
    writes it."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if output in node.output and node.op_type == "DequantizeLinear" and node.input[1] in consts:
            return float(np.max(consts[node.input[1]]))
    return 0.0


def _dims(dims: list, sizes: dict[str, int]) -> list[int]:
    return [sizes.get(d, 1) if isinstance(d, str) else int(d) for d in dims]


def random_input(elem_type: int, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """Standard-normal float32 (token ids below 100 for integer inputs)."""
    from onnx import TensorProto

    if elem_type == TensorProto.FLOAT:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(0, 100, shape).astype(np.int64)


def feeds_for(zm: ZooModel, sizes: dict[str, int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [random_input(t, _dims(d, sizes), rng) for _, t, d in zm.onnx_inputs]


def reference(zm: ZooModel, inputs: list[np.ndarray], native=None, float_native=None) -> Reference:
    """Native outputs on ``inputs`` (and the float model's, for an int8 form)."""
    native = native or native_model(zm.data)
    ref = Reference(predict(native, inputs))
    if zm.float_data is not None:
        ref.float_model = predict(float_native or native_model(zm.float_data), inputs)
        ref.steps = zm.steps
    return ref


def _native_zoo(case: Case, dynamic: bool = False) -> ZooModel:
    _REPORT("native")
    try:
        return zoo_model(case.name, case.quantized, dynamic)
    except Exception as exc:  # noqa: BLE001 - without a model there is no case
        raise Stop("SKIPPED", f"the model could not be made: {described(exc)[:300]}") from exc


def _main_check(case: Case, settings: Settings, result: Result, errors: Errors) -> None:
    zm = _native_zoo(case)
    inputs = feeds_for(zm, BASE_DIMS, 0)
    _compare_delegated(settings, zm.data, [inputs], [reference(zm, inputs)], result, errors)


def _resize_check(case: Case, settings: Settings, result: Result, errors: Errors) -> None:
    """Built, predicted, resized to another batch (and sequence length), predicted again."""
    zm, (first, second), refs = _resizable(case)
    model, _ = delegated_model(settings, zm.data)
    result.nodes_delegated, result.nodes_total, reasons = delegated_counts(model)
    names, rtol = [t.name for t in model.get_outputs()], tolerance(settings)[1]
    for inputs, ref in zip((first, second), refs, strict=True):
        try:
            model.resize(model.get_inputs(), [x.shape for x in inputs])
        except Exception as exc:
            raise Stop("RESIZE_FAIL", f"resize to {[list(x.shape) for x in inputs]}: {described(exc)}") from exc
        got = _twice(model, inputs, "resize")
        try:
            check_outputs(got, ref, rtol, names, errors)
        except Stop as stop:
            raise Stop("RESIZE_FAIL", f"at input shapes {[list(x.shape) for x in inputs]}: {stop}") from stop
    if not result.nodes_delegated:
        raise Stop("SUCCESS_UNDELEGATED", reasons)


def _resizable(case: Case) -> tuple[ZooModel, list[list[np.ndarray]], list[Reference]]:
    """The model with static shapes where the native kernels resize it, else the one with a dynamic batch (and
    sequence); the inputs at both shapes and the native references."""
    dynamic = _native_zoo(case, dynamic=True)
    feeds = [feeds_for(dynamic, BASE_DIMS, 0), feeds_for(dynamic, RESIZED_DIMS, 1)]
    for zm in (_native_zoo(case), dynamic):
        try:
            return zm, feeds, _resized_references(zm, feeds)
        except Exception as exc:  # noqa: BLE001 - a static model the native kernels cannot resize: try dynamic
            failure = exc
    raise Stop("SKIPPED", f"the native kernels cannot resize it: {described(failure)[:300]}")


def _resized_references(zm: ZooModel, feeds: list[list[np.ndarray]]) -> list[Reference]:
    """Native references, each after ``Model.resize`` to its inputs' shapes."""
    native, float_native = native_model(zm.data), zm.float_data and native_model(zm.float_data)
    refs = []
    for inputs in feeds:
        for model in filter(None, (native, float_native)):
            model.resize(model.get_inputs(), [x.shape for x in inputs])
        refs.append(reference(zm, inputs, native, float_native))
    return refs


def _fallback_check(case: Case, settings: Settings, result: Result, errors: Errors) -> None:
    """Each graph kernel raises after its prepare(): the model must run natively and match."""
    zm = _native_zoo(case)
    inputs = feeds_for(zm, BASE_DIMS, 0)
    ref = reference(zm, inputs)
    model, probe = delegated_model(settings, zm.data, fallback=True, fail_prepare=True)
    result.nodes_delegated, result.nodes_total, reasons = delegated_counts(model)
    if not probe.taken:
        raise Stop("SUCCESS_UNDELEGATED", reasons)
    if model.graph_kernels():
        raise Stop("PREPARE_FAIL", f"graph kernels {[k.name for k in model.graph_kernels()]} still run after their "
                                   "prepare() failed")
    got = _twice(model, inputs, "run")
    try:
        check_outputs(got, Reference(ref.native), TOLERANCES["float32"], [t.name for t in model.get_outputs()],
                      errors)
    except Stop as stop:
        raise Stop("OUTPUT_MISMATCH", f"after falling back to native: {stop}") from stop
    result.nodes_delegated = probe.taken
    result.message = f"{probe.taken} nodes fell back to native"


def _save_load_check(case: Case, settings: Settings, result: Result, errors: Errors) -> None:
    """Partitions saved into the file (``compile_into``), loaded by the delegate in a fresh process."""
    from lite.model import compile_into

    zm = _native_zoo(case)
    inputs = feeds_for(zm, BASE_DIMS, 0)
    ref = reference(zm, inputs)
    _REPORT("save_load")
    try:
        saved, partitions, skipped = compile_into(zm.data, settings.context(fallback=False))
    except Exception as exc:
        raise Stop("SAVE_LOAD_FAIL", f"saving: {described(exc)}") from exc
    if not partitions:
        raise Stop("SUCCESS_UNDELEGATED", "no partition saved" + (f": {skipped[0]}" if skipped else ""))
    got, loaded = load_in_fresh_process(settings, saved, inputs)
    result.nodes_delegated, result.nodes_total = loaded["delegated"], loaded["total"]
    try:
        check_outputs(got, ref, tolerance(settings)[1], loaded["names"], errors)
    except Stop as stop:
        raise Stop("SAVE_LOAD_FAIL", f"after loading: {stop}") from stop
    result.message = f"{len(partitions)} partitions saved and loaded" + (f"; {len(skipped)} not saved"
                                                                         if skipped else "")


MODEL_CHECKS = {"main": _main_check, "resize": _resize_check, "save_load": _save_load_check,
                "fallback": _fallback_check}


# ---- the fresh process of the save/load check -----------------------------------------------------------


def load_in_fresh_process(settings: Settings, data: bytes, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], dict]:
    """Builds ``data`` with the delegate in a new Python process (``load_saved``); its outputs and report."""
    with tempfile.TemporaryDirectory(prefix="delite-delegate-test-") as folder:
        request = {"model": str(Path(folder, "model.lite")), "inputs": str(Path(folder, "inputs.npz")),
                   "outputs": str(Path(folder, "outputs.npz")), "report": str(Path(folder, "report.json")),
                   "delegate": settings.delegate, "options": dict(settings.options), "threads": settings.thread_num}
        Path(request["model"]).write_bytes(data)
        np.savez(request["inputs"], *inputs)
        Path(folder, "request.json").write_text(json.dumps(request))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        code = "import sys; from lite.tools.delegate_test import load_saved; sys.exit(load_saved(sys.argv[1]))"
        try:
            done = subprocess.run([sys.executable, "-c", code, str(Path(folder, "request.json"))], env=env,
                                  capture_output=True, text=True, timeout=max(10.0, settings.timeout * 0.8))
        except subprocess.TimeoutExpired as exc:
            raise Stop("SAVE_LOAD_FAIL", f"loading in a fresh process timed out after {exc.timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise Stop("SAVE_LOAD_FAIL", f"loading in a fresh process failed: {' | '.join(tail)}")
        with np.load(request["outputs"]) as saved:
            outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        return outputs, json.loads(Path(request["report"]).read_text())


def load_saved(request_path: str) -> int:
    """The fresh process's side: build the saved file with the delegate, require every saved partition loaded,
    predict, write the outputs. Returns the exit status (2: a partition was not loaded)."""
    import lite
    from lite.delegates import load_delegate

    request = json.loads(Path(request_path).read_text())
    model = lite.Model()
    delegate = load_delegate(request["delegate"], request["options"])
    context = lite.Context(thread_num=request["threads"], delegates=[delegate], fallback=False)
    model.build_from_file(request["model"], context=context)
    rows = model.partition_report()
    unused = sorted({r.blob for r in rows if r.blob and not r.blob.startswith("loaded")})
    if unused:
        print(f"saved partitions not loaded: {'; '.join(unused)[:500]}", file=sys.stderr)
        return 2
    with np.load(request["inputs"]) as given:
        inputs = [given[f"arr_{i}"] for i in range(len(given.files))]
    outputs = predict(model, inputs)
    np.savez(request["outputs"], *outputs)
    Path(request["report"]).write_text(json.dumps({
        "delegated": sum(r.runs_on not in ("native", "folded") for r in rows), "total": len(rows),
        "names": [t.name for t in model.get_outputs()]}))
    return 0


# ---- workers ---------------------------------------------------------------------------------------------


def _worker(conn, settings: Settings) -> None:
    """A worker process: runs the cases it is sent, reporting each phase as it starts."""
    global _REPORT
    _REPORT = lambda phase: conn.send(("phase", phase))  # noqa: E731
    logging.disable(logging.WARNING)  # the fallback check's warnings, the quantizer's notes: the report says it
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(("result", run_case(case, settings)))


@dataclass
class _Slot:
    process: Any
    conn: Any
    case: Case | None = None
    index: int = 0
    phase: str = "init"
    started: float = 0.0


class Runner:
    """Runs cases in worker processes, each case bounded by ``settings.timeout``; a worker that dies or
    overruns is replaced and its case fails in the phase it was in."""

    def __init__(self, settings: Settings, jobs: int = 1):
        self.settings, self.jobs = settings, max(1, jobs)
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self._slots: list[_Slot] = []

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, cases: Sequence[Case], done: Callable[[Result], None] | None = None) -> list[Result]:
        """Every case's result, in the order of ``cases``; ``done`` is called as each finishes."""
        pending, results = deque(enumerate(cases)), {}
        if any(case.kind == "op" for case in cases):
            from lite.tools.support import node_cases

            # NOTE: generated once here (seconds for all ops), so forked workers do not generate them on a case's clock
            node_cases({case.op for case in cases if case.kind == "op"})
        while len(self._slots) < min(self.jobs, len(cases)):
            self._slots.append(self._start())
        while pending or any(s.case for s in self._slots):
            for slot in self._slots:
                if slot.case is None and pending:
                    self._send(slot, *pending.popleft())
            for index, result in self._collect():
                results[index] = result
                if done:
                    done(result)
        return [results[i] for i in range(len(cases))]

    def run_one(self, case: Case) -> Result:
        return self.run([case])[0]

    def close(self) -> None:
        for slot in self._slots:
            with contextlib.suppress(OSError):
                slot.conn.send(None)
            slot.process.join(timeout=5)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(timeout=5)
        self._slots = []

    def _start(self) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker, args=(child, self.settings), daemon=True)
        process.start()
        child.close()
        return _Slot(process, parent)

    def _send(self, slot: _Slot, index: int, case: Case) -> None:
        slot.case, slot.index, slot.phase, slot.started = case, index, "init", time.monotonic()
        slot.conn.send(case)

    def _collect(self) -> list[tuple[int, Result]]:
        """Waits for a message, a dead worker or a deadline; the cases finished meanwhile."""
        busy = [s for s in self._slots if s.case]
        deadline = min(s.started for s in busy) + self.settings.timeout
        wait([s.conn for s in busy] + [s.process.sentinel for s in busy], timeout=max(0.0, deadline - time.monotonic()))
        finished = []
        for slot in busy:
            result = self._poll(slot)
            if result is not None:
                finished.append((slot.index, result))
                slot.case = None
        return finished

    def _poll(self, slot: _Slot) -> Result | None:
        try:
            while slot.conn.poll():
                kind, value = slot.conn.recv()
                if kind == "result":
                    return value
                slot.phase = value
        except (EOFError, OSError):
            pass
        elapsed = time.monotonic() - slot.started
        if slot.process.is_alive() and elapsed < self.settings.timeout:
            return None
        why = (f"timed out after {self.settings.timeout:g} s" if slot.process.is_alive()
               else f"the worker process died (exit code {slot.process.exitcode})")
        self._replace(slot)
        return Result(slot.case.id, slot.case.op, PHASE_FAILURES.get(slot.phase, "RUN_FAIL"),
                      f"{why} in {slot.phase}", seconds=elapsed)

    def _replace(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(timeout=5)
        fresh = self._start()
        slot.process, slot.conn = fresh.process, fresh.conn


# ---- expected failures and reports -------------------------------------------------------------------------


def read_expected_failures(path: str | os.PathLike) -> dict[str, str]:
    """``{case id or wildcard pattern: reason}`` from lines ``case_id  reason`` (``#`` starts a comment)."""
    listed = {}
    for line in Path(path).read_text().splitlines():
        text = line.strip()
        if text and not text.startswith("#"):
            case_id, _, reason = text.partition(" ")
            listed[case_id] = reason.strip() or "(no reason given)"
    return listed


def mark_expected(results: Iterable[Result], listed: dict[str, str]) -> None:
    """Sets each result's ``expected`` from the listed ids and patterns."""
    for result in results:
        for pattern, reason in listed.items():
            if result.case_id == pattern or fnmatch.fnmatchcase(result.case_id, pattern):
                result.expected = reason
                break


def exit_status(results: Iterable[Result]) -> int:
    return 1 if any(r.unexpected for r in results) else 0


def _number(value: float | None, form: str = ".3g") -> str:
    return "-" if value is None else format(value, form)


def markdown(results: Sequence[Result], title: str, notes: Sequence[str] = ()) -> str:
    """The report: counts by category, the failures with their messages, a table by op (failing ops first)."""
    counts = Counter(r.category for r in results)
    lines = [f"# {title}", "", *notes, "", "| category | cases |", "|---|---|"]
    lines += [f"| {c} | {counts[c]} |" for c in CATEGORIES if counts[c]]
    unexpected, fixed = [r for r in results if r.unexpected], [r for r in results if r.fixed]
    expected = [r for r in results if r.failed and not r.unexpected]
    lines += ["", f"{len(unexpected)} unexpected failures, {len(expected)} expected failures, "
                  f"{len(fixed)} expected failures that passed."]
    lines += _failure_table(unexpected + expected + fixed)
    lines += _op_table(results)
    return "\n".join(lines) + "\n"


def _cell(text: str, width: int = 300) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def _failure_table(rows: list[Result]) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Failures", "", "| case | category | expected | message |", "|---|---|---|---|"]
    for r in rows:
        status = "PASSED (remove it from the list)" if r.fixed else (_cell(r.expected, 80) if r.expected else "no")
        lines.append(f"| {r.case_id} | {r.category} | {status} | {_cell(r.message)} |")
    return lines


def _op_table(results: Sequence[Result]) -> list[str]:
    by_op: dict[str, list[Result]] = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    lines = ["", "## By op", "", "| op | cases | pass | undelegated | failures | nodes delegated | max abs error "
             "| worst SQNR dB | seconds | first message |", "|---|---|---|---|---|---|---|---|---|---|"]
    for op, rows in sorted(by_op.items(), key=lambda kv: (-sum(r.unexpected for r in kv[1]),
                                                           -sum(r.failed for r in kv[1]), kv[0])):
        failures = [r for r in rows if r.failed]
        first = next((r for r in failures + rows if r.message), None)
        sqnr = [r.sqnr_db for r in rows if r.sqnr_db is not None]
        lines.append(
            f"| {op} | {len(rows)} | {sum(r.category == 'SUCCESS' for r in rows)} "
            f"| {sum(r.category == 'SUCCESS_UNDELEGATED' for r in rows)} | "
            f"{', '.join(sorted({r.category for r in failures})) or '-'} "
            f"| {sum(r.nodes_delegated for r in rows)}/{sum(r.nodes_total for r in rows)} "
            f"| {_number(max(r.max_abs_error for r in rows))} | {_number(min(sqnr) if sqnr else None, '.1f')} "
            f"| {sum(r.seconds for r in rows):.2f} | {_cell(first.message, 120) if first else ''} |")
    return lines


def report_json(results: Sequence[Result], settings: Settings, extra: dict) -> dict:
    """The JSON report: settings, counts and every case."""
    counts = Counter(r.category for r in results)
    return {"delegate": settings.delegate, "options": dict(settings.options), **extra,
            "counts": {c: counts[c] for c in CATEGORIES if counts[c]},
            "unexpected": sum(r.unexpected for r in results), "fixed": sum(r.fixed for r in results),
            "cases": [{**asdict(r), "unexpected": r.unexpected} for r in results]}


class Progress:
    """Cases done, the last outcome and an ETA on stderr: one rewritten line on a terminal, else a line
    every few seconds and one per unexpected failure."""

    def __init__(self, total: int, stream=sys.stderr, every: float = 5.0):
        self.total, self.done, self.stream, self.every = total, 0, stream, every
        self.start = self._last = time.monotonic()
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, result: Result) -> None:
        self.done += 1
        now = time.monotonic()
        eta = (now - self.start) / self.done * (self.total - self.done)
        line = (f"[{self.done}/{self.total}] {100 * self.done // max(self.total, 1)}% ETA {_duration(eta)}  "
                f"{result.case_id} {result.category}")
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:150] + ("\n" if self.done == self.total else ""))
        elif result.unexpected or now - self._last >= self.every or self.done == self.total:
            self.stream.write(line + (f": {result.message[:200]}" if result.unexpected else "") + "\n")
            self._last = now
        self.stream.flush()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


# ---- the command -------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lite-delegate-test", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Check a delegate op by op and model by model against Delite's native "
                                            "kernels.")
    from lite.tools import add_version

    add_version(p)
    p.add_argument("--delegate", required=True, help="example_npu, tvm, ort or module:Class")
    p.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                   help="constructor option for the delegate (repeatable)")
    p.add_argument("--suite", choices=("ops", "models", "all"),
                   help="which cases (default: ops with --ops alone, models with --models alone, else all)")
    p.add_argument("--ops", type=_names, metavar="OP,...", help="ONNX op types of the node cases (default: all)")
    p.add_argument("--models", type=_names, metavar="NAME,...",
                   help=f"zoo models (default: {','.join(DEFAULT_MODELS)}; also resnet50)")
    p.add_argument("--quantized", action="store_true", help="also each model's static QDQ int8 form")
    p.add_argument("--expected-failures", metavar="FILE", help="'case_id  reason' lines: failures that do not fail")
    p.add_argument("--json", metavar="OUT.json", help="write every case's result as JSON")
    p.add_argument("--markdown", metavar="OUT.md", help="write the report as Markdown")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="most seconds one case may take (default: %(default)s)")
    p.add_argument("--thread-num", type=int, default=1,
                   help="threads of the delegated model (default: %(default)s; the native reference runs on one)")
    return p.parse_args(argv)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def collect(args: argparse.Namespace, saves: bool) -> list[Case]:
    """The cases the options select."""
    suite = args.suite or ("ops" if args.ops and not args.models else "models" if args.models and not args.ops
                           else "all")
    cases = op_cases(args.ops) if suite in ("ops", "all") else []
    if suite in ("models", "all"):
        unknown = sorted(set(args.models or ()) - set(ZOO_SIZES))
        if unknown:
            raise ValueError(f"unknown models {unknown}; choose from {', '.join(ZOO_SIZES)}")
        cases += model_cases(args.models or DEFAULT_MODELS, args.quantized, saves)
    return cases


def prepare_settings(args: argparse.Namespace) -> tuple[Settings, str]:
    """The settings, after checking that the delegate loads here; and its class name."""
    from lite.delegates import parse_options

    options = tuple(sorted(parse_options(args.delegate_option).items()))
    settings = Settings(args.delegate, options, args.timeout, args.thread_num)
    delegate = settings.load()
    if delegate is None:
        raise ValueError("--delegate native tests nothing: name a delegate")
    return settings, type(delegate).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lite-delegate-test``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        from lite.delegate import saves_graph_kernels

        settings, name = prepare_settings(args)
        cases = collect(args, saves_graph_kernels(settings.load()))
        listed = read_expected_failures(args.expected_failures) if args.expected_failures else {}
    except (ValueError, OSError, ImportError) as exc:
        print(f"lite-delegate-test: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - lite.LiteError and a vendor constructor's own errors
        print(f"lite-delegate-test: {described(exc)}", file=sys.stderr)
        return 2
    start = time.monotonic()
    with Runner(settings, args.jobs) as runner:
        results = runner.run(cases, Progress(len(cases)))
    mark_expected(results, listed)
    write_reports(args, settings, name, results, time.monotonic() - start, shlex.join(["lite-delegate-test", *argv]))
    return exit_status(results)


def write_reports(args: argparse.Namespace, settings: Settings, name: str, results: list[Result],
                  seconds: float, command: str = "") -> None:
    """The Markdown and JSON files asked for (both saying the ``command`` that made them), and the summary on
    stdout."""
    precision, rtol = tolerance(settings)
    notes = [f"Delegate `{settings.delegate}` ({name}), options {dict(settings.options)}; precision {precision}: "
             f"relative L2 tolerance {rtol:g} (int8 models: native int8's error plus one output step). "
             f"{len(results)} cases in {seconds:.1f} s with {args.jobs} worker(s), thread_num {settings.thread_num}."]
    notes += ["", f"Command: `{command}`"] if command else []
    text = markdown(results, f"lite-delegate-test: {name}", notes)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        extra = {"class": name, "precision": precision, "rtol": rtol, "seconds": seconds, "jobs": args.jobs,
                 "command": command}
        Path(args.json).write_text(json.dumps(report_json(results, settings, extra), indent=1, default=str))
    print(text.split("\n## By op")[0].rstrip())


if __name__ == "__main__":
    sys.exit(main())
