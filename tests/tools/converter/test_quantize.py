"""``lite-convert --quantize``: onnxruntime's quantizers, the calibration file's checks, the
accuracy summary and the per-tensor report, on the zoo's ResNet-18 at 64x64 (at 32x32 random
calibration leaves its static int8 cosine near 0.98; at 64x64 it is above 0.99)."""

from __future__ import annotations

import csv
import re

import numpy as np
import onnx
import pytest

import lite
from lite.tools import zoo
from lite.tools.converter import convert
from lite.tools.converter import quantize as q8
from lite.tools.converter.cli import main
from tests.support.npz import npz_with_header

pytest.importorskip("onnxruntime")

SIZE = 64
SHAPE = (1, 3, SIZE, SIZE)


def random_samples(seed: int, count: int = 16) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).standard_normal((count, *SHAPE), dtype=np.float32)}


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    return zoo.MODELS["resnet18"](image_size=SIZE)


@pytest.fixture(scope="module")
def calibration() -> dict[str, np.ndarray]:
    return random_samples(0)


@pytest.fixture(scope="module")
def other_inputs() -> dict[str, np.ndarray]:
    return random_samples(1)


@pytest.fixture(scope="module")
def static(resnet, calibration) -> q8.QuantizedModel:
    return q8.quantize_model(resnet, "static", calibration)


@pytest.fixture
def files(tmp_path, resnet, calibration):
    onnx.save(resnet, tmp_path / "model.onnx")
    np.savez(tmp_path / "inputs.npz", **calibration)
    return tmp_path


# ---- quantizing ------------------------------------------------------------------------------------


def test_static_resnet_builds_runs_and_agrees_with_float_on_other_inputs(resnet, static, other_inputs):
    ops = {n.op_type for n in static.model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "BatchNormalization" not in ops
    data = convert(static.model)
    assert len(data) < 0.3 * len(convert(resnet))  # int8 weights
    summary = q8.accuracy_summary(resnet, data, other_inputs)
    [out] = summary.outputs
    assert summary.samples == 16 and out.name == "output"
    assert out.cosine >= 0.99 and out.max_abs_error > 0 and out.top1_agreement >= 0.8


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("weight-only", marks=pytest.mark.slow)])
def test_dynamic_and_weight_only_build_run_and_agree(mode, resnet, other_inputs):
    quantized = q8.quantize_onnx(resnet, mode)  # no calibration: neither needs one
    data = convert(quantized)
    assert len(data) < 0.3 * len(convert(resnet))
    [out] = q8.accuracy_summary(resnet, data, other_inputs).outputs
    assert out.cosine >= 0.99


def test_weight_only_reads_every_weight_through_a_dequantize(resnet):
    model = q8.quantize_onnx(resnet, "weight-only")
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    makers = {n.output[0]: n for n in model.graph.node}
    weighted = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    assert len(weighted) == 21
    for node in weighted:
        dq = makers[node.input[1]]
        assert dq.op_type == "DequantizeLinear" and constants[dq.input[0]].dtype == np.int8
        assert constants[dq.input[1]].ndim == 1  # per channel
    assert not any(v.dtype == np.float32 and v.ndim == 4 for v in constants.values())  # no float conv weight left


def test_symmetric_int8_rounds_half_to_even_per_channel():
    w = np.array([[127.0, 0.5, 1.5, -2.5], [0.0, 0.0, 0.0, 0.0]], np.float32)
    q, scale = q8.symmetric_int8(w, axis=0)
    np.testing.assert_array_equal(scale, [1.0, 1.0])  # max|w| / 127, and 1 for an all-zero channel
    np.testing.assert_array_equal(q, [[127, 0, 2, -2], [0, 0, 0, 0]])
    q, scale = q8.symmetric_int8(np.array([[254.0, -1.0]], np.float32), axis=None)
    assert scale.shape == () and q.tolist() == [[127, 0]]  # -0.5 rounds to even 0


