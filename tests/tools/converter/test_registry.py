import pytest

from lite.tools.converter import registry
from lite.tools.converter.registry import MapperRegistry


def _first(ctx):
    return "first"


def _second(ctx):
    return "second"


def test_lookup_picks_highest_since_not_above_opset():
    reg = MapperRegistry()
    reg.mapper("Op", since=1)(_first)
    reg.mapper("Op", since=11)(_second)
    assert reg.find("Op", 1) is _first
    assert reg.find("Op", 10) is _first
    assert reg.find("Op", 11) is _second
    assert reg.find("Op", 20) is _second


def test_lookup_below_first_version_or_unknown_op_is_none():
    reg = MapperRegistry()
    reg.mapper("Op", since=9)(_first)
    assert reg.find("Op", 8) is None
    assert reg.find("Other", 17) is None


def test_decorators_stack_and_return_the_function():
    reg = MapperRegistry()

    @reg.mapper("A", since=1)
    @reg.mapper("B", since=7)
    def both(ctx):
        return None

    assert reg.find("A", 1) is both and reg.find("B", 7) is both
    assert reg.supported_ops() == {"A": [1], "B": [7]}


def test_registering_same_op_and_version_twice_raises():
    reg = MapperRegistry()
    reg.mapper("Op", since=5)(_first)
    with pytest.raises(ValueError, match="Op already has a mapper since opset 5"):
        reg.mapper("Op", since=5)(_second)


def test_ai_onnx_domain_is_the_default_domain():
    reg = MapperRegistry()
    reg.mapper("Op", since=1, domain="ai.onnx")(_first)
    assert reg.find("Op", 3) is _first
    assert reg.find("Op", 3, domain="ai.onnx") is _first
    assert reg.find("Op", 3, domain="com.microsoft") is None


def test_why_missing_names_first_version_and_fix():
    reg = MapperRegistry()
    reg.mapper("Resize", since=10)(_first)
    assert "converts from opset 10" in reg.why_missing("Resize", 9)
    assert "convert_version" in reg.why_missing("Resize", 9)
    assert "no converter mapping for Foo" in reg.why_missing("Foo", 17)


def test_global_registry_covers_the_issue_op_set():
    ops = registry.supported_ops()
    expected = ["Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Sum", "Max", "Min",
                "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Softmax",
                "LogSoftmax", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                "BatchNormalization", "LRN", "Concat", "Reshape", "Flatten", "Transpose", "Squeeze",
                "Unsqueeze", "Pad", "Slice", "Split", "Gather", "Resize", "Upsample", "ReduceMean",
                "ReduceMax", "ReduceSum", "Dropout", "Identity", "ConstantOfShape", "Shape", "Cast", "Exp",
                "Log", "Sqrt", "Pow", "Erf", "Neg", "Abs", "Where", "Expand", "Equal", "Less", "Greater"]
    assert sorted(set(expected) - set(ops)) == []
    assert ops["Clip"] == [1, 11]
    assert ops["Unsqueeze"] == [1, 13]
    assert ops["Resize"] == [10, 11]


def test_an_op_with_no_mapping_points_to_the_list_of_ops():
    reason = registry.REGISTRY.why_missing("NoSuchOp", 17)
    assert "lite-convert --list-ops" in reason and "supported_ops()" in reason
