"""The conversion cache: a second build of the same .onnx file maps the .lite converted the first
time; any changed byte (the model's or its external data's) converts again; entries are checked
like any .lite file, and trouble with the cache never fails a build."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import lite
from lite import conversion
from lite.files import DIGEST_CHUNK, bytes_digest, file_digest, map_lite_file
from tests.support.models import matmul_model
from tests.support.oracle import run_onnxruntime

X = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)


def built(path, cache, x=X) -> tuple[lite.Model, np.ndarray]:
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=1, conversion_cache=cache))
    return model, model.predict([x])[0].get_data_to_numpy()


def entries(cache) -> list[str]:
    conversion._finish_writes()  # NOTE: entries are written in the background
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


@pytest.fixture
def converts(monkeypatch):
    """Counts the converter's runs."""
    from lite.tools import converter

    calls = []
    real = converter.convert_to_buffer

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(converter, "convert_to_buffer", counted)
    return calls


def saved(model: onnx.ModelProto, path, external: bool = False):
    if external:
        onnx.save_model(model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save_model(model, path)
    return path


def test_a_second_build_maps_the_converted_file(tmp_path, converts):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(original, tmp_path / "m.onnx")
    _, first = built(path, cache)
    assert len(converts) == 1 and len(entries(cache)) == 1 and entries(cache)[0].endswith(".lite")
    model, second = built(path, cache)
    assert len(converts) == 1  # NOTE: not converted again
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second, run_onnxruntime(original, {"x": X})[0], rtol=1e-4, atol=1e-5)
    assert model._engine.pages is not None  # NOTE: mapped as a .lite file is, its repacked weights released


def test_a_changed_byte_converts_again(tmp_path, converts):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(original, tmp_path / "m.onnx")
    built(path, cache)
    changed = onnx.ModelProto()
    changed.CopyFrom(original)
    weight = numpy_helper.to_array(changed.graph.initializer[0]).copy()
    weight[0, 0] += 1.0
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "w"))
    saved(changed, path)
    _, got = built(path, cache)
    assert len(converts) == 2 and len(entries(cache)) == 2
    np.testing.assert_allclose(got, run_onnxruntime(changed, {"x": X})[0], rtol=1e-4, atol=1e-5)


def test_external_data_is_part_of_the_key(tmp_path, converts):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(matmul_model_copy(original), tmp_path / "m.onnx", external=True)
    _, first = built(path, cache)
    entries(cache)
    built(path, cache)
    assert len(converts) == 1
    [name] = entries(cache)
    assert len(name.removesuffix(".lite").split("-")) == 2  # NOTE: the file's key, then its external data's
    data = bytearray((tmp_path / "m.onnx.data").read_bytes())
    data[:4] = np.float32(7.0).tobytes()  # NOTE: the model file itself is unchanged
    (tmp_path / "m.onnx.data").write_bytes(bytes(data))
    _, second = built(path, cache)
    assert len(converts) == 2 and len(entries(cache)) == 2
    assert not np.array_equal(first, second)
    reloaded = onnx.load(path)
    np.testing.assert_allclose(second, run_onnxruntime(reloaded, {"x": X})[0], rtol=1e-4, atol=1e-5)


def matmul_model_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # NOTE: saving with external data empties the tensors of the proto it is given
    return copy


def test_an_entry_that_is_not_a_model_is_replaced(tmp_path, converts):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(original, tmp_path / "m.onnx")
    built(path, cache)
    [name] = entries(cache)
    (cache / name).write_bytes(b"\0" * 100)
    _, got = built(path, cache)
    assert len(converts) == 2
    np.testing.assert_allclose(got, run_onnxruntime(original, {"x": X})[0], rtol=1e-4, atol=1e-5)
    built(path, cache)
    assert len(converts) == 2 and (cache / name).stat().st_size > 100  # NOTE: stored again


