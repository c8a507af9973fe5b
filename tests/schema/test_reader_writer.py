"""The .lite writer and the validating reader."""

import contextlib
import dataclasses

import numpy as np
import pytest

import lite.schema.writer as writer_module
from lite.errors import ModelFormatError
from lite.schema.graph import DATA_ALIGNMENT, FORMAT_VERSION, GraphDef, NodeDef, PartitionDef, TensorDef
from lite.schema.primitives import default_attrs
from lite.schema.reader import aligned_copy, read_model
from lite.schema.writer import write_model, write_model_buffer


def conv_graph(rng: np.random.Generator) -> GraphDef:
    f32 = np.dtype(np.float32)
    return GraphDef(
        tensors=[
            TensorDef("x", f32, (-1, 3, 8, 8)),
            TensorDef("w", f32, (4, 3, 3, 3), data=rng.standard_normal((4, 3, 3, 3)).astype(f32)),
            TensorDef("b", f32, (4,), data=rng.standard_normal(4).astype(f32)),
            TensorDef("y", f32, (-1, 4, 8, 8)),
            TensorDef("shape", np.dtype(np.int64), (2,), data=np.array([-1, 256], np.int64)),
            TensorDef("z", f32, (-1, 256)),
        ],
        nodes=[
            NodeDef("conv", "Conv2DFusion", {"kernel_size": (3, 3), "pad_list": (1, 1, 1, 1),
                                             "group": 1, "activation_type": "RELU6"}, [0, 1, 2], [3]),
            NodeDef("flat", "Reshape", {}, [3, 4], [5]),
        ],
        inputs=[0], outputs=[5], name="tiny", description="test graph",
    )


def test_round_trip_keeps_everything():
    graph = conv_graph(np.random.default_rng(0))
    back = read_model(write_model(graph))
    assert (back.name, back.description, back.inputs, back.outputs) == ("tiny", "test graph", [0], [5])
    for want, got in zip(graph.tensors, back.tensors, strict=True):
        assert (got.name, got.dtype, got.shape, got.format) == (want.name, want.dtype, want.shape, want.format)
        if want.data is not None:
            np.testing.assert_array_equal(got.data, want.data)
    conv = back.nodes[0]
    assert conv.op_type == "Conv2DFusion" and conv.inputs == [0, 1, 2] and conv.outputs == [3]
    assert conv.attrs == {**default_attrs("Conv2DFusion"), **graph.nodes[0].attrs}
    assert conv.attrs["activation_type"] == "RELU6"


def test_const_data_is_aligned_read_only_view_of_buffer():
    buffer = aligned_copy(write_model(conv_graph(np.random.default_rng(1))))
    graph = read_model(buffer)
    for tensor in graph.tensors:
        if tensor.data is not None:
            assert tensor.data.ctypes.data % DATA_ALIGNMENT == 0
            assert not tensor.data.flags.writeable
            assert np.shares_memory(tensor.data, buffer)


def test_the_writers_own_buffer_is_read_in_place():
    """``write_model_buffer`` moves the model to a 64-byte boundary of the writer's buffer, so a build
    from it (a converted ONNX file) reads its constants there instead of from an aligned copy."""
    graph = conv_graph(np.random.default_rng(2))
    for padding in range(8):  # NOTE: models of eight lengths end at eight places of the writer's buffer
        longer = write_model_buffer(dataclasses.replace(graph, description="x" * 8 * padding))
        assert longer.ctypes.data % DATA_ALIGNMENT == 0 and not longer.flags.writeable
    buffer = write_model_buffer(graph)
    assert buffer.tobytes() == write_model(graph)
    back = read_model(buffer)
    for want, got in zip(graph.tensors, back.tensors, strict=True):
        if want.data is not None:
            assert np.shares_memory(got.data, buffer)
            np.testing.assert_array_equal(got.data, want.data)
    copied = read_model(buffer.tobytes())  # NOTE: bytes start 32 bytes into their object: read from a copy
    assert not np.shares_memory(copied.tensors[1].data, buffer)


def test_absent_optional_input_round_trips():
    graph = conv_graph(np.random.default_rng(2))
    graph.nodes[0].inputs = [0, 1, -1]
    assert read_model(write_model(graph)).nodes[0].inputs == [0, 1, -1]