def test_static_without_samples_and_unknown_options_are_input_errors(resnet):
    with pytest.raises(lite.InputError, match="needs calibration samples"):
        q8.quantize_model(resnet, "static")
    with pytest.raises(lite.InputError, match="unknown quantization mode 'int4'"):
        q8.quantize_model(resnet, "int4")
    with pytest.raises(lite.InputError, match="calibration method 'kl'"):
        q8.quantize_model(resnet, "static", random_samples(0, 1), method="kl")


# ---- the calibration file --------------------------------------------------------------------------


def test_calibration_loads_and_a_dynamic_batch_takes_any_size(tmp_path, resnet):
    np.savez(tmp_path / "ok.npz", input=np.zeros((3, *SHAPE), np.float32))
    assert q8.load_calibration(tmp_path / "ok.npz", resnet)["input"].shape == (3, *SHAPE)
    np.savez(tmp_path / "batch4.npz", input=np.zeros((2, 4, 3, SIZE, SIZE), np.float32))
    dynamic = zoo.resnet18(image_size=SIZE, dynamic_batch=True)
    assert q8.load_calibration(tmp_path / "batch4.npz", dynamic)["input"].shape == (2, 4, 3, SIZE, SIZE)


@pytest.mark.parametrize(("arrays", "message"), [
    ({"image": np.zeros((2, *SHAPE), np.float32)}, r"missing \['input'\]; not inputs \['image'\]"),
    ({"input": np.zeros((2, *SHAPE), np.float32), "mask": np.zeros(2, np.float32)}, r"not inputs \['mask'\]"),
    ({"input": np.zeros(SHAPE, np.float32)}, r"shape \(1, 3, 64, 64\); expected \(N, 1, 3, 64, 64\)"),
    ({"input": np.zeros((2, 1, 3, 32, 32), np.float32)}, "expected \\(N, 1, 3, 64, 64\\)"),
    ({"input": np.zeros((0, *SHAPE), np.float32)}, "N >= 1 samples"),
    ({"input": np.zeros((2, *SHAPE), np.float64)}, "'input' is float64, the model takes float32"),
])
def test_a_calibration_file_that_does_not_fit_the_model_is_an_input_error(tmp_path, resnet, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(lite.InputError, match=message):
        q8.load_calibration(tmp_path / "bad.npz", resnet)


def test_a_pickled_object_array_is_refused_unread(tmp_path, resnet):
    np.savez(tmp_path / "objects.npz", input=np.array([{"x": 1}, None], dtype=object))
    with pytest.raises(lite.InputError, match="holds Python objects"):
        q8.load_calibration(tmp_path / "objects.npz", resnet)


def test_a_member_whose_header_claims_a_huge_shape_is_refused_before_reading(tmp_path, resnet):
    path = npz_with_header(tmp_path / "huge.npz", "input", (1 << 20, 1, 3, 1 << 12, 1 << 12))
    with pytest.raises(lite.MemoryLimitError, match="more than the memory limit"):
        q8.load_calibration(path, resnet)
    path = npz_with_header(tmp_path / "short.npz", "input", (2, *SHAPE), data=b"\0" * 64)
    with pytest.raises(lite.InputError, match="truncated"):
        q8.load_calibration(path, resnet)
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(lite.InputError, match="cannot read calibration file"):
        q8.load_calibration(tmp_path / "text.npz", resnet)


# ---- the per-tensor report -------------------------------------------------------------------------


def test_the_report_has_a_row_per_quantized_tensor(static, calibration, tmp_path):
    rows = q8.tensor_report(static, calibration)
    nodes = static.model.graph.node
    constants = {t.name for t in static.model.graph.initializer}
    quantized = {n.output[0] for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] not in constants}
    quantized |= {n.input[0] for n in nodes if n.op_type == "DequantizeLinear" and n.input[0] in constants}
    assert sorted(r.name for r in rows) == sorted(quantized)
    kinds = {kind: [r for r in rows if r.kind == kind] for kind in ("activation", "weight", "bias")}
    assert len(kinds["weight"]) == len(kinds["bias"]) == 21 and len(kinds["activation"]) >= 20
    assert all(r.channels > 1 and r.zero_point == "0" for r in kinds["weight"])
    assert all(r.float_name and r.cosine > 0.999 for r in kinds["weight"])
    first = next(r for r in kinds["activation"] if r.float_name == "input")
    assert first.cosine > 0.9999 and first.max_abs_error <= first.scale_max / 2 + 1e-6  # rounding alone
    assert all(r.cosine > 0.98 for r in kinds["activation"])
    q8.write_report_csv(rows, tmp_path / "report.csv")
    with open(tmp_path / "report.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and list(table[0]) == q8.REPORT_COLUMNS


def test_the_report_without_samples_measures_the_constants_only(static):
    rows = q8.tensor_report(static)
    assert all((r.cosine is None) == (r.kind == "activation") for r in rows)


# ---- lite-convert --quantize -----------------------------------------------------------------------


def test_lite_convert_quantize_static_prints_the_summary_and_writes_the_report(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    argv = ["model.onnx", "-o", "int8.lite", "--quantize", "static", "--calibration", "inputs.npz",
            "--quantize-report", "report.csv"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "quantized (static): int8 weights per channel, int8 activations calibrated (minmax) on 16 samples" in out
    assert "quantized .lite against the float ONNX model on 16 samples:" in out
    header, row = [line.split() for line in out.splitlines() if line.startswith("  output ")]
    assert header == ["output", "cosine", "max", "abs", "err", "top-1", "agree"] and float(row[1]) >= 0.99
    assert "wrote report.csv (" in out and "wrote int8.lite (" in out
    assert sorted(p.name for p in files.iterdir()) == ["inputs.npz", "int8.lite", "model.onnx", "report.csv"]
    model = lite.Model()
    model.build_from_file(files / "int8.lite")
    assert model.predict([np.zeros(SHAPE, np.float32)])[0].shape == (1, 1000)


def test_lite_convert_weight_only_without_calibration_says_it_did_not_compare(files, capsys):
    assert main([str(files / "model.onnx"), "-o", str(files / "w8.lite"), "--quantize", "weight-only"]) == 0
    out = capsys.readouterr().out
    assert "quantized (weight-only): int8 weights per channel, float activations" in out
    assert "no --calibration" in out and (files / "w8.lite").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--quantize", "static"], "static quantization needs calibration samples"),
    (["--quantize", "static", "--calibration", "missing.npz"], "cannot read calibration file"),
    (["--quantize", "dynamic", "--calibration", "wrong.npz"], r"missing \['input'\]"),
])
def test_lite_convert_quantize_errors_exit_1_and_write_nothing(files, capsys, argv, message):
    np.savez(files / "wrong.npz", image=np.zeros((1, *SHAPE), np.float32))
    argv = [str(files / "model.onnx"), "-o", str(files / "q.lite"),
            *[str(files / a) if a.endswith(".npz") else a for a in argv]]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite-convert: error: ") and re.search(message, err)
    assert not (files / "q.lite").exists()


def test_quantization_options_without_quantize_are_a_usage_error(files, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(files / "model.onnx"), "--calibration", str(files / "inputs.npz")])
    assert info.value.code == 2 and "go with --quantize" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_calibration_and_per_tensor_weights(method, resnet, calibration, other_inputs):
    quantized = q8.quantize_onnx(resnet, "static", calibration, method=method, per_channel=False)
    scales = [t for t in quantized.graph.initializer if t.name.endswith("weight_scale")]
    assert scales and all(not t.dims for t in scales)  # one scale per weight tensor
    [out] = q8.accuracy_summary(resnet, convert(quantized), other_inputs).outputs
    assert out.cosine >= 0.98
