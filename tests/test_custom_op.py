"""Custom ops end to end: an ONNX node of a vendor domain -> a ``Custom`` primitive -> a native kernel
the user registers, or a delegate that claims it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import lite
from lite.errors import InputError, ModelFormatError, UnsupportedOpError
from lite.schema import writer
from lite.schema.fb.Custom import CustomT
from lite.schema.fb.CustomAttribute import CustomAttributeT
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.primitives import MAX_ATTRS, MAX_ITEMS, MAX_NAME
from lite.schema.reader import read_model
from lite.tools.converter import convert
from lite.tools.converter.cli import main as lite_convert
from tests.support.custom_op import ALPHA, BETA, DOMAIN, scaled_tanh, vendor_model

F32 = np.dtype(np.float32)


def reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    h = x.astype(np.float64) @ weights["w"]
    a = scaled_tanh(h, {"alpha": ALPHA, "beta": BETA}) * weights["c"] + h
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def predict(data: bytes, x: np.ndarray, context: lite.Context | None = None) -> tuple[lite.Model, np.ndarray]:
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, context or lite.Context())
    return model, model.predict([x])[0].get_data_to_numpy()


def test_custom_node_converts_with_its_attributes_and_declared_type():
    model, weights = vendor_model(np.random.default_rng(0))
    graph = read_model(convert(model, custom_domains=[DOMAIN]))  # no kernel registered: still converts
    (custom,) = [n for n in graph.nodes if n.op_type == "Custom"]
    attrs = custom.attrs["attrs"]
    assert (custom.name, custom.attrs["type"], custom.attrs["domain"]) == ("scaled_tanh", "ScaledTanh", DOMAIN)
    assert {k: v for k, v in attrs.items() if k != "lut"} == {"alpha": ALPHA, "beta": BETA, "mode": "fast",
                                                              "taps": (1, 2, 3)}
    np.testing.assert_array_equal(attrs["lut"], weights["lut"])
    out = graph.tensors[custom.outputs[0]]
    assert (out.name, out.dtype, out.shape) == ("s", F32, (-1, 6))


def test_registered_kernel_runs_the_custom_op(native_runs):
    rng = np.random.default_rng(1)
    model, weights = vendor_model(rng)
    data = convert(model, custom_domains=[DOMAIN])
    for batch in (3, 5):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        _, y = predict(data, x)
        np.testing.assert_allclose(y, reference(x, weights), rtol=1e-5, atol=1e-5)
    assert native_runs == ["scaled_tanh", "scaled_tanh"]


VENDOR_OPS = {
    "ScaledTanh": scaled_tanh,
    "MulFusion": lambda a, b, attrs: a * b,
    "AddFusion": lambda a, b, attrs: a + b,
}


def vendor_op(primitive: lite.Primitive) -> tuple[str, object]:
    """The vendor op's name and attributes (a custom op's are its own ``attrs``)."""
    if primitive.type == "Custom":
        return primitive.attrs["type"], primitive.attrs["attrs"]
    return primitive.type, primitive.attrs


class VendorGraphKernel(lite.Kernel):
    """Runs its partition with the vendor's own implementations, not the native kernels."""

    def __init__(self, kernels, inputs, outputs):
        super().__init__(inputs, outputs, name="vendor")
        self.steps = [(*vendor_op(k.primitive), k.inputs, k.outputs[0]) for k in kernels]
        self.weights: dict = {}

    def prepare(self):
        self.weights = {t: np.array(t.data) for *_, ins, _ in self.steps for t in ins if t.is_const}

    def execute(self):
        values = {**self.weights, **{t: t.data for t in self.inputs}}
        for op, attrs, ins, out in self.steps:
            values[out] = VENDOR_OPS[op](*(values[t] for t in ins), attrs)
        for tensor in self.outputs:
            tensor.data[...] = values[tensor]