@pytest.mark.parametrize("kind", ["too large", "fifo"])
def test_an_entry_that_cannot_be_read_is_converted_again(tmp_path, converts, kind):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(original, tmp_path / "m.onnx")
    context = lite.Context(thread_num=1, conversion_cache=cache, memory_limit=4096)  # NOTE: the key holds the limit
    assert len(lite.tools.converter.convert_to_buffer(original)) < context.memory_limit
    for _ in range(2):
        model = lite.Model()
        model.build_from_file(path, context=context)
        [name] = entries(cache)
        entry = cache / name
        if kind == "too large":
            entry.write_bytes(b"\0" * 8192)
        elif entry.is_file():
            entry.unlink()
            os.mkfifo(entry)
    got = model.predict([X])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_onnxruntime(original, {"x": X})[0], rtol=1e-4, atol=1e-5)
    assert len(converts) == 3  # NOTE: the size check above, the first build, the build after the entry broke


def test_a_link_planted_as_an_entry_is_not_followed(tmp_path, converts):
    cache, original = tmp_path / "cache", matmul_model()
    path = saved(original, tmp_path / "m.onnx")
    built(path, cache)
    [name] = entries(cache)
    other = tmp_path / "other.onnx"
    saved(matmul_model(), other)  # NOTE: other weights (the generator moved on)
    _, other_output = built(other, tmp_path / "cache2")
    [other_name] = entries(tmp_path / "cache2")
    os.replace(tmp_path / "cache2" / other_name, tmp_path / "planted.lite")
    (cache / name).unlink()
    (cache / name).symlink_to(tmp_path / "planted.lite")
    _, got = built(path, cache)
    assert not np.array_equal(got, other_output)
    np.testing.assert_allclose(got, run_onnxruntime(original, {"x": X})[0], rtol=1e-4, atol=1e-5)
    entries(cache)
    assert not (cache / name).is_symlink()  # NOTE: the link replaced, its target untouched
    assert (tmp_path / "planted.lite").stat().st_size > 100
    (tmp_path / "link.lite").symlink_to(tmp_path / "planted.lite")
    assert map_lite_file(tmp_path / "link.lite") is not None
    with pytest.raises(lite.ModelFileError):
        map_lite_file(tmp_path / "link.lite", follow_links=False)


def test_the_oldest_entries_go(tmp_path, converts, monkeypatch):
    monkeypatch.setattr(conversion, "CACHED_MODELS", 2)
    cache = tmp_path / "cache"
    stale = tmp_path / "cache" / ".dead.tmp"
    cache.mkdir()
    stale.write_bytes(b"x")
    os.utime(stale, (0, 0))  # NOTE: a writer that died long ago
    names = []
    for index in range(3):
        path = saved(matmul_model(), tmp_path / f"m{index}.onnx")
        built(path, cache)
        names.append(set(entries(cache)))
    assert len(names[-1]) == 2 and not (names[0] & names[-1])  # NOTE: the first went
    assert not stale.exists()


def test_the_entries_stay_within_their_bytes_and_the_disk(tmp_path, converts, monkeypatch):
    import shutil

    cache, paths = tmp_path / "cache", [saved(matmul_model(), tmp_path / f"m{index}.onnx") for index in range(3)]
    built(paths[0], cache)
    [first] = entries(cache)
    size = (cache / first).stat().st_size
    monkeypatch.setattr(conversion, "CACHED_BYTES", 2 * size + 1)  # NOTE: room for two entries
    built(paths[1], cache)
    built(paths[2], cache)
    kept = set(entries(cache))
    assert len(kept) == 2 and first not in kept
    monkeypatch.setattr(conversion, "CACHED_BYTES", size - 1)  # NOTE: an entry larger than the whole cache
    built(saved(matmul_model(), tmp_path / "big.onnx"), cache)
    assert set(entries(cache)) == kept  # NOTE: not stored
    monkeypatch.setattr(conversion, "CACHED_BYTES", 1 << 30)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=size))  # NOTE: a nearly full disk
    before = set(entries(cache))
    built(saved(matmul_model(), tmp_path / "late.onnx"), cache)
    assert set(entries(cache)) == before  # NOTE: nothing stored


