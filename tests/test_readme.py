"""The README's and every docs page's examples run as written, their commands are accepted by the tools, their
links lead somewhere, and what they state about the code (tool help texts, environment variables) is current.

Python blocks run in a folder holding ``model.onnx`` and ``model.lite`` (a small zoo MobileNetV2), one namespace
per page, in order. A block that cannot run in a test is marked in the page with ``<!-- no-test: reason -->``
on the line before it; ``test_a_marked_block_says_why_it_does_not_run`` lists each with its reason. The blocks
in ``COVERED`` run in tests of their own below, which also check their results against onnxruntime.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import lite
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.docs import NO_TEST, ROOT, Block, blocks  # noqa: F401  (Block: the type of blocks())
from tests.support.oracle import relative_l2, run_onnxruntime

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
HELP = re.compile(r"<!--\s*help:\s*(lite-[a-z-]+)\s*-->")
HELP_COLUMNS = "100"

COVERED = {  # (page, heading) -> the test that runs the first python block under that heading
    ("README.md", "## Use it"): "test_the_use_it_example_runs_on_a_resnet",
    ("README.md", "## Write a delegate (30 lines)"): "test_the_delegate_example_takes_what_it_says_and_says_why_not",
    ("docs/models.md", "## Custom ops"): "test_the_custom_op_example_runs",
    ("docs/delegates/measured_placement.md", "# Measured placement"):
        "test_the_measured_placement_example_times_both_delegates",
    ("docs/delegates/ahead_of_time.md", "# Compiled ahead of time: partitions saved in the .lite file"):
        "test_the_ahead_of_time_example_loads_the_saved_partition",
}
SETUP = {  # page -> the commands (from the page itself) that make the files its blocks read
    "docs/delegates/ahead_of_time.md": ["lite-convert model.onnx -o model_npu.lite --delegate example_npu"],
}
NEEDS = {"ORTDelegate": "onnxruntime", "TVMDelegate": "tvm", "import ray": "ray"}  # a name in a block -> its package


def relative(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def python_block(page: str, heading: str) -> str:
    """The code of the first python block under ``heading`` (or a later heading) of ``page``."""
    return covered_block(page, heading).code


def run_block(code: str, page: str, names: dict) -> None:
    exec(compile(code, page, "exec"), names)


# ---- every page's python blocks ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> Path:
    """``model.onnx`` and ``model.lite``: the model the pages' examples load."""
    folder = tmp_path_factory.mktemp("docs_model")
    onnx_model = zoo.mobilenet_v2(image_size=32)
    onnx.save(onnx_model, folder / "model.onnx")
    convert(onnx_model, folder / "model.lite")
    return folder


def covered_block(page: str, heading: str) -> Block:
    """The first python block under ``heading`` (or a later heading) of ``page``: the one its COVERED test runs."""
    path = ROOT / page
    at = path.read_text().splitlines().index(heading) + 1
    return next(b for b in blocks(path) if b.language == "python" and b.line > at)