def test_writer_rejects_unknown_attribute():
    graph = conv_graph(np.random.default_rng(3))
    graph.nodes[0].attrs["no_such_attr"] = 1
    with pytest.raises(ValueError, match="no_such_attr"):
        write_model(graph)


@pytest.mark.parametrize("mutate, message", [
    (lambda g: setattr(g.nodes[0], "inputs", [0, 9]), "tensor index 9"),
    (lambda g: setattr(g, "outputs", []), "no outputs"),
    (lambda g: setattr(g.nodes[1], "outputs", [3]), "produced by both"),
    (lambda g: setattr(g, "inputs", [1]), "graph input 'w'"),
    (lambda g: setattr(g.tensors[0], "shape", (-2, 3)), "invalid dims"),
    (lambda g: setattr(g.tensors[1], "shape", (4, 3, 3, 4)), "data has 432 bytes"),
    (lambda g: setattr(g.tensors[0], "shape", (1 << 40, 1 << 20)), "memory limit"),
])
def test_inconsistent_models_are_refused_with_the_culprit_named(mutate, message):
    graph = conv_graph(np.random.default_rng(4))
    mutate(graph)
    with pytest.raises(ModelFormatError, match=message):
        read_model(write_model(graph))


def test_wrong_identifier_and_version():
    data = bytearray(write_model(conv_graph(np.random.default_rng(5))))
    with pytest.raises(ModelFormatError, match="identifier"):
        read_model(bytes(data[:4]) + b"ONNX" + bytes(data[8:]))
    with pytest.raises(ModelFormatError, match="too short"):
        read_model(b"abc")


@pytest.mark.parametrize("version", [0, FORMAT_VERSION + 1, 2**31 - 1])
def test_a_version_this_runtime_does_not_read_is_refused(version, monkeypatch):
    monkeypatch.setattr(writer_module, "FORMAT_VERSION", version)
    data = write_model(conv_graph(np.random.default_rng(5)))
    with pytest.raises(ModelFormatError, match=f"model format version {version} is not supported"):
        read_model(data)