def test_builds_of_one_file_at_once_write_its_entry_once(tmp_path, converts, monkeypatch):
    import threading

    release, stores = threading.Event(), []
    real = conversion._store

    def slow_store(*args):
        stores.append(args[1])
        release.wait(30)  # NOTE: still writing while the next builds convert
        real(*args)

    monkeypatch.setattr(conversion, "_store", slow_store)
    cache, path = tmp_path / "cache", saved(matmul_model(), tmp_path / "m.onnx")
    outputs = [built(path, cache)[1] for _ in range(3)]
    release.set()
    assert len(converts) == 3 and len(stores) == 1  # NOTE: each build converted; one wrote
    assert len(entries(cache)) == 1
    np.testing.assert_array_equal(outputs[0], outputs[2])


@pytest.mark.parametrize("setting", [None, "off"])
def test_no_cache_converts_every_time(tmp_path, converts, monkeypatch, setting):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DELITE_CONVERSION_CACHE", "off")
    path = saved(matmul_model(), tmp_path / "m.onnx")
    for _ in range(2):
        built(path, setting if setting is None else "default")
    assert len(converts) == 2 and not (tmp_path / "xdg").exists()


def test_the_default_folder_is_under_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("DELITE_CONVERSION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert conversion.conversion_cache_directory("default") == tmp_path / "delite" / "converted"
    monkeypatch.setenv("DELITE_CONVERSION_CACHE", str(tmp_path / "here"))
    assert conversion.conversion_cache_directory("default") == tmp_path / "here"
    assert conversion.conversion_cache_directory(tmp_path / "there") == tmp_path / "there"
    with pytest.raises(lite.InputError, match="conversion_cache"):
        lite.Context(conversion_cache=3)


def test_a_cache_that_cannot_be_written_does_not_fail_the_build(tmp_path, converts):
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")  # NOTE: a file where the folder would be
    path = saved(matmul_model(), tmp_path / "m.onnx")
    for _ in range(2):
        _, got = built(path, blocked / "cache")
        entries(tmp_path)
    assert len(converts) == 2 and got.shape == (3, 8)


@pytest.mark.parametrize("size", [0, 1, DIGEST_CHUNK - 1, DIGEST_CHUNK, 2 * DIGEST_CHUNK + 5])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_file_digest_is_the_hash_of_its_chunks_hashes(tmp_path, size, workers):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    chunks = [data[i:i + DIGEST_CHUNK] for i in range(0, size, DIGEST_CHUNK)]
    want = hashlib.sha256(b"".join(hashlib.sha256(c).digest() for c in chunks)).digest()
    assert file_digest(tmp_path / "f", size + 1, "file", workers) == want == bytes_digest(data, workers)


def test_a_file_replaced_while_it_converts_is_stored_under_the_bytes_converted(tmp_path, converts, monkeypatch):
    """The file is hashed, then read again to convert: a file replaced in between must not leave the
    new model's conversion under the old bytes' name."""
    cache, first, second = tmp_path / "cache", matmul_model(), matmul_model()
    path = saved(first, tmp_path / "m.onnx")
    replaced = second.SerializeToString()
    real = conversion.file_digest

    def hashed_then_replaced(*args, **kwargs):
        digest = real(*args, **kwargs)
        path.write_bytes(replaced)  # NOTE: the file changes after it was hashed
        return digest

    monkeypatch.setattr(conversion, "file_digest", hashed_then_replaced)
    _, got = built(path, cache)
    np.testing.assert_allclose(got, run_onnxruntime(second, {"x": X})[0], rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(conversion, "file_digest", real)
    saved(first, path)
    _, again = built(path, cache)  # NOTE: the first model's bytes: converted, not the second's entry
    np.testing.assert_allclose(again, run_onnxruntime(first, {"x": X})[0], rtol=1e-4, atol=1e-5)
    assert len(converts) == 2


def test_the_file_digest_refuses_what_a_model_read_refuses(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    with pytest.raises(lite.MemoryLimitError):
        file_digest(tmp_path / "f", 4, "file")
    with pytest.raises(lite.ModelFileError, match="not a regular file"):
        file_digest(tmp_path, 100, "file")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(lite.ModelFileError, match="not a regular file"):
        file_digest(tmp_path / "fifo", 100, "file")  # NOTE: refused without blocking
