"""Post-training int8 quantization of an ONNX model before conversion, on onnxruntime.quantization.

Example::

    from lite.tools.converter import convert, quantize

    model = onnx.load("model.onnx")
    samples = quantize.load_calibration("inputs.npz", model)        # {input name: (N, *shape)}
    q = quantize.quantize_model(model, "static", samples)
    data = convert(q.model)                                           # the .lite bytes
    print(quantize.accuracy_summary(model, data, samples).table())

Modes (every one runs onnxruntime's ``quant_pre_process`` first, which folds BatchNormalization
into the convs so that no float BatchNormalization stays between quantized convs):

- ``static``: ``quantize_static`` in QDQ format, calibrated on the samples: int8 weights
  (symmetric, per output channel unless ``per_channel=False``) and int8 activations.
- ``dynamic``: ``quantize_dynamic``: int8 weights, uint8 activations quantized at run time
  (DynamicQuantizeLinear, ConvInteger, MatMulInteger; onnxruntime quantizes a ConvInteger's
  weight per tensor whatever ``per_channel`` says).
- ``weight-only``: int8 weights (symmetric, per output channel, rounding half to even) stored as
  constants that a DequantizeLinear node turns back to float in front of each Conv, MatMul and
  Gemm; activations stay float.

Calibration samples come from an ``.npz`` whose keys are the model's input names, each array
the samples of that input along a leading axis: ``(N, *input shape)``. No member is loaded
whose header asks for more than the memory limit, and none is unpickled.
"""

from __future__ import annotations

import csv
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.errors import InputError, LiteError, MemoryLimitError
from lite.extras import ort_session_options, require
from lite.schema.reader import DEFAULT_MEMORY_LIMIT

__all__ = ["MODES", "METHODS", "AccuracySummary", "OutputAccuracy", "QuantizedModel", "TensorRow",
           "accuracy_summary", "load_calibration", "quantize_model", "quantize_onnx", "tensor_report",
           "write_report_csv"]

MODES = ("static", "dynamic", "weight-only")
METHODS = ("minmax", "entropy", "percentile")
INT8_MAX = 127  # symmetric int8 weights use [-127, 127], as onnxruntime's quantizer does
WEIGHT_OPS = {"Conv": 1, "MatMul": 1, "Gemm": 1}  # op -> index of its weight input
Samples = Mapping[str, np.ndarray]


@dataclass
class QuantizedModel:
    """A quantized ONNX model, with the float model it was quantized from.

    Attributes:
        model: the quantized model, as onnxruntime's quantizer wrote it (``convert(q.model)``).
        prepared: the float model after ``quant_pre_process`` (BatchNormalization folded): its
            tensors carry the names the quantized tensors were made from.
        mode: ``static``, ``dynamic`` or ``weight-only``.
    """

    model: onnx.ModelProto
    prepared: onnx.ModelProto
    mode: str


# ---- calibration samples -------------------------------------------------------------------------


def model_inputs(model: onnx.ModelProto) -> dict[str, tuple[np.dtype, list[int | None]]]:
    """The graph inputs that are not initializers: ``{name: (dtype, dims)}``, None for a dynamic dim."""
    constants = {t.name for t in model.graph.initializer}
    found = {}
    for value in model.graph.input:
        if value.name in constants:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        found[value.name] = (np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)), dims)
    return found


def load_calibration(path: str | os.PathLike, model: onnx.ModelProto, *,
                     memory_limit: int = DEFAULT_MEMORY_LIMIT) -> dict[str, np.ndarray]:
    """The calibration samples in the ``.npz`` at ``path``, checked against ``model``'s inputs.

    Raises:
        InputError: the file is not a readable npz; a key is missing or not an input; an array
            holds Python objects, has another dtype than its input, or is not ``(N, *input shape)``;
            the inputs' sample counts differ.
        MemoryLimitError: a member's header asks for more than ``memory_limit`` bytes (nothing loaded).
    """
    arrays = _read_npz(Path(path), memory_limit)
    check_samples(arrays, model, str(path))
    return arrays


