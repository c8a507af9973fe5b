"""The README's Python examples run as written (on a real model) and give onnxruntime's numbers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import lite
from lite.tools import zoo
from lite.tools.converter import convert
from tests.oracle import relative_l2, run_onnxruntime

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    text = README.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_use_it_example_runs_on_a_resnet(tmp_path, monkeypatch, capsys):
    onnx_model = zoo.resnet18(dynamic_batch=True)
    onnx.save(onnx_model, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(python_block("## Use it"), "README.md", "exec"), names)
    assert (tmp_path / "model.lite").exists() and names["y"].shape == (1, 1000)
    expected = run_onnxruntime(onnx_model, {onnx_model.graph.input[0].name: names["x"]})[0]
    assert relative_l2(names["y"], expected) < 1e-4
    assert names["model"].get_inputs()[0].shape == (4, 3, 224, 224)
    assert "native" in capsys.readouterr().out  # the partition report's rows


def test_the_measured_placement_example_times_both_delegates(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    onnx_model = zoo.inception_block()
    convert(onnx_model, tmp_path / "model.lite")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELITE_PLACEMENT_CACHE", str(tmp_path / "placement"))
    names: dict = {}
    exec(compile(python_block("### Measured placement"), "README.md", "exec"), names)
    printed = capsys.readouterr().out
    assert "ExampleNPUDelegate proposed 7" in printed and "ORTDelegate proposed 8" in printed
    assert list((tmp_path / "placement").glob("*.json"))
    [tensor] = names["model"].get_inputs()
    x = np.random.default_rng(0).standard_normal(tensor.shape).astype(np.float32)
    [y] = names["model"].predict([x])
    expected = run_onnxruntime(onnx_model, {tensor.name: x})[0]
    # NOTE: the timings decide; a partition chosen for the example NPU (a lone op can win) keeps
    # its activations in float16, which match float32 to about 1e-3
    on_npu = any(row.delegate == "ExampleNPUDelegate" and row.decision == "chosen"
                 for row in names["model"].placement_report())
    assert relative_l2(y.get_data_to_numpy(), expected) < (1e-3 if on_npu else 1e-4)


def test_the_custom_op_example_runs():
    names = {"lite": lite, "np": np}
    exec(compile(python_block("### Custom ops"), "README.md", "exec"), names)
    try:
        node = helper.make_node("ScaledTanh", ["x"], ["y"], domain="com.example", alpha=1.75, beta=0.625)
        graph = helper.make_graph([node], "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
        onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                             helper.make_opsetid("com.example", 1)])
        model = lite.Model()
        model.build(convert(onnx_model, custom_domains=["com.example"]), lite.ModelType.LITE)
        x = np.random.default_rng(4).standard_normal((2, 5)).astype(np.float32)
        [y] = model.predict([x])
        np.testing.assert_allclose(y.get_data_to_numpy(), 1.75 * np.tanh(0.625 * x), rtol=1e-6)
    finally:
        lite.unregister_custom_kernel("ScaledTanh")


class FakeSdk:
    """The README delegate's hypothetical ``my_sdk``: a device is present and programs compile."""

    compiled: list[list] = []

    @staticmethod
    def device_present() -> bool:
        return True

    @classmethod
    def compile(cls, ops: list) -> object:
        cls.compiled.append(ops)
        return object()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_the_delegate_example_takes_what_it_says_and_says_why_not(name, tmp_path):
    names = {"lite": lite, "my_sdk": FakeSdk}
    exec(compile(python_block("## Write a delegate"), "README.md", "exec"), names)
    model = lite.Model()
    model.build(convert(getattr(zoo, name)(image_size=32)), lite.ModelType.LITE, names["ctx"])
    rows = model.partition_report()
    taken = [r for r in rows if r.runs_on == "MyAccelDelegate"]
    assert taken and all(r.op_type in ("Conv2DFusion", "AddFusion") for r in taken)
    assert {k.name for k in model.graph_kernels()} == {r.graph_kernel for r in taken} == {
        f"accel_{i}" for i in range(len(model.graph_kernels()))}
    reasons = {r.reason.split(": ", 1)[1] for r in rows if r.reason}
    if name == "resnet18":  # every conv and add carries no activation or a ReLU; the stem conv is alone
        left = [r for r in rows if r.op_type in ("Conv2DFusion", "AddFusion") and r not in taken]
        assert [r.reason for r in left] == ["MyAccelDelegate: in a run of 1 node(s), below min_nodes_per_partition"]
    else:  # ReLU6 (a Clip) is fused into most of MobileNetV2's convs
        assert "fused RELU6 not supported" in reasons


def shell_commands() -> list[str]:
    """Every ``lite-*`` command the README gives in a bash block or inline, less syntax summaries ([...], |)."""
    text = README.read_text()
    lines = [line.split("#")[0] for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
             for line in block.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    parts += re.findall(r"`(lite-[^`]*)`", text)
    return sorted({p for p in parts if p.startswith("lite-") and not re.search(r"[\[|]|\.\.\.", p)})


def parser_of(tool: str):
    from lite.tools import benchmark, inspector, tune
    from lite.tools.converter import cli

    return {"lite-benchmark": benchmark.parse_args, "lite-inspect": inspector.parse_args,
            "lite-tune": tune.parse_args, "lite-convert": lambda argv: cli._parser().parse_args(argv)}[tool]


def test_every_readme_command_is_accepted_by_its_tool():
    """The README's commands run as written: each tool accepts their options (the main job itself runs in CI)."""
    import shlex

    commands = shell_commands()
    assert "lite-benchmark zoo:resnet18 --compare onnxruntime" in commands and len(commands) >= 8
    for command in commands:
        tool, *argv = shlex.split(command)
        parser_of(tool)(argv)  # argparse exits (SystemExit) on an unknown or malformed option


def test_the_ahead_of_time_example_loads_the_saved_partition(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tvm")
    from lite.tools.converter.cli import main

    onnx_model = zoo.inception_block()
    onnx.save(onnx_model, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELITE_TVM_CACHE", "off")
    assert main(["model.onnx", "-o", "model_tvm.lite", "--delegate", "tvm"]) == 0
    names: dict = {}
    exec(compile(python_block("### Compiled ahead of time"), "README.md", "exec"), names)
    assert "{'loaded: TVMDelegate tvm_0" in capsys.readouterr().out
    [tensor] = names["model"].get_inputs()
    x = np.random.default_rng(0).standard_normal(tensor.shape).astype(np.float32)
    [y] = names["model"].predict([x])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(onnx_model, {tensor.name: x})[0]) < 1e-4
