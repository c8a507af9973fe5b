"""Batch inference on Ray Data: every row scored on a local actor pool matches one process's Model.predict."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import lite
import lite.integrations
from lite.integrations.ray import LitePredictor, context_from_spec, predict_dataset
from lite.tools import zoo
from lite.tools.converter import convert

ROWS = 2000
VOCAB = 1000


@pytest.fixture(scope="module")
def ray_data():
    """Ray Data on a local 2-CPU Ray, started once for the module (the tests that use it skip without Ray)."""
    ray_data = pytest.importorskip("ray.data")
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray_data.DataContext.get_current().enable_progress_bars = False
    yield ray_data
    ray.shutdown()


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ray") / "mobilenet_v2.lite"
    convert(zoo.mobilenet_v2(dynamic_batch=True, image_size=32), path)
    return path


@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ray") / "bert.lite"
    convert(zoo.bert_encoder(dynamic_batch=True, layers=2, width=64, heads=4, feed_forward=128,
                             vocab_size=VOCAB), path)
    return path


def single_process(path, column: np.ndarray, context: dict) -> np.ndarray:
    """The oracle: one plain Model built with the same context, all rows in one predict."""
    model = lite.Model()
    model.build_from_file(path, context=context_from_spec(context))
    return model.predict([column])[0].get_data_to_numpy()


def scored_in_order(scored) -> dict[str, np.ndarray]:
    """Every row of a scored Dataset (which ``keep_columns=["id"]`` numbered), in id order."""
    batch = scored.take_batch(ROWS + 1, batch_format="numpy")
    order = np.argsort(batch["id"])
    assert np.array_equal(batch["id"][order], np.arange(ROWS))
    return {name: column[order] for name, column in batch.items()}


def test_every_image_matches_a_single_process_predict(ray_data, cnn_file):
    pytest.importorskip("onnxruntime")
    images = np.random.default_rng(0).standard_normal((ROWS, 3, 32, 32), dtype=np.float32)
    ds = ray_data.from_items([{"id": i, "input": image} for i, image in enumerate(images)])
    context = {"thread_num": 1, "delegates": [{"name": "ort", "options": {}}]}  # NOTE: ORT takes the whole CNN
    scored = predict_dataset(ds, cnn_file, context, concurrency=2, batch_size=250, keep_columns=["id"])
    out = scored_in_order(scored)
    assert out["output"].shape == (ROWS, 1000)
    np.testing.assert_allclose(out["output"], single_process(cnn_file, images, context), rtol=1e-4, atol=1e-5)


def test_every_token_row_of_a_parquet_table_matches_a_single_process_predict(ray_data, encoder_file, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.random.default_rng(1).integers(0, VOCAB, (ROWS, 16))
    pq.write_table(pa.table({"id": np.arange(ROWS), "input_ids": list(ids)}), tmp_path / "tokens.parquet")
    ds = ray_data.read_parquet(tmp_path / "tokens.parquet")  # NOTE: a list column: a batch holds row arrays
    # NOTE: a pool of 1 to 2 actors: a fixed pool of 2 would hold both CPUs, and the read tasks wait forever
    scored = predict_dataset(ds, encoder_file, {"thread_num": 1}, concurrency=(1, 2), batch_size=300,
                             keep_columns=["id"])
    out = scored_in_order(scored)
    assert out["output"].shape == (ROWS, 16, 64)
    np.testing.assert_allclose(out["output"], single_process(encoder_file, ids, {"thread_num": 1}), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.filterwarnings("ignore:`ray_remote_args` is deprecated")  # NOTE: max_restarts goes that way
def test_a_bad_column_fails_the_dataset_naming_the_column_and_batch(ray_data, cnn_file):
    images = np.random.default_rng(2).standard_normal((40, 3, 32, 32))  # float64: the model takes float32
    ds = ray_data.from_numpy(images).rename_columns({"data": "input"})
    scored = predict_dataset(ds, cnn_file, concurrency=1, batch_size=20, max_restarts=0, max_task_retries=0)
    with pytest.raises(Exception, match=r"InputError: batch \d+ of this actor \(20 rows.*column 'input' is float64"):
        scored.materialize()


def test_ray_options_reach_map_batches_unchanged(ray_data, cnn_file):
    class RecordingDataset:
        def map_batches(self, fn, **kwargs):
            self.fn, self.kwargs = fn, kwargs
            return "mapped"

    ds = RecordingDataset()
    options = {"num_cpus": 2, "max_restarts": 3, "max_task_retries": 5, "runtime_env": {"env_vars": {"A": "1"}}}
    assert predict_dataset(ds, cnn_file, {"fallback": False}, concurrency=(1, 4), batch_size=8, **options) == "mapped"
    assert ds.fn is LitePredictor and {k: ds.kwargs[k] for k in options} == options
    assert (ds.kwargs["batch_size"], ds.kwargs["batch_format"]) == (8, "numpy")
    assert (ds.kwargs["compute"].min_size, ds.kwargs["compute"].max_size) == (1, 4)
    assert ds.kwargs["fn_constructor_kwargs"] == {
        "model_path": str(cnn_file), "context": {"thread_num": 2, "fallback": False}, "keep_columns": []}


def test_a_fixed_batch_model_runs_in_chunks_padding_the_last(tmp_path):
    path = tmp_path / "b4.lite"
    convert(zoo.mobilenet_v2(batch_size=4, image_size=32), path)
    images = np.random.default_rng(3).standard_normal((10, 3, 32, 32), dtype=np.float32)
    out = LitePredictor(path, {"thread_num": 1})({"input": images})
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=1))
    expected = [model.predict([images[i:i + 4]])[0].get_data_to_numpy() for i in (0, 4)]
    np.testing.assert_allclose(out["output"][:8], np.concatenate(expected), rtol=1e-4, atol=1e-5)
    assert out["output"].shape == (10, 1000)


@pytest.mark.parametrize(("batch", "message"), [
    ({"image": np.zeros((2, 3, 32, 32), np.float32)}, r"no column 'input' .* the batch has \['image'\]"),
    ({"input": np.zeros((2, 3, 32, 30), np.float32)},
     r"column 'input' has rows of shape \(3, 32, 30\), the model input takes \(3, 32, 32\)"),
    ({"input": np.zeros((2, 3, 32, 32), np.int32)}, r"column 'input' is int32, the model input takes float32"),
    ({"input": np.array([np.zeros((3, 32, 32)), np.zeros((3, 16, 16)), None], object)[:2]},
     r"column 'input' holds rows of different shapes: row 0 \(3, 32, 32\), row 1 \(3, 16, 16\)"),
])
def test_a_bad_column_names_itself_and_the_batch(cnn_file, batch, message):
    predictor = LitePredictor(cnn_file, {"thread_num": 1})
    predictor({"input": np.zeros((1, 3, 32, 32), np.float32)})
    with pytest.raises(lite.InputError, match=r"batch 1 of this actor \(2 rows, process \d+\): " + message):
        predictor(batch)


def test_a_column_of_row_arrays_is_stacked(cnn_file):
    images = np.random.default_rng(4).standard_normal((3, 3, 32, 32), dtype=np.float32)
    rows = np.empty(3, object)
    rows[:] = list(images)
    predictor = LitePredictor(cnn_file, {"thread_num": 1})
    np.testing.assert_array_equal(predictor({"input": rows})["output"], predictor({"input": images})["output"])


def test_keep_columns_and_empty_batches(cnn_file):
    predictor = LitePredictor(cnn_file, {"thread_num": 1}, keep_columns=["path"])
    out = predictor({"input": np.zeros((0, 3, 32, 32), np.float32), "path": np.array([], str)})
    assert sorted(out) == ["output", "path"] and out["output"].shape == (0, 1000)
    with pytest.raises(lite.InputError, match=r"keep_columns \['output'\] are also model outputs"):
        LitePredictor(cnn_file, keep_columns=["output"])


def test_context_descriptions_name_delegates_as_the_tools_do():
    ctx = context_from_spec({"thread_num": 1, "delegates": ["native", {"name": "example_npu", "options": {}}]})
    assert ctx.thread_num == 1 and [type(d).__name__ for d in ctx.delegates] == ["ExampleNPUDelegate"]
    with pytest.raises(lite.InputError, match="unknown delegate 'npu0'"):
        context_from_spec({"delegates": ["npu0"]})
    with pytest.raises(lite.InputError, match="keyword arguments .*threads"):
        context_from_spec({"threads": 2})
    with pytest.raises(lite.InputError, match="as a name"):
        context_from_spec({"delegates": [{"nmae": "ort"}]})


def test_without_ray_the_module_imports_and_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    monkeypatch.delitem(sys.modules, "lite.integrations.ray")
    monkeypatch.delattr(lite.integrations, "ray")  # NOTE: both come back after the test, for the other tests
    module = importlib.import_module("lite.integrations.ray")
    with pytest.raises(lite.MissingPackageError, match=r'pip install "delite\[ray\]"'):
        module.predict_dataset(object(), "m.lite")


@pytest.mark.parametrize(("text", "value"), [("false", False), ("no", False), ("OFF", False), ("0", False),
                                             (0, False), ("true", True), ("Yes", True), ("on", True), (1, True)])
def test_context_descriptions_read_booleans_strictly(text, value):
    ctx = context_from_spec({"fallback": text, "delegates": [{"name": "tvm", "options": {"trust_saved_code": text}}]})
    assert ctx.fallback is value and ctx.delegate.trust_saved_code is value


@pytest.mark.parametrize(("spec", "message"), [
    ({"fallback": "nope"}, "the context description's option 'fallback' is a boolean"),
    ({"delegates": [{"name": "tvm", "options": {"trust_saved_code": "disabled"}}]},
     "delegate 'tvm' option 'trust_saved_code' is a boolean"),
    ({"delegates": [{"name": "tvm", "options": {"symbolic_batch": 2}}]}, "option 'symbolic_batch' is a boolean"),
    ({"delegates": "ort"}, "'delegates' is a list"),
    ({"delegates": [{"name": "ort", "options": ["x"]}]}, "as a name"),
    ({"delegates": [{"name": 3}]}, "as a name"),
    (["thread_num"], "a mapping of lite.Context's keyword arguments, got list"),
])
def test_a_bad_context_description_is_an_input_error(spec, message):
    with pytest.raises(lite.InputError, match=message):
        context_from_spec(spec)


@pytest.fixture(scope="module")
def predictor(cnn_file):
    return LitePredictor(cnn_file, {"thread_num": 1}, keep_columns=["id"])


def images(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 3, 32, 32), dtype=np.float32)


def rows_of(*arrays) -> np.ndarray:
    column = np.empty(len(arrays), object)
    column[:] = list(arrays)
    return column


BAD_BATCHES = {  # name: (batch, message)
    "no id column": ({"input": images(2)}, r"no column 'id' to keep \(keep_columns\); the batch has \['input'\]"),
    "strings": ({"input": np.array(["a", "b"]), "id": np.arange(2)}, r"column 'input' is <U1, the model input takes"),
    "objects": ({"input": np.array([{}, {}], object), "id": np.arange(2)}, r"column 'input' is object, the model"),
    "Nones": ({"input": np.array([None, None]), "id": np.arange(2)}, r"column 'input' is object"),
    "float64 rows": ({"input": rows_of(*images(2).astype(np.float64)), "id": np.arange(2)},
                     r"column 'input' is float64"),
    "int64": ({"input": images(2).astype(np.int64), "id": np.arange(2)}, r"column 'input' is int64"),
    "bool": ({"input": images(2) > 0, "id": np.arange(2)}, r"column 'input' is bool"),
    "float16": ({"input": images(2).astype(np.float16), "id": np.arange(2)}, r"column 'input' is float16"),
    "ragged list": ({"input": [images(1)[0], images(1)[0, :, :16]], "id": np.arange(2)},
                    r"column 'input' holds rows numpy cannot stack"),
    "ragged nested rows": ({"input": rows_of([[1.0, 2.0], [3.0]], [[1.0], [2.0]]), "id": np.arange(2)},
                           r"column 'input' holds rows numpy cannot stack"),
    "rows of another rank": ({"input": images(2)[:, 0], "id": np.arange(2)},
                             r"column 'input' has rows of shape \(32, 32\), the model input takes \(3, 32, 32\)"),
    "scalar": ({"input": np.float32(1), "id": np.arange(2)}, r"column 'input' is a float32, not a column of rows"),
    "None": ({"input": None, "id": np.arange(2)}, r"column 'input' is a NoneType, not a column"),
    "short id": ({"input": images(3), "id": np.arange(2)}, r"column 'id' has 2 rows, column 'input' has 3"),
    "long id": ({"id": np.arange(4), "input": images(3)}, r"column 'id' has 4 rows, column 'input' has 3"),
    "scalar id": ({"input": images(2), "id": 7}, r"column 'id' is a int, not a column"),
}


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_every_bad_batch_is_an_input_error_naming_the_column(predictor, name):
    batch, message = BAD_BATCHES[name]
    with pytest.raises(lite.InputError, match=r"batch \d+ of this actor \(\d+ rows, process \d+\): " + message):
        predictor(batch)
    out = predictor({"input": images(2), "id": np.arange(2)})  # NOTE: the actor keeps working
    assert out["output"].shape == (2, 1000)


@pytest.mark.parametrize("batch", [[images(2)], images(2), "input"], ids=["list", "array", "str"])
def test_a_batch_that_is_not_a_mapping_of_columns_is_an_input_error(predictor, batch):
    with pytest.raises(lite.InputError, match=r"batch \d+ of this actor is a \w+; LitePredictor takes a dict"):
        predictor(batch)


def test_every_row_given_comes_back_whatever_the_column_order(cnn_file):
    predictor = LitePredictor(cnn_file, {"thread_num": 1})
    out = predictor({"label": np.arange(2), "input": images(3)})  # NOTE: a column the model does not read
    assert out["output"].shape == (3, 1000)


def test_a_pandas_batch_gives_what_its_dict_gives(predictor):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"id": np.arange(3), "input": list(images(3))})
    from_frame, from_dict = predictor(frame), predictor({"id": np.arange(3), "input": images(3)})
    np.testing.assert_array_equal(from_frame["output"], from_dict["output"])
    np.testing.assert_array_equal(from_frame["id"], np.arange(3))
    empty = predictor(pandas.DataFrame({"id": np.arange(0), "input": np.empty(0, object)}))
    assert empty["output"].shape == (0, 1000)