def _read_npz(path: Path, memory_limit: int) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as archive:
            return {_member_key(info.filename): _read_member(archive, info, memory_limit)
                    for info in archive.infolist()}
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"cannot read calibration file {str(path)!r} as .npz: {exc}") from exc


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _member_key(filename: str) -> str:
    return filename[:-4] if filename.endswith(".npy") else filename


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, memory_limit: int) -> np.ndarray:
    """One .npy member: its header checked (no objects, within ``memory_limit``) before its data is read."""
    key = _member_key(info.filename)
    with archive.open(info) as f:
        try:
            header = _HEADER_READERS.get(np.lib.format.read_magic(f))
            if header is None:
                raise ValueError("an .npy format version other than 1.0 or 2.0")
            shape, fortran, dtype = header(f)
        except ValueError as exc:
            raise InputError(f"calibration array {key!r} is not a .npy array: {exc}") from exc
        if dtype.hasobject:
            raise InputError(f"calibration array {key!r} holds Python objects (dtype {dtype}); numeric arrays "
                             "only (it would need unpickling, which is refused)")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if nbytes > memory_limit:
            raise MemoryLimitError(f"calibration array {key!r} of shape {shape} and dtype {dtype} needs {nbytes:,} "
                                   f"bytes, more than the memory limit of {memory_limit:,} bytes")
        data = f.read(nbytes)
    if len(data) != nbytes:
        raise InputError(f"calibration array {key!r} is truncated: {len(data):,} of {nbytes:,} bytes")
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def check_samples(samples: Samples, model: onnx.ModelProto, where: str = "the calibration samples") -> int:
    """The sample count N, after checking ``samples`` against ``model``'s inputs.

    Raises:
        InputError: naming the first problem found.
    """
    inputs = model_inputs(model)
    missing, extra = sorted(set(inputs) - set(samples)), sorted(set(samples) - set(inputs))
    if missing or extra:
        raise InputError(f"{where}: keys must be the model's input names {sorted(inputs)}; "
                         + "; ".join(filter(None, [missing and f"missing {missing}", extra and f"not inputs {extra}"])))
    counts = {name: _check_sample_array(name, np.asarray(samples[name]), *inputs[name], where) for name in inputs}
    if len(set(counts.values())) > 1:
        raise InputError(f"{where}: the inputs have different sample counts {counts}")
    return next(iter(counts.values()), 0)


def _check_sample_array(name: str, array: np.ndarray, dtype: np.dtype, dims: list[int | None], where: str) -> int:
    expected = "(N, " + ", ".join("?" if d is None else str(d) for d in dims) + ")"
    if array.dtype != dtype:
        raise InputError(f"{where}: input {name!r} is {array.dtype}, the model takes {dtype}")
    fits = array.ndim == len(dims) + 1 and all(d is None or d == n for d, n in zip(dims, array.shape[1:], strict=True))
    if not fits or array.shape[0] == 0:
        raise InputError(f"{where}: input {name!r} has shape {array.shape}; expected {expected}: a leading "
                         "axis of N >= 1 samples, then the input's shape")
    return array.shape[0]


def iter_samples(samples: Samples) -> Iterator[dict[str, np.ndarray]]:
    """One feed ``{input name: array}`` per sample."""
    count = min((len(a) for a in samples.values()), default=0)
    for i in range(count):
        yield {name: np.ascontiguousarray(array[i]) for name, array in samples.items()}


# ---- quantization ----------------------------------------------------------------------------------


def quantize_onnx(model: onnx.ModelProto, mode: str, calibration: Samples | None = None, *,
                  method: str = "minmax", per_channel: bool = True, activation_type: str = "int8",
                  weight_type: str = "int8") -> onnx.ModelProto:
    """``model`` quantized for the converter (``quantize_model(...).model``); see ``quantize_model``."""
    return quantize_model(model, mode, calibration, method=method, per_channel=per_channel,
                          activation_type=activation_type, weight_type=weight_type).model


