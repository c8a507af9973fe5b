"""Model: build, predict, resize, input errors, threads and memory."""


import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper
from threadpoolctl import threadpool_info

import lite
from lite.tools.converter import convert
from tests.support.models import small_cnn
from tests.support.oracle import relative_l2, run_onnxruntime

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "cnn.lite"
    convert(small_cnn(), path)
    return path


def built(path, **context):
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(**context))
    return model


def check(model, onnx_model, batch):
    x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
    (y,) = model.predict([x])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-5


def test_lite_and_onnx_files_build_and_match(cnn_file, tmp_path):
    onnx_path = tmp_path / "cnn.onnx"
    onnx_path.write_bytes(small_cnn().SerializeToString())
    for path in (cnn_file, onnx_path):
        model = built(path)
        assert [t.name for t in model.get_inputs()] == ["x"]
        assert model.get_inputs()[0].shape == (-1, 3, 8, 8)
        check(model, small_cnn(), batch=1)


def test_build_from_bytes_both_types(cnn_file):
    for data, kind in ((cnn_file.read_bytes(), lite.ModelType.LITE),
                       (small_cnn().SerializeToString(), lite.ModelType.ONNX)):
        model = lite.Model()
        model.build(data, kind, lite.Context())
        check(model, small_cnn(), batch=2)


def test_dynamic_batch_resolves_implicitly_and_resize_matches(cnn_file):
    model = built(cnn_file)
    check(model, small_cnn(), batch=1)
    check(model, small_cnn(), batch=3)
    model.resize(model.get_inputs(), [[4, 3, 8, 8]])
    assert model.get_inputs()[0].shape == (4, 3, 8, 8)
    check(model, small_cnn(), batch=4)


def test_static_model_resized_to_batch_4_matches(tmp_path):
    onnx_model = small_cnn(batch=1)
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context())
    check(model, onnx_model, batch=1)
    model.resize(model.get_inputs(), [[4, 3, 8, 8]])
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)
    (y,) = model.predict([x])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(small_cnn(), {"x": x})[0]) < 1e-5


@pytest.mark.parametrize("bad, message", [
    ([], "has 1 inputs"),
    ([np.zeros((1, 3, 8, 8), np.float32)] * 2, "has 1 inputs"),
    ([np.zeros((1, 3, 8, 8), np.float64)], "dtype float32"),
    ([np.zeros((1, 4, 8, 8), np.float32)], "does not fit"),
    ([np.zeros((3, 8, 8), np.float32)], "does not fit"),
    (["not an array"], "numpy array"),
    ({"y": np.zeros((1, 3, 8, 8), np.float32)}, r"missing \['x'\], unknown \['y'\]"),
    ({}, r"missing \['x'\]"),
])
def test_bad_inputs_raise_input_error_and_model_stays_usable(cnn_file, bad, message):
    model = built(cnn_file)
    check(model, small_cnn(), batch=2)
    with pytest.raises(lite.InputError, match=message):
        model.predict(bad)
    check(model, small_cnn(), batch=2)


def test_inputs_by_name_and_chosen_outputs_as_onnxruntime_takes_them(tmp_path):
    onnx_model = small_cnn()
    onnx_model.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    path = tmp_path / "two_outputs.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    model = built(path)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    y, p = run_onnxruntime(onnx_model, {"x": x})
    got = model.predict({"x": x}, output_names=["p", "y"])
    assert [t.name for t in got] == ["p", "y"]
    assert relative_l2(got[0].get_data_to_numpy(), p) < 1e-5 and relative_l2(got[1].get_data_to_numpy(), y) < 1e-5
    with pytest.raises(lite.InputError, match=r"output_names \['z'\] are not outputs of the model"):
        model.predict({"x": x}, output_names=["z"])
    assert [t.name for t in model.predict({"x": x})] == ["y", "p"]


@pytest.mark.parametrize("dims, message", [([[0, 3, 8, 8]], "positive"), ([[-2, 3, 8, 8]], "positive"),
                                           ([[1, 3, 8]], "rank"), ([[1, 3, 8, 8], [1]], "2 shapes")])
def test_bad_resize_raises_and_keeps_previous_shapes(cnn_file, dims, message):
    model = built(cnn_file)
    check(model, small_cnn(), batch=2)
    with pytest.raises(lite.InputError, match=message):
        model.resize(model.get_inputs(), dims)
    check(model, small_cnn(), batch=2)


