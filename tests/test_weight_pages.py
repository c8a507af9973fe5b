"""Models built from a mapped .lite file release the pages of weights their kernels packed
(``lite.files.MappedModelFile``, ``lite.weight_pages``)."""

import mmap
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.kernels import fast
from lite.tools.converter import convert

pytestmark = pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED") or not fast.enabled()
                                or not os.path.exists("/proc/self/pagemap"),
                                reason="needs madvise, /proc/self/pagemap and the compiled kernels")


def conv_model(rng) -> onnx.ModelProto:
    weight = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resident_pages(array: np.ndarray) -> int:
    """How many of the pages wholly inside ``array`` this process maps now (/proc/self/pagemap's
    present bit: mincore would report the page cache, which keeps a file's pages after they leave us)."""
    first = -(-array.ctypes.data // mmap.PAGESIZE)
    count = (array.ctypes.data + array.nbytes) // mmap.PAGESIZE - first
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read(count * 8), dtype=np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63)))


@pytest.fixture
def built(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "conv.lite"
    data = convert(conv_model(rng), path)
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=1))
    return model, data, path, rng


def weight_tensor(model: lite.Model) -> lite.Tensor:
    return next(t for t in model._engine.tensors if t.is_const and t.name == "w")


def test_packed_weight_views_the_mapping_and_leaves_memory(built):
    model, _, _, _ = built
    engine, weight = model._engine, weight_tensor(model)
    assert np.shares_memory(weight.data, engine.pages.mapped.array)
    assert weight in engine.pages.released and engine.pages.mapped.released > 0
    assert resident_pages(weight.data) == 0


def test_released_weights_compute_as_a_model_built_from_bytes(built):
    model, data, _, rng = built
    reference = lite.Model()
    reference.build(data, context=lite.Context(thread_num=1))
    assert reference._engine.pages is None
    for shape in ([1, 64, 16, 16], [2, 64, 12, 12]):  # NOTE: the resize packs again from the file's pages
        x = rng.standard_normal(shape).astype(np.float32)
        for m in (model, reference):
            if list(m.get_inputs()[0].shape) != shape:
                m.resize(m.get_inputs(), [shape])
        expected = reference.predict([x])[0].get_data_to_numpy()
        np.testing.assert_allclose(model.predict([x])[0].get_data_to_numpy(), expected, rtol=1e-5, atol=1e-5)
    assert resident_pages(weight_tensor(model).data) == 0  # released again after the resize


def test_a_file_changed_in_place_makes_resize_raise(built):
    model, data, path, _ = built
    with open(path, "r+b") as f:
        f.truncate(len(data) // 2)
    with pytest.raises(lite.LiteError, match="changed on disk"):
        model.resize(model.get_inputs(), [[1, 64, 8, 8]])  # NOTE: a fault on a page past the end would kill us


def test_a_truncated_file_is_refused_at_build(built):
    _, data, path, _ = built
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(lite.LiteError):
        lite.Model().build_from_file(path)


def int8_conv_model(rng) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv (an int8 weight, per channel, through DQ) -> Q -> DQ: one int8 convolution."""
    weight = rng.integers(-127, 128, (64, 64, 3, 3)).astype(np.int8)
    scalars = {"xs": np.float32(0.05), "xz": np.int8(0), "ys": np.float32(0.5), "yz": np.int8(3)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    initializers = [numpy_helper.from_array(weight, "wq"),
                    numpy_helper.from_array(rng.uniform(0.001, 0.01, 64).astype(np.float32), "ws"),
                    *(numpy_helper.from_array(np.array(v), k) for k, v in scalars.items())]
    graph = helper.make_graph(nodes, "qconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_int8_convolution_releases_its_weight_and_computes_as_from_bytes(tmp_path):
    """The compiled int8 plans keep their own packed weight: the file's int8 pages leave memory,
    and a resize (which packs again from them) computes as a model built from bytes."""
    rng = np.random.default_rng(8)
    path = tmp_path / "qconv.lite"
    data = convert(int8_conv_model(rng), path)
    model, reference = lite.Model(), lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=1))
    reference.build(data, context=lite.Context(thread_num=1))
    weight = next(t for t in model._engine.tensors if t.is_const and t.dtype == np.int8 and t.data.size == 64 * 576)
    assert weight in model._engine.pages.released and resident_pages(weight.data) == 0
    for shape in ([1, 64, 16, 16], [2, 64, 12, 12]):
        x = rng.standard_normal(shape).astype(np.float32)
        for m in (model, reference):
            if list(m.get_inputs()[0].shape) != shape:
                m.resize(m.get_inputs(), [shape])
        expected = reference.predict([x])[0].get_data_to_numpy()
        np.testing.assert_array_equal(model.predict([x])[0].get_data_to_numpy(), expected)
    assert resident_pages(weight.data) == 0
