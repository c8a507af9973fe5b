"""The one loader: external data beside the model from any working directory, and nowhere else."""

import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest

import lite
from lite.conversion import load_lite_bytes
from lite.loader import ModelType, external_tensors, load_onnx, model_type_of, read_model_file
from lite.tools.inspector import main as inspect_main
from lite.tools.sources import load_source
from tests.support.models import matmul_model
from tests.support.oracle import run_onnxruntime

RNG = np.random.default_rng(11)


@pytest.fixture
def external(tmp_path):
    """(model path, the model with its data) for a model whose weights live in m.onnx.data."""
    original = matmul_model()
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "m.onnx"
    saved = onnx.ModelProto()
    saved.CopyFrom(original)  # NOTE: saving with external data empties the tensors of the proto it is given
    onnx.save_model(saved, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    assert (folder / "m.onnx.data").exists()
    return path, original


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory with a decoy m.onnx.data that must never be read."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "m.onnx.data").write_bytes(b"\0" * 4096)
    monkeypatch.chdir(other)
    return other


def expected(original, x):
    return run_onnxruntime(original, {"x": x})[0]


def test_every_entry_point_resolves_external_data_beside_the_model(external, elsewhere):
    path, original = external
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    model = lite.Model()
    model.build_from_file(path.resolve())
    np.testing.assert_allclose(model.predict([x])[0].get_data_to_numpy(), expected(original, x), rtol=1e-5)
    runner = lite.ModelParallelRunner(path, workers=2)
    np.testing.assert_allclose(runner.predict([x])[0].get_data_to_numpy(), expected(original, x), rtol=1e-5)
    data, proto, _ = load_source(str(path))
    assert data == load_lite_bytes(path) and not list(external_tensors(proto))
    assert inspect_main([str(path)]) == 0


def test_split_model_resolves_external_data(external, elsewhere):
    path, original = external
    _, config = lite.split_model(tmp_static(path), 2, profile_runs=1)  # split_model needs static shapes
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    with lite.PipelineExecutor(config) as pipeline:
        pipeline.run({"x": x})
        (y,) = pipeline.get_output(block=True)
        np.testing.assert_allclose(y.get_data_to_numpy(), expected(original, x), rtol=1e-5)


def tmp_static(path):
    """The external-data model with a static batch of 2, saved beside the original (sharing its data file)."""
    model = onnx.load_model(path, load_external_data=False)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 2
    static = path.with_name("static.onnx")
    onnx.save_model(model, static)
    return static


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_the_folder_is_refused(external, location):
    path, _ = external
    (path.parent.parent / "secret.bin").write_bytes(b"\1" * 1024)
    model = onnx.load_model(path, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save_model(model, path)
    with pytest.raises(lite.ModelFormatError, match="model's folder"):
        lite.Model().build_from_file(path)


def test_a_symlink_out_of_the_folder_is_refused(external):
    path, _ = external
    data = path.with_name("m.onnx.data")
    target = path.parent.parent / "outside.data"
    data.rename(target)
    data.symlink_to(target)
    with pytest.raises(lite.ModelFormatError, match="leaves the model's folder"):
        load_onnx(path)


def test_external_data_past_the_end_of_its_file_is_refused(external):
    path, _ = external
    data = path.with_name("m.onnx.data")
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(lite.ModelFormatError, match="runs outside"):
        lite.Model().build_from_file(path)


def test_bytes_or_a_proto_with_external_references_are_refused_with_the_fix(external, elsewhere):
    path, _ = external
    unresolved = onnx.load_model(path, load_external_data=False)
    for source in (unresolved, unresolved.SerializeToString()):
        with pytest.raises(lite.ModelFormatError, match="pass the .onnx file's path"):
            load_lite_bytes(source)
    with pytest.raises(lite.ModelFormatError, match="pass the .onnx file's path"):
        lite.Model().build(unresolved.SerializeToString(), lite.ModelType.ONNX)


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "model.lite"
    os.mkfifo(fifo)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(_error_of(lambda: lite.Model().build_from_file(fifo))),
                              daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert outcome and isinstance(outcome[0], lite.ModelFileError) and "not a regular file" in str(outcome[0])


def test_a_fifo_swapped_in_after_the_check_is_refused_without_hanging(external, monkeypatch):
    from lite import loader

    path, _ = external
    fifo = path.parent / "swapped"
    os.mkfifo(fifo)
    checked = loader._confined

    def then_swapped(root, location, name):  # the data file was regular when checked, then became a FIFO
        _, size = checked(root, location, name)
        return fifo, size

    monkeypatch.setattr(loader, "_confined", then_swapped)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(_error_of(lambda: load_onnx(path))), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert outcome and isinstance(outcome[0], lite.ModelFileError) and "not a regular file" in str(outcome[0])


def _error_of(call):
    try:
        call()
    except Exception as exc:  # the test inspects it
        return exc
    return None


def test_devices_and_oversized_files_are_refused(tmp_path):
    with pytest.raises(lite.ModelFileError, match="not a regular file"):
        lite.Model().build_from_file("/dev/zero")
    big = tmp_path / "big.lite"
    big.write_bytes(b"\0" * 5000)
    with pytest.raises(lite.MemoryLimitError, match="larger than the memory limit"):
        read_model_file(big, size_limit=4096)
    with pytest.raises(lite.MemoryLimitError):
        lite.Model().build_from_file(big, context=lite.Context(memory_limit=4096))


ADDRESS_SPACE = 2 << 30  # less than the default memory limit, more than importing and running Delite needs
CAPPED = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))
import numpy as np
import lite