class VendorDelegate(lite.SimpleDelegate):
    """Claims ScaledTanh and the plain Mul/Add next to it."""

    def is_supported(self, kernel, primitive):
        op, attrs = vendor_op(primitive)
        if op not in VENDOR_OPS:
            return f"{op} is not a vendor op"
        return attrs.get("activation_type", "NO_ACTIVATION") == "NO_ACTIVATION" or "fused activation"

    def create_graph_kernel(self, kernels, inputs, outputs):
        return VendorGraphKernel(kernels, inputs, outputs)


def test_a_delegate_claims_the_custom_op(native_runs):
    rng = np.random.default_rng(2)
    model, weights = vendor_model(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    context = lite.Context()
    context.delegate = VendorDelegate()
    built, y = predict(convert(model, custom_domains=[DOMAIN]), x, context)
    where = {row.node: (row.op_type, row.runs_on) for row in built.partition_report()}
    assert where == {"matmul": ("MatMulFusion", "native"), "scaled_tanh": ("Custom", "VendorDelegate"),
                     "mul": ("MulFusion", "VendorDelegate"), "add": ("AddFusion", "VendorDelegate"),
                     "softmax": ("Softmax", "native")}
    np.testing.assert_allclose(y, reference(x, weights), rtol=1e-5, atol=1e-5)
    assert native_runs == []


def test_unregistered_custom_op_is_named_with_the_fix():
    model, _ = vendor_model(np.random.default_rng(3))
    data = convert(model, custom_domains=[DOMAIN], input_shapes={"x": [2, 8]})
    with pytest.raises(UnsupportedOpError, match=r"custom op 'ScaledTanh' \(domain 'com.example'\).*"
                                                 r"register_custom_kernel\('ScaledTanh'\)"):
        lite.Model().build(data, lite.ModelType.LITE, lite.Context())


def test_converter_validates_through_a_registered_kernel():
    @lite.register_custom_kernel("ScaledTanh")
    class WrongDtype(lite.NativeKernel):
        def infer_shapes(self):
            return [self.inputs[0].shape]

        def output_dtypes(self):
            return [np.dtype(np.float64)]

    try:
        model, _ = vendor_model(np.random.default_rng(4))
        with pytest.raises(ModelFormatError, match="scaled_tanh.*computes float64"):
            convert(model, custom_domains=[DOMAIN], input_shapes={"x": [2, 8]})
    finally:
        lite.unregister_custom_kernel("ScaledTanh")


def test_registration_rules():
    class Kernel(lite.NativeKernel):
        pass

    lite.register_custom_kernel("Twice", dtypes=[np.float32])(Kernel)
    try:
        with pytest.raises(ValueError, match="already has a kernel for float32.*unregister_custom_kernel"):
            lite.register_custom_kernel("Twice", dtypes=[np.float64, np.float32])(Kernel)
        lite.register_custom_kernel("Twice", dtypes=[np.float64])(Kernel)  # another dtype is fine
    finally:
        lite.unregister_custom_kernel("Twice")
    lite.register_custom_kernel("Twice")(Kernel)  # the name is free again
    lite.unregister_custom_kernel("Twice")
    with pytest.raises(ValueError, match="no kernel is registered"):
        lite.unregister_custom_kernel("Twice")
    with pytest.raises(TypeError, match="NativeKernel subclass"):
        lite.register_custom_kernel("NotAKernel")(object)
    with pytest.raises(ValueError, match="non-empty"):
        lite.register_custom_kernel("")


def test_undeclared_domain_stays_unsupported_and_standard_domain_cannot_be_custom():
    model, _ = vendor_model(np.random.default_rng(5))
    with pytest.raises(UnsupportedOpError, match="domain 'com.example'.*--custom-domain com.example"):
        convert(model)
    with pytest.raises(UnsupportedOpError, match="domain 'com.example'"):
        convert(model, custom_domains=["com.other"])
    for bad in (["ai.onnx"], "com.example"):
        with pytest.raises(InputError, match="custom_domains"):
            convert(model, custom_domains=bad)


def test_lite_convert_custom_domain_option(tmp_path, capsys):
    path = tmp_path / "vendor.onnx"
    onnx.save(vendor_model(np.random.default_rng(7))[0], path)
    assert lite_convert([str(path)]) == 1
    assert "--custom-domain com.example" in capsys.readouterr().err
    assert lite_convert([str(path), "--custom-domain", DOMAIN]) == 0
    graph = read_model(path.with_suffix(".lite").read_bytes())
    assert [n.attrs["type"] for n in graph.nodes if n.op_type == "Custom"] == ["ScaledTanh"]


def test_graph_attribute_is_unsupported():
    model, _ = vendor_model(np.random.default_rng(6))
    body = helper.make_graph([], "body", [], [])
    model.graph.node[1].attribute.append(helper.make_attribute("body", body))
    with pytest.raises(UnsupportedOpError, match="custom attribute 'body' cannot hold GraphProto"):
        convert(model, custom_domains=[DOMAIN])


def custom_graph() -> GraphDef:
    return GraphDef(tensors=[TensorDef("x", F32, (2,)), TensorDef("y", F32, (2,))],
                    nodes=[NodeDef("vendor", "Custom", {}, [0], [1])], inputs=[0], outputs=[1])


def attribute(name: str = "a", **fields) -> CustomAttributeT:
    attr = CustomAttributeT()
    attr.name = name
    for key, value in fields.items():
        setattr(attr, key, value)
    return attr


def custom_table(attrs: list[CustomAttributeT], op: str = "ScaledTanh") -> CustomT:
    table = CustomT()
    table.type, table.domain, table.attrs = op, DOMAIN, attrs
    return table


@pytest.mark.parametrize("table, message", [
    (custom_table([attribute(kind=99)]), "unknown enum value 99"),
    (custom_table([], op=""), "custom op type is empty"),
    (custom_table([attribute("")]), "attribute name is empty"),
    (custom_table([attribute("x" * (MAX_NAME + 1))]), "longer than 256 bytes"),
    (custom_table([attribute(), attribute()]), "attribute 'a' twice"),
    (custom_table([attribute(str(k)) for k in range(MAX_ATTRS + 1)]), "count 1025 exceeds"),
    (custom_table([attribute(kind=3, ints=np.zeros(MAX_ITEMS + 1, np.int64))]), "count 65537 exceeds"),
    (custom_table([attribute(kind=6, dataType=1, dims=[2, 3], data=np.zeros(20, np.uint8))]), "need 24"),
    (custom_table([attribute(kind=6, dataType=0, dims=[1], data=np.zeros(4, np.uint8))]), "no data type"),
    (custom_table([attribute(kind=6, dataType=1, dims=[-1], data=np.zeros(4, np.uint8))]), "invalid dims"),
])
def test_hostile_custom_tables_raise_model_format_error(monkeypatch, table, message):
    monkeypatch.setattr(writer, "encode_attrs", lambda op_type, attrs: table)
    data = writer.write_model(custom_graph())
    with pytest.raises(ModelFormatError, match=message):
        read_model(data)


def test_a_huge_claimed_list_length_raises_model_format_error():
    taps = np.array([11, 22, 33], np.int64)
    graph = custom_graph()
    graph.nodes[0].attrs = {"type": "ScaledTanh", "attrs": {"taps": taps.tolist()}}
    data = bytearray(writer.write_model(graph))
    at = bytes(data).index(taps.tobytes()) - 4  # the vector's length prefix
    assert data[at:at + 4] == (3).to_bytes(4, "little")
    data[at:at + 4] = (2**31 - 1).to_bytes(4, "little")
    with pytest.raises(ModelFormatError, match="count 2147483647 exceeds"):
        read_model(bytes(data))