def runnable(page: Path) -> list[Block]:
    """The python blocks of ``page`` that the page's test runs: not marked, not run by a test of their own."""
    covered = {covered_block(p, h) for (p, h) in COVERED if p == relative(page)}
    return [b for b in blocks(page) if b.language == "python" and b.skip is None and b not in covered]


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=relative)
def test_every_python_block_of_the_page_runs(page, model_files, tmp_path, monkeypatch, capsys):
    for block in runnable(page):
        for name, package in NEEDS.items():
            if name in block.code:
                pytest.importorskip(package)
    for name in ("model.onnx", "model.lite"):
        shutil.copy(model_files / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELITE_PLACEMENT_CACHE", str(tmp_path / "placement"))
    monkeypatch.setenv("DELITE_TVM_CACHE", str(tmp_path / "tvm"))
    for command in SETUP.get(relative(page), []):
        assert command in page.read_text(), f"{relative(page)} no longer gives {command!r}"
        tool, *argv = shlex.split(command)
        assert main_of(tool)(argv) == 0
    names: dict = {}
    for block in runnable(page):
        try:
            run_block(block.code, block.where, names)
        except Exception as exc:
            raise AssertionError(f"the python block at {block.where} failed: {type(exc).__name__}: {exc}") from exc
    capsys.readouterr()


MARKED = [b for p in PAGES for b in blocks(p) if b.skip is not None]


@pytest.mark.parametrize("block", MARKED, ids=lambda b: b.where)
def test_a_marked_block_says_why_it_does_not_run(block):
    assert len(block.skip) > 10, f"{block.where}: say why the block cannot run in a test"
    pytest.skip(f"{block.where}: {block.skip}")


def test_every_covered_block_is_where_its_test_looks():
    for (page, heading), test in COVERED.items():
        assert test in globals(), test
        assert python_block(page, heading), f"{page} has no python block under {heading!r}"


# ---- the blocks with tests of their own --------------------------------------------------------------------


def test_the_use_it_example_runs_on_a_resnet(tmp_path, monkeypatch, capsys):
    onnx_model = zoo.resnet18(dynamic_batch=True)
    onnx.save(onnx_model, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    run_block(python_block("README.md", "## Use it"), "README.md", names)
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
    run_block(python_block("docs/delegates/measured_placement.md", "# Measured placement"), "measured", names)
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
    names: dict = {}
    run_block(python_block("docs/models.md", "## Custom ops"), "docs/models.md", names)
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
    names = {"my_sdk": FakeSdk}
    run_block(python_block("README.md", "## Write a delegate (30 lines)"), "README.md", names)
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


def test_the_ahead_of_time_example_loads_the_saved_partition(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tvm")
    onnx_model = zoo.inception_block()
    onnx.save(onnx_model, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELITE_TVM_CACHE", "off")
    page = "docs/delegates/ahead_of_time.md"
    command = "lite-convert model.onnx -o model_tvm.lite --delegate tvm"
    assert command in (ROOT / page).read_text()
    assert main_of("lite-convert")(shlex.split(command)[1:]) == 0
    names: dict = {}
    run_block(python_block(page, "# Compiled ahead of time: partitions saved in the .lite file"), page, names)
    assert "{'loaded: TVMDelegate tvm_0" in capsys.readouterr().out
    [tensor] = names["model"].get_inputs()
    x = np.random.default_rng(0).standard_normal(tensor.shape).astype(np.float32)
    [y] = names["model"].predict([x])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(onnx_model, {tensor.name: x})[0]) < 1e-4


# ---- commands ----------------------------------------------------------------------------------------------


def shell_commands(page: Path) -> list[str]:
    """Every ``lite-*`` command ``page`` gives in a bash block or inline, less syntax summaries ([...], |) and
    bare tool names; a leading ``NAME=value`` environment setting is dropped."""
    text = page.read_text()
    lines = [line.split("#")[0] for b in blocks(page) if b.language == "bash" for line in b.code.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    parts += [" ".join(c.split()) for c in re.findall(r"`(lite-[^`]*)`", text)]
    parts = [re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", p) for p in parts]
    return sorted({p for p in parts if re.match(r"lite-[a-z-]+ \S", p) and not re.search(r"[\[|]|\.\.\.", p)})


def parser_of(tool: str):
    from lite.tools import benchmark, delegate_test, inspector, tune
    from lite.tools.converter import cli

    return {"lite-benchmark": benchmark.parse_args, "lite-inspect": inspector.parse_args,
            "lite-delegate-test": delegate_test.parse_args,
            "lite-tune": tune.parse_args, "lite-convert": lambda argv: cli._parser().parse_args(argv)}[tool]


def main_of(tool: str):
    from lite.tools.converter import cli

    return {"lite-convert": cli.main}[tool]


@pytest.mark.parametrize("page", [p for p in PAGES if shell_commands(p)], ids=relative)
def test_every_command_of_the_page_is_accepted_by_its_tool(page):
    """The commands run as written: each tool accepts their options (the README's main job itself runs in CI)."""
    for command in shell_commands(page):
        tool, *argv = shlex.split(command)
        try:
            parser_of(tool)(argv)
        except SystemExit as exc:  # argparse exits on an unknown or malformed option
            raise AssertionError(f"{relative(page)}: {command!r} is refused by {tool}") from exc


def test_the_readme_gives_the_main_job_where_ci_reads_it():
    """.ci/run evals the first README line matching ``lite-benchmark zoo:resnet18[^`]*$``."""
    assert "lite-benchmark zoo:resnet18 --compare onnxruntime" in shell_commands(README)
    found = [m.group(0) for line in README.read_text().splitlines()
             if (m := re.search(r"lite-benchmark zoo:resnet18[^`]*$", line))]
    assert found and found[0] == "lite-benchmark zoo:resnet18 --compare onnxruntime"


@pytest.mark.parametrize("tool", ["lite-convert", "lite-benchmark", "lite-inspect", "lite-tune"])
def test_the_tools_page_shows_each_tools_current_help(tool, monkeypatch):
    monkeypatch.setenv("COLUMNS", HELP_COLUMNS)
    page = ROOT / "docs" / "tools.md"
    lines = page.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if (m := HELP.fullmatch(line.strip())) and m.group(1) == tool)
    shown = next(b.code for b in blocks(page) if b.line > at + 1 and b.language == "text")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        parser_of(tool)(["--help"])
    assert shown == printed.getvalue(), (f"docs/tools.md shows an old --help of {tool}: paste the output of "
                                         f"COLUMNS={HELP_COLUMNS} {tool} --help")


# ---- links and facts ---------------------------------------------------------------------------------------


def prose(page: Path) -> list[str]:
    """The lines of ``page`` outside its fenced blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in prose(page) if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(prose(page))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{relative(page)} links to {broken}"


def test_every_delite_environment_variable_is_documented():
    used = {name for folder in ("lite", "delegates", "tools", "schema", "tests")
            for path in (ROOT / folder).rglob("*.py")
            for name in re.findall(r"\bDELITE_[A-Z0-9_]+", path.read_text())}
    documented = set(re.findall(r"`(DELITE_[A-Z0-9_]+)`", (ROOT / "docs" / "env_vars.md").read_text()))
    assert used, "found no DELITE_ variable in the sources"
    assert not used - documented, f"docs/env_vars.md lacks {sorted(used - documented)}"
    assert not documented - used, f"docs/env_vars.md documents variables no code reads: {sorted(documented - used)}"


def test_the_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 200