x = np.load(sys.argv[3])
model = lite.Model()
model.build_from_file(sys.argv[1], context=lite.Context(thread_num=1))
runner = lite.ModelParallelRunner(sys.argv[2], lite.Context(thread_num=1), workers=1)
for y in (model.predict([x]), runner.predict([x])):
    np.save(sys.argv[4], y[0].get_data_to_numpy())
"""


def test_a_small_model_loads_from_its_path_in_less_memory_than_the_limit(external, tmp_path):
    """The files are read into buffers of their own size: reading up to the memory limit asked the
    system for 4 GiB first, a MemoryError under a 2 GiB address space."""
    assert lite.Context().memory_limit > ADDRESS_SPACE
    path, original = external
    lite_path = tmp_path / "m.lite"
    lite_path.write_bytes(load_lite_bytes(path))
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = subprocess.run([sys.executable, "-c", CAPPED, str(path), str(lite_path), str(tmp_path / "x.npy"),
                             str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected(original, x), rtol=1e-5)


@pytest.mark.parametrize("change", ["grows", "shrinks", "loses its last bytes"])
@pytest.mark.parametrize("read", ["bytes", "aligned", "mapped"])
def test_a_file_that_changes_size_while_it_is_read_is_refused(tmp_path, monkeypatch, change, read):
    """Also a mapped one, whose pages are copied in by faulting them in (where Linux can) or read
    in: a file cut inside its last page still maps that page whole."""
    from lite import files, loader

    path = tmp_path / "m.lite"
    path.write_bytes(load_lite_bytes(matmul_model()))
    measured = files._size_within

    def then_changed(*args):
        size = measured(*args)
        if change == "grows":
            with path.open("ab") as f:
                f.write(b"more")
        else:
            os.truncate(path, size // 2 if change == "shrinks" else size - 3)
        return size

    monkeypatch.setattr(files, "_size_within", then_changed)
    read_file = {"bytes": read_model_file, "aligned": loader.read_lite_file, "mapped": files.map_lite_file}[read]
    with pytest.raises(lite.ModelFileError, match="changed size while it was read"):
        read_file(path)


def test_a_missing_file_is_both_a_file_problem_and_a_bad_argument(tmp_path):
    with pytest.raises(lite.ModelFileError) as info:
        load_lite_bytes(tmp_path / "missing.lite")
    assert isinstance(info.value, lite.InputError) and isinstance(info.value, lite.ModelFormatError)


def test_model_type_from_suffix_identifier_or_argument(tmp_path):
    lite_bytes = load_lite_bytes(matmul_model())
    assert model_type_of(lite_bytes) is ModelType.LITE
    assert model_type_of(matmul_model().SerializeToString()) is ModelType.ONNX
    assert model_type_of(tmp_path / "m.ONNX") is ModelType.ONNX and model_type_of("m.lite") is ModelType.LITE
    assert model_type_of(lite_bytes, ModelType.ONNX) is ModelType.ONNX
    with pytest.raises(lite.InputError, match="ModelType"):
        model_type_of(lite_bytes, "lite")


NOT_UTF8 = bytes([0xE7, 0x00, 0xFF, 0xFE, 0x80, 0x81, 0xC0, 0xAF, 0xED, 0xA0, 0x80])  # 11 bytes, as "m.onnx.data"


@pytest.mark.parametrize("text", [b"m.onnx.data", b"lite-tests!"], ids=["external data location", "graph name"])
def test_a_string_that_is_not_utf8_is_a_format_error(external, text):
    # protobuf hands such a string out as bytes: it raised TypeError (location) or UnicodeDecodeError (name)
    path, _ = external
    model = onnx.load_model(path, load_external_data=False)
    model.graph.name = "lite-tests!"
    path.write_bytes(model.SerializeToString().replace(text, NOT_UTF8))
    with pytest.raises(lite.ModelFormatError, match="is not UTF-8 text"):
        lite.Model().build_from_file(path)
    with pytest.raises(lite.ModelFormatError, match="is not UTF-8 text"):
        load_onnx(path.read_bytes())


def test_a_zoo_name_given_to_the_runtime_says_where_zoo_names_work():
    with pytest.raises(lite.ModelFileError, match=r"lite.tools.zoo.MODELS\[NAME\]"):
        lite.Model().build_from_file("zoo:resnet18")