@pytest.mark.parametrize("profiled", [False, True])
def test_a_failing_kernel_is_a_kernel_error_naming_it_and_the_model_stays_usable(cnn_file, monkeypatch, profiled):
    """With nothing to check per kernel, predict runs the kernels in a plain loop: a failure there names the
    kernel as the checked loop (a profiled predict) does."""
    model = built(cnn_file)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (expected,) = model.predict([x])
    expected = expected.get_data_to_numpy()
    victim = model._engine.kernels[len(model._engine.kernels) // 2]

    def fail():
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(victim, "execute", fail)
    with pytest.raises(lite.KernelError, match=rf"kernel {victim.name!r} \({victim.type}\) failed: ZeroDivisionError"):
        model.predict([x], profile={} if profiled else None)
    monkeypatch.undo()
    np.testing.assert_array_equal(model.predict([x])[0].get_data_to_numpy(), expected)


def test_resize_to_shape_the_model_cannot_run_is_input_error(cnn_file):
    model = built(cnn_file)
    check(model, small_cnn(), batch=2)
    with pytest.raises(lite.InputError, match="cannot run.*conv"):
        model.resize(model.get_inputs(), [[1, 4, 8, 8]])  # the conv weights want 3 channels
    assert model.get_inputs()[0].shape == (2, 3, 8, 8)
    check(model, small_cnn(), batch=2)


def test_predict_before_build_and_double_build(cnn_file):
    model = lite.Model()
    with pytest.raises(lite.InputError, match="not built"):
        model.predict([np.zeros((1, 3, 8, 8), np.float32)])
    model.build_from_file(cnn_file)
    with pytest.raises(lite.InputError, match="already built"):
        model.build_from_file(cnn_file)


def test_missing_file_is_input_error(tmp_path):
    with pytest.raises(lite.InputError, match="cannot read"):
        lite.Model().build_from_file(tmp_path / "nope.lite")


def test_thread_num_bounds_blas_threads(cnn_file):
    model = built(cnn_file, thread_num=1)
    check(model, small_cnn(), batch=1)
    blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
    assert blas and all(info["num_threads"] == 1 for info in blas)


def test_constants_are_not_copied_and_activations_share_an_arena(cnn_file):
    model = built(cnn_file)
    check(model, small_cnn(), batch=2)
    weights = [t for k in model._engine.kernels for t in k.inputs if t is not None and t.is_const]
    assert weights and all(not t.data.flags.owndata for t in weights)
    activations = [t for k in model._engine.kernels for t in k.outputs if t not in model.get_outputs()]
    total = sum(t.data.nbytes for t in activations)
    assert model._engine.memory.nbytes < total


def test_concurrent_predicts_on_one_model_never_mix_results(cnn_file):
    model = built(cnn_file, thread_num=1)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(6)]
    expected = [run_onnxruntime(small_cnn(), {"x": x})[0] for x in inputs]
    wrong = []

    def client(k: int) -> None:
        for _ in range(50):
            (y,) = model.predict([inputs[k]])
            time.sleep(0.0005)  # let another thread predict before this one reads its result
            if not np.allclose(y.get_data_to_numpy(), expected[k], rtol=1e-4, atol=1e-5):
                wrong.append(k)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_non_contiguous_and_read_only_inputs_work(cnn_file):
    model = built(cnn_file)
    x = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32).transpose(0, 3, 1, 2)  # a strided view
    assert not x.flags.c_contiguous
    (y,) = model.predict([x])
    np.testing.assert_allclose(y.get_data_to_numpy(), run_onnxruntime(small_cnn(), {"x": np.ascontiguousarray(x)})[0],
                               rtol=1e-4, atol=1e-5)
    frozen = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    frozen.flags.writeable = False
    check(model, small_cnn(), batch=2)
    model.predict([frozen])


def test_nan_and_inf_inputs_are_computed_not_refused(cnn_file):
    model = built(cnn_file)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    x[0, 0, 0, 0], x[0, 1, 2, 3] = np.nan, np.inf
    (y,) = model.predict([x])
    want = run_onnxruntime(small_cnn(), {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(y.get_data_to_numpy()), np.isnan(want))
    check(model, small_cnn(), batch=1)


def test_memory_limit_refuses_big_models_and_big_resizes(cnn_file):
    with pytest.raises(lite.ModelFormatError, match="memory limit"):
        lite.Model().build(small_cnn_static_bytes(), lite.ModelType.LITE, lite.Context(memory_limit=1000))
    model = built(cnn_file, memory_limit=200_000)
    check(model, small_cnn(), batch=1)
    with pytest.raises(lite.InputError, match="memory limit"):
        model.resize(model.get_inputs(), [[400, 3, 8, 8]])
    check(model, small_cnn(), batch=1)


def small_cnn_static_bytes() -> bytes:
    return convert(small_cnn(batch=1))