def quantize_model(model: onnx.ModelProto, mode: str, calibration: Samples | None = None, *,
                   method: str = "minmax", per_channel: bool = True, activation_type: str = "int8",
                   weight_type: str = "int8") -> QuantizedModel:
    """Quantizes ``model`` (not modified) with onnxruntime.quantization, in a temporary folder.

    Args:
        model: the float ONNX model.
        mode: ``static`` (QDQ, calibrated), ``dynamic`` or ``weight-only``.
        calibration: ``{input name: (N, *shape) array}``; required for ``static``, unused otherwise.
        method: how ``static`` picks activation ranges: ``minmax``, ``entropy`` or ``percentile``.
        per_channel: one weight scale per output channel (else one per tensor).
        activation_type, weight_type: ``int8`` or ``uint8`` (``static``; ``dynamic`` takes
            ``weight_type`` and always quantizes activations to uint8).

    Raises:
        InputError: an unknown mode, method or type; ``static`` without calibration samples, or
            samples that do not fit the model.
        MissingPackageError: onnxruntime is not installed.
        LiteError: onnxruntime's quantizer failed (its message included).
    """
    _check_options(mode, method, activation_type, weight_type)
    if mode == "static":
        if calibration is None:
            raise InputError("static quantization needs calibration samples (lite-convert --calibration FILE.npz)")
        check_samples(calibration, model)
    require("onnxruntime", "quantization")
    with tempfile.TemporaryDirectory(prefix="delite-quantize-") as folder:
        prepared = _prepare(model, Path(folder))
        quantized = _run_quantizer(prepared, Path(folder), mode, calibration, method, per_channel,
                                   activation_type, weight_type)
    return QuantizedModel(quantized, prepared, mode)


def _check_options(mode: str, method: str, activation_type: str, weight_type: str) -> None:
    for what, value, allowed in [("mode", mode, MODES), ("calibration method", method, METHODS),
                                 ("activation type", activation_type, ("int8", "uint8")),
                                 ("weight type", weight_type, ("int8", "uint8"))]:
        if value not in allowed:
            raise InputError(f"unknown quantization {what} {value!r}; one of {', '.join(allowed)}")