def _mutations(data: bytes, rng: np.random.Generator, count: int):
    for _ in range(count):
        buf = bytearray(data)
        kind = rng.integers(4)
        if kind == 0:
            yield bytes(buf[: rng.integers(len(buf))])
        elif kind == 1:
            for _ in range(rng.integers(1, 8)):
                buf[rng.integers(len(buf))] ^= 1 << rng.integers(8)
            yield bytes(buf)
        elif kind == 2:
            at = rng.integers(len(buf) - 8)
            buf[at : at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
            yield bytes(buf)
        else:
            yield rng.integers(0, 256, rng.integers(1, 2 * len(buf)), dtype=np.uint8).tobytes()


CUSTOM_ATTRS = {"alpha": 0.5, "count": -3, "mode": "fast", "taps": [1, -2, 3], "scales": (0.25, 1), "names": ["a", "b"],
                "empty": ()}


def custom_graph(rng: np.random.Generator) -> GraphDef:
    f32 = np.dtype(np.float32)
    table = rng.standard_normal((2, 3)).astype(np.float16)
    attrs = {"type": "ScaledTanh", "domain": "com.example", "attrs": {**CUSTOM_ATTRS, "table": table}}
    return GraphDef(tensors=[TensorDef("x", f32, (-1, 3)), TensorDef("y", f32, (-1, 3))],
                    nodes=[NodeDef("vendor", "Custom", attrs, [0], [1])], inputs=[0], outputs=[1])


def test_custom_round_trip_keeps_every_attribute_kind():
    graph = custom_graph(np.random.default_rng(7))
    node = read_model(write_model(graph)).nodes[0]
    assert (node.op_type, node.attrs["type"], node.attrs["domain"]) == ("Custom", "ScaledTanh", "com.example")
    attrs = node.attrs["attrs"]
    assert list(attrs) == [*CUSTOM_ATTRS, "table"]
    assert {k: v for k, v in attrs.items() if k != "table"} == {
        "alpha": 0.5, "count": -3, "mode": "fast", "taps": (1, -2, 3), "scales": (0.25, 1.0), "names": ("a", "b"),
        "empty": ()}
    want = graph.nodes[0].attrs["attrs"]["table"]
    assert attrs["table"].dtype == want.dtype and not attrs["table"].flags.writeable
    np.testing.assert_array_equal(attrs["table"], want)
    with pytest.raises(TypeError):
        attrs["alpha"] = 1.0  # read-only


@pytest.mark.parametrize("attrs, message", [
    ({"type": "", "attrs": {}}, "custom op type is empty"),
    ({"type": "Op", "attrs": {"": 1}}, "attribute name is empty"),
    ({"type": "Op", "attrs": {}, "group": 1}, "no attribute"),
    ({"type": "Op", "attrs": {"a": {1, 2}}}, "'a' cannot hold set"),
    ({"type": "Op", "attrs": {"a": [1, "b"]}}, "'a' cannot hold list"),
    ({"type": "Op", "attrs": {"a": np.array(["s"])}}, "cannot be <U1"),
])
def test_writer_rejects_custom_attributes_it_cannot_store(attrs, message):
    graph = custom_graph(np.random.default_rng(8))
    graph.nodes[0].attrs = attrs
    with pytest.raises(ValueError, match=message):
        write_model(graph)


@pytest.mark.parametrize("make_graph, seed, count", [(conv_graph, 6, 1500), (custom_graph, 9, 800)])
def test_corrupted_bytes_raise_only_model_format_error(make_graph, seed, count):
    rng = np.random.default_rng(seed)
    data = write_model(make_graph(rng))
    for mutated in _mutations(data, rng, count):
        with contextlib.suppress(ModelFormatError):
            read_model(mutated)


# ---- delegate partitions saved in the file ---------------------------------------------------------


def saved_graph(rng: np.random.Generator) -> GraphDef:
    graph = conv_graph(rng)
    blob = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    graph.partitions = [PartitionDef("SomeDelegate", "target-1", "some_0", [0, 1], [0], [5], blob, "f" * 64)]
    return graph


def test_saved_partitions_round_trip_with_an_aligned_read_only_blob():
    graph = saved_graph(np.random.default_rng(10))
    buffer = aligned_copy(write_model(graph))
    (back,) = read_model(buffer).partitions
    want = graph.partitions[0]
    assert (back.delegate, back.target, back.name, back.nodes, back.inputs, back.outputs, back.digest) == (
        want.delegate, want.target, want.name, want.nodes, want.inputs, want.outputs, want.digest)
    assert bytes(back.blob) == want.blob and back.blob.ctypes.data % DATA_ALIGNMENT == 0
    assert not back.blob.flags.writeable and np.shares_memory(back.blob, buffer)


def test_files_without_partitions_read_as_before():
    assert read_model(write_model(conv_graph(np.random.default_rng(11)))).partitions == []


@pytest.mark.parametrize("change, message", [
    ({"nodes": [0, 7]}, "refers to node index 7, but the model has 2 nodes"),
    ({"nodes": [1, 1]}, "lists a node twice"),
    ({"nodes": []}, "covers no nodes"),
    ({"inputs": [9]}, "refers to tensor index 9"),
    ({"outputs": []}, "has no outputs"),
    ({"delegate": ""}, "names no delegate"),
])
def test_inconsistent_partitions_are_refused(change, message):
    graph = saved_graph(np.random.default_rng(12))
    graph.partitions[0] = dataclasses.replace(graph.partitions[0], **change)
    with pytest.raises(ModelFormatError, match=message):
        read_model(write_model(graph))


def test_a_blob_beyond_the_memory_limit_is_refused_before_use():
    data = write_model(saved_graph(np.random.default_rng(13)))
    with pytest.raises(ModelFormatError, match="blob of 5000 bytes exceeds the memory limit of 4999 bytes"):
        read_model(data, memory_limit=4999)


def test_corrupted_files_with_partitions_raise_only_model_format_error():
    rng = np.random.default_rng(14)
    data = write_model(saved_graph(rng))
    for mutated in _mutations(data, rng, 1000):
        with contextlib.suppress(ModelFormatError):
            read_model(mutated)
