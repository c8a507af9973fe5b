"""ModelParallelRunner: concurrent predicts are all correct; weights are shared."""

import threading

import numpy as np
import pytest

import lite
from lite.tools.converter import convert
from tests.support.models import small_cnn
from tests.support.oracle import run_onnxruntime


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("runner") / "cnn.lite"
    convert(small_cnn(), path)
    return path


def test_eight_threads_by_200_calls_all_correct(cnn_path):
    runner = lite.ModelParallelRunner(cnn_path, lite.Context(thread_num=1), workers=4)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((int(rng.integers(1, 4)), 3, 8, 8)).astype(np.float32) for _ in range(16)]
    expected = [run_onnxruntime(small_cnn(), {"x": x})[0] for x in inputs]
    failures, done = [], []

    def client(seed: int) -> None:
        picks = np.random.default_rng(seed).integers(0, len(inputs), 200)
        for i in picks:
            (out,) = runner.predict([inputs[i]])
            y = out.get_data_to_numpy()
            if y.shape != expected[i].shape or not np.allclose(y, expected[i], rtol=1e-4, atol=1e-5):
                failures.append((seed, int(i)))
            done.append(1)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 1600 and failures == []


def test_copies_share_constant_weights(cnn_path):
    runner = lite.ModelParallelRunner(cnn_path, workers=3)
    weights = [[t for k in m._engine.kernels for t in k.inputs if t is not None and t.is_const] for m in runner._models]
    assert weights[0]
    for a, b in zip(weights[0], weights[2], strict=True):
        assert a is not b and np.shares_memory(a.data, b.data)


def test_bad_input_leaves_the_runner_usable(cnn_path):
    runner = lite.ModelParallelRunner(cnn_path, workers=1)
    with pytest.raises(lite.InputError):
        runner.predict([np.zeros((1, 4, 8, 8), np.float32)])
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = runner.predict([x])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_onnxruntime(small_cnn(), {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_inputs_by_name_and_output_names_as_model_predict(cnn_path):
    runner = lite.ModelParallelRunner(cnn_path, workers=2)
    x = np.random.default_rng(2).standard_normal((3, 3, 8, 8)).astype(np.float32)
    (y,) = runner.predict({"x": x}, output_names=["y"])
    np.testing.assert_allclose(y.get_data_to_numpy(), run_onnxruntime(small_cnn(), {"x": x})[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(lite.InputError, match="unknown"):
        runner.predict({"input": x})


def test_bad_arguments(cnn_path, tmp_path):
    with pytest.raises(lite.InputError, match="workers"):
        lite.ModelParallelRunner(cnn_path, workers=0)
    with pytest.raises(lite.InputError, match="cannot read"):
        lite.ModelParallelRunner(tmp_path / "missing.lite")