def _prepare(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """onnxruntime's ``quant_pre_process``: shape inference and its graph optimisations (BN folding)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    path = folder / "prepared.onnx"
    try:
        quant_pre_process(model, path)
    except Exception as exc:  # NOTE: onnxruntime raises many types; each is a failure to quantize
        raise LiteError(f"onnxruntime's quant_pre_process failed: {type(exc).__name__}: {exc}") from exc
    return onnx.load(path)


def _run_quantizer(prepared: onnx.ModelProto, folder: Path, mode: str, calibration: Samples | None, method: str,
                   per_channel: bool, activation_type: str, weight_type: str) -> onnx.ModelProto:
    if mode == "weight-only":
        return quantize_weights(prepared, per_channel=per_channel)
    from onnxruntime import quantization as oq

    source, output = folder / "prepared.onnx", folder / "quantized.onnx"
    types = {"int8": oq.QuantType.QInt8, "uint8": oq.QuantType.QUInt8}
    try:
        if mode == "dynamic":
            oq.quantize_dynamic(source, output, per_channel=per_channel, weight_type=types[weight_type])
        else:
            methods = {"minmax": oq.CalibrationMethod.MinMax, "entropy": oq.CalibrationMethod.Entropy,
                       "percentile": oq.CalibrationMethod.Percentile}
            oq.quantize_static(source, output, _reader(calibration), quant_format=oq.QuantFormat.QDQ,
                               per_channel=per_channel, activation_type=types[activation_type],
                               weight_type=types[weight_type], calibrate_method=methods[method])
    except Exception as exc:  # NOTE: as in _prepare
        raise LiteError(f"onnxruntime's quantize_{mode} failed: {type(exc).__name__}: {exc}") from exc
    return onnx.load(output)


def _reader(samples: Samples):
    """An onnxruntime ``CalibrationDataReader`` over ``samples``, one sample per ``get_next``."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter_samples(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    return Reader()


# ---- weight-only -----------------------------------------------------------------------------------


def quantize_weights(model: onnx.ModelProto, *, per_channel: bool = True) -> onnx.ModelProto:
    """A copy of ``model`` whose Conv, MatMul and Gemm float constant weights are int8 (symmetric,
    per output channel, rounding half to even), each read through a DequantizeLinear node."""
    model = _with_opset(model, 13)  # per-axis DequantizeLinear
    constants = {t.name: t for t in model.graph.initializer}
    done = {v.name for v in [*model.graph.input, *model.graph.output]}  # an initializer that is also an input stays
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        index = WEIGHT_OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        name = node.input[index] if index is not None and index < len(node.input) else ""
        axis = _channel_axis(node, constants.get(name))
        if axis is not None and name not in done:
            nodes.append(_dequantize_weight(model, constants[name], axis if per_channel else None))
            done.add(name)
        nodes.append(node)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    return model


def _channel_axis(node: onnx.NodeProto, weight: TensorProto | None) -> int | None:
    """The output-channel axis of ``node``'s float constant weight, or None where it is not quantized."""
    if weight is None or weight.data_type != TensorProto.FLOAT or len(weight.dims) < 2:
        return None
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return len(weight.dims) - 1 if len(weight.dims) == 2 else None  # MatMul: B is (K, N)


def _dequantize_weight(model: onnx.ModelProto, weight: TensorProto, axis: int | None) -> onnx.NodeProto:
    """Replaces the float initializer ``weight`` by int8 values and scales; returns the
    DequantizeLinear node that gives the float weight back under its own name."""
    w = numpy_helper.to_array(weight).astype(np.float32)
    q, scale = symmetric_int8(w, axis)
    name = weight.name
    model.graph.initializer.remove(weight)
    model.graph.initializer.extend([numpy_helper.from_array(q, f"{name}_quantized"),
                                    numpy_helper.from_array(scale, f"{name}_scale"),
                                    numpy_helper.from_array(np.zeros_like(scale, np.int8), f"{name}_zero_point")])
    attrs = {} if axis is None else {"axis": axis}
    return helper.make_node("DequantizeLinear", [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
                            [name], name=f"{name}_DequantizeLinear", **attrs)


def symmetric_int8(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, float32 scales) with ``w ~ q * scale``: per slice along ``axis`` (one scale for
    the whole tensor when None), scale = max|w| / 127 (1 for an all-zero slice), round half to even."""
    reduce = tuple(d for d in range(w.ndim) if d != axis) if axis is not None else None
    peak = np.abs(w).max(axis=reduce, keepdims=True)
    scale = np.where(peak > 0, peak / INT8_MAX, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, (scale.reshape(-1) if axis is not None else scale.reshape(()))


def _with_opset(model: onnx.ModelProto, least: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    standard = next((o for o in copy.opset_import if o.domain in ("", "ai.onnx")), None)
    if standard is not None and standard.version < least:
        copy = onnx.version_converter.convert_version(copy, least)
    return copy


# ---- accuracy --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputAccuracy:
    """One model output, quantized against float, over every sample.

    Attributes:
        name: the output's name.
        cosine: cosine similarity of all samples' values together.
        max_abs_error: the largest absolute difference.
        top1_agreement: for a 2-D output (batch, classes): the share of rows whose argmax agrees; else None.
    """

    name: str
    cosine: float
    max_abs_error: float
    top1_agreement: float | None


@dataclass(frozen=True)
class AccuracySummary:
    """The quantized .lite model against the float ONNX model on ``samples`` inputs."""

    samples: int
    outputs: list[OutputAccuracy]

    def table(self) -> str:
        """A line per output, as lite-convert prints them."""
        width = max([len("output"), *(len(o.name) for o in self.outputs)])
        lines = [f"quantized .lite against the float ONNX model on {self.samples} samples:",
                 f"  {'output':<{width}}  {'cosine':>8}  {'max abs err':>11}  {'top-1 agree':>11}"]
        for o in self.outputs:
            top1 = "-" if o.top1_agreement is None else f"{o.top1_agreement:.1%}"
            lines.append(f"  {o.name:<{width}}  {o.cosine:8.5f}  {o.max_abs_error:11.4g}  {top1:>11}")
        return "\n".join(lines)


class _Agreement:
    """Cosine, max abs error and top-1 agreement of two streams of arrays, kept as running sums."""

    def __init__(self) -> None:
        self.dot = self.norm_a = self.norm_b = self.max_error = 0.0
        self.rows = self.agree = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        self.dot += float(np.vdot(a, b))
        self.norm_a += float(np.vdot(a, a))
        self.norm_b += float(np.vdot(b, b))
        self.max_error = max(self.max_error, float(np.abs(a - b).max(initial=0.0)))
        if a.ndim == 2 and a.shape[1] > 1:
            self.rows += a.shape[0]
            self.agree += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())

    @property
    def cosine(self) -> float:
        if self.norm_a == 0 or self.norm_b == 0:
            return 1.0 if self.norm_a == self.norm_b else 0.0
        return self.dot / np.sqrt(self.norm_a * self.norm_b)

    @property
    def top1(self) -> float | None:
        return self.agree / self.rows if self.rows else None


def accuracy_summary(float_model: onnx.ModelProto, lite_data: bytes, samples: Samples) -> AccuracySummary:
    """Runs ``float_model`` in onnxruntime and the quantized ``lite_data`` on Delite's native CPU
    kernels on every sample, and compares each output."""
    count = check_samples(samples, float_model)
    session = _session(float_model)
    model = _lite_model(lite_data)
    names = [t.name for t in model.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    stats = {name: _Agreement() for name in outputs}
    for feed in iter_samples(samples):
        expected = session.run(None, feed)
        actual = [t.get_data_to_numpy() for t in model.predict([feed[n] for n in names])]
        for name, a, e in zip(outputs, actual, expected, strict=True):
            stats[name].add(a, e)
    return AccuracySummary(count, [OutputAccuracy(n, s.cosine, s.max_error, s.top1) for n, s in stats.items()])


def _session(model: onnx.ModelProto):
    ort = require("onnxruntime", "the quantization report")
    return ort.InferenceSession(model.SerializeToString(), ort_session_options(),
                                providers=["CPUExecutionProvider"])


def _lite_model(data: bytes):
    import lite

    model = lite.Model()
    model.build(data, lite.ModelType.LITE)
    return model


# ---- per-tensor report -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorRow:
    """One quantized tensor: its parameters and, where the float model has the same tensor, the
    dequantized values against the float ones (all samples for activations).

    Attributes:
        name: the quantized tensor.
        kind: ``activation``, ``weight`` or ``bias``.
        dtype: its integer type.
        float_name: the float tensor it quantizes, or "" where the float model has no such tensor.
        channels: the number of scales (1: per tensor).
        scale_min, scale_max: its scales' range.
        zero_point: the zero point, or ``min..max`` of the per-channel zero points.
        cosine, max_abs_error: dequantized against float; None where not measured.
    """

    name: str
    kind: str
    dtype: str
    float_name: str
    channels: int
    scale_min: float
    scale_max: float
    zero_point: str
    cosine: float | None
    max_abs_error: float | None


def tensor_report(q: QuantizedModel, samples: Samples | None = None) -> list[TensorRow]:
    """A row per quantized tensor of ``q``: constants (weights, biases) measured in numpy, and
    the activations a QuantizeLinear node writes measured over ``samples`` (the quantized model
    run by Delite with those tensors as extra outputs, the float model by onnxruntime).

    Activations quantized at run time (``dynamic``) have no fixed parameters and get no row.
    """
    constants = {t.name: numpy_helper.to_array(t) for t in q.model.graph.initializer}
    floats = {t.name: numpy_helper.to_array(t) for t in q.prepared.graph.initializer}
    nodes = q.model.graph.node
    rows = [_constant_row(node, constants, floats) for node in nodes if _is_constant_dq(node, constants)]
    rows += [_integer_weight_row(node, constants, floats) for node in nodes
             if node.op_type in ("ConvInteger", "MatMulInteger") and node.input[1] in constants]
    activations = [n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] not in constants]
    sources = _float_sources(q.prepared, activations)
    measured = _measure_activations(q, sources, constants, samples) if samples is not None and sources else {}
    rows += [_row(n.output[0], "activation", constants, n.input[1], _input(n, 2), sources.get(n.output[0], ""),
                  *measured.get(n.output[0], (None, None))) for n in activations]
    return rows


def _float_sources(prepared: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> dict[str, str]:
    """``{quantized tensor: the float model's tensor it quantizes}`` for each QuantizeLinear node
    whose input the float model has (a graph output quantized is renamed ``<name>_QuantizeLinear_Input``)."""
    known = {v.name for v in prepared.graph.input} | {o for n in prepared.graph.node for o in n.output}
    sources = {}
    for node in nodes:
        name = node.input[0]
        name = name if name in known else name.removesuffix("_QuantizeLinear_Input")
        if name in known:
            sources[node.output[0]] = name
    return sources


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def _is_constant_dq(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    return node.op_type == "DequantizeLinear" and node.input[0] in constants and node.input[1] in constants


def _float_name(name: str, floats: dict[str, np.ndarray]) -> str:
    base = name.removesuffix("_quantized")
    return base if base != name and base in floats else ""


def _constant_row(node: onnx.NodeProto, constants: dict[str, np.ndarray], floats: dict[str, np.ndarray]) -> TensorRow:
    name, scale_name, zp_name = node.input[0], node.input[1], _input(node, 2)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    kind = "bias" if constants[name].dtype == np.int32 else "weight"
    return _weight_row(name, kind, constants, scale_name, zp_name, axis, floats)


def _integer_weight_row(node: onnx.NodeProto, constants: dict[str, np.ndarray],
                        floats: dict[str, np.ndarray]) -> TensorRow:
    """A ConvInteger/MatMulInteger weight: its scale is onnxruntime's ``<weight>_scale`` constant."""
    name = node.input[1]
    scale_name = name.removesuffix("_quantized") + "_scale"
    axis = 0 if node.op_type == "ConvInteger" else -1
    return _weight_row(name, "weight", constants, scale_name if scale_name in constants else "", _input(node, 3),
                       axis, floats)


def _weight_row(name: str, kind: str, constants: dict[str, np.ndarray], scale_name: str, zp_name: str, axis: int,
                floats: dict[str, np.ndarray]) -> TensorRow:
    float_name = _float_name(name, floats)
    error: tuple[float | None, float | None] = (None, None)
    if float_name and scale_name:
        values = _dequantize(constants[name], constants[scale_name], constants.get(zp_name), axis)
        if values.shape == floats[float_name].shape:
            stats = _Agreement()
            stats.add(values, floats[float_name])
            error = (stats.cosine, stats.max_error)
    return _row(name, kind, constants, scale_name, zp_name, float_name, *error)


def _dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int) -> np.ndarray:
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    offset = q.astype(np.float64) - (0 if zero_point is None else zero_point.astype(np.float64).reshape(shape))
    return offset * scale.astype(np.float64).reshape(shape)


def _row(name: str, kind: str, constants: dict[str, np.ndarray], scale_name: str, zp_name: str, float_name: str,
         cosine: float | None, max_error: float | None) -> TensorRow:
    scale = constants.get(scale_name, np.array([np.nan]))
    zero_point = constants.get(zp_name, np.zeros(1, np.int64))
    low, high = int(zero_point.min()), int(zero_point.max())
    dtype = str(constants[name].dtype) if name in constants else str(zero_point.dtype)
    return TensorRow(name, kind, dtype, float_name, int(scale.size), float(scale.min()), float(scale.max()),
                     str(low) if low == high else f"{low}..{high}", cosine, max_error)


def _measure_activations(q: QuantizedModel, sources: dict[str, str], constants: dict[str, np.ndarray],
                         samples: Samples) -> dict[str, tuple[float, float]]:
    """``{quantized tensor: (cosine, max abs error)}`` of each tensor of ``sources`` dequantized
    against the float tensor it quantizes as the float model computes it, over every sample."""
    from lite.tools.converter import convert

    params = {n.output[0]: n for n in q.model.graph.node if n.op_type == "QuantizeLinear"}
    session = _session(_outputs_added(q.prepared, list(sources.values())))
    model = _lite_model(convert(_outputs_added(q.model, list(sources))))
    names = [t.name for t in model.get_inputs()]
    outputs = [t.name for t in model.get_outputs()]
    stats = {name: _Agreement() for name in sources}
    for feed in iter_samples(samples):
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
        actual = dict(zip(outputs, (t.get_data_to_numpy() for t in model.predict([feed[n] for n in names])),
                          strict=True))
        for name, source in sources.items():
            node = params[name]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            value = _dequantize(actual[name], constants[node.input[1]], constants.get(_input(node, 2)), axis)
            stats[name].add(value, expected[source])
    return {name: (s.cosine, s.max_error) for name, s in stats.items()}


def _outputs_added(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the tensors ``names`` (types left to inference)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    copy.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in dict.fromkeys(names) if n not in present)
    return copy


REPORT_COLUMNS = ["tensor", "kind", "dtype", "float_tensor", "channels", "scale_min", "scale_max", "zero_point",
                  "cosine", "max_abs_error"]


def write_report_csv(rows: list[TensorRow], path: str | os.PathLike) -> None:
    """Writes ``rows`` as CSV with a header line (empty cells where not measured)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(REPORT_COLUMNS)
        for r in rows:
            writer.writerow([r.name, r.kind, r.dtype, r.float_name, r.channels, f"{r.scale_min:.6g}",
                             f"{r.scale_max:.6g}", r.zero_point, _cell(r.cosine), _cell(r.max_abs_error)])


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
