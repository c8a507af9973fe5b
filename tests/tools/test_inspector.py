"""lite-inspect: the partition table and the picture."""

import onnx
import pytest

from lite.tools.converter import convert
from lite.tools.inspector import main
from tests.support.delegates import inception_block


@pytest.fixture(scope="module")
def inception_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect") / "inception.lite"
    convert(inception_block(), path)
    return path


def test_native_table(inception_file, capsys):
    assert main([str(inception_file)]) == 0
    out = capsys.readouterr().out
    assert "Conv2DFusion" in out and "MaxPoolFusion" in out
    assert "8 nodes: 0 delegated in 0 partition(s), 8 native" in out


def test_delegated_table_html_and_svg(inception_file, tmp_path, capsys):
    html, svg = tmp_path / "p.html", tmp_path / "p.svg"
    argv = [str(inception_file), "--delegate", "tests.support.delegates:ConvAndConcat",
            "--delegate-option", "label=acc", "--html", str(html), "--svg", str(svg)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "7 delegated in 1 partition(s), 1 native" in out
    assert "ConvAndConcat: MaxPoolFusion is not in" in out
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "acc_0" in page
    picture = svg.read_text()
    assert all(f'id="n_{k}"' in picture for k in range(8)) and 'id="n_8"' not in picture


def test_bad_delegate_and_bad_file_exit_1(inception_file, tmp_path, capsys):
    assert main([str(inception_file), "--delegate", "no_such"]) == 1
    assert "unknown delegate" in capsys.readouterr().err
    bad = tmp_path / "bad.lite"
    bad.write_bytes(b"garbage!" * 4)
    assert main([str(bad)]) == 1
    assert "not a Delite .lite model" in capsys.readouterr().err


def test_help_shows_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "lite-inspect model.onnx --delegate" in capsys.readouterr().out


def test_a_declining_delegate_is_named_and_can_fail_the_command(inception_file, capsys):
    argv = [str(inception_file), "--delegate", "tests.support.delegates:AbsentDevice"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "AbsentDevice declined: no accelerator on this machine" in out
    assert "AbsentDevice: declined in init(): no accelerator on this machine" in out  # the reason column
    assert main([*argv, "--require-delegate"]) == 3
    assert "AbsentDevice ran no node" in capsys.readouterr().err
    assert main([str(inception_file), "--delegate", "tests.support.delegates:ConvAndConcat", "--require-delegate"]) == 0


def test_long_names_keep_both_ends_and_written_files_are_named(inception_file, tmp_path, capsys):
    from lite.tools.inspector import clipped

    name = "/features/features.17/body/body.2/body.2.0/Conv_with_a_long_tail"
    assert clipped(name) == name[:18] + "..." + name[-19:] and len(clipped(name)) == 40
    assert clipped("short") == "short"
    html, svg = tmp_path / "p.html", tmp_path / "p.svg"
    assert main([str(inception_file), "--html", str(html), "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {html}" in out and f"wrote {svg}" in out


def test_annotated_onnx_says_where_each_node_runs(inception_file, tmp_path, capsys):
    path = tmp_path / "placed.onnx"
    argv = [str(inception_file), "--delegate", "tests.support.delegates:ConvAndConcat", "--annotated-onnx", str(path)]
    assert main(argv) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    nodes = onnx.load(str(path)).graph.node
    pool = next(n for n in nodes if n.op_type == "MaxPool")
    assert pool.doc_string.startswith("native: ConvAndConcat: MaxPoolFusion is not in")
    assert sum(n.doc_string == "runs on ConvAndConcat in npu_0" for n in nodes) == 7


def test_a_zoo_model_is_inspected_by_name(capsys):
    assert main(["zoo:inception_block", "--delegate", "tests.support.delegates:ConvAndConcat"]) == 0
    assert "8 nodes: 7 delegated in 1 partition(s), 1 native" in capsys.readouterr().out
    assert main(["zoo:no_such_model"]) == 1
    assert "unknown zoo model 'no_such_model'" in capsys.readouterr().err


def test_measured_placement_in_the_table_and_the_page(inception_file, tmp_path, capsys):
    html = tmp_path / "p.html"
    assert main([str(inception_file), "--delegate", "example_npu", "--placement", "measured",
                 "--placement-cache", "off", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    table = out.split("measured placement:\n")[1]
    assert table.splitlines()[0].split() == ["delegate", "role", "nodes", "first", "..", "last", "node", "delegate",
                                             "ms", "native", "ms", "decision"]
    assert "ExampleNPUDelegate  proposed" in table
    page = html.read_text()
    assert "measured placement" in page and " against native " in page


def test_saved_partitions_are_listed_with_what_the_build_did(tmp_path, capsys):
    import lite
    from lite.delegates.example_npu import ExampleNPUDelegate
    from lite.model import compile_into

    path = tmp_path / "saved.lite"
    path.write_bytes(compile_into(convert(inception_block()), lite.Context(delegates=[ExampleNPUDelegate()]))[0])
    assert main([str(path), "--delegate", "example_npu"]) == 0
    out = capsys.readouterr().out
    assert "saved partition  delegate" in out and "loaded: ExampleNPUDelegate example_npu_0" in out
    assert "saved partitions cover 8 nodes, 8 loaded" in out
    assert "built for:\n  ExampleNPUDelegate: example-npu/fp16-nhwc/1" in out
    assert main([str(path)]) == 0
    assert "not used: no ExampleNPUDelegate in the Context" in capsys.readouterr().out


HOSTILE = "\x1b[2J\nfake line"  # clears the screen, then starts a line of its own


def hostile_file(path):
    """A .lite file with a saved partition whose node, tensor, partition, delegate and target names carry HOSTILE."""
    import dataclasses

    import lite
    from lite.delegates.example_npu import ExampleNPUDelegate
    from lite.model import compile_into
    from lite.schema.reader import read_model
    from lite.schema.writer import write_model
    from lite.tools import zoo

    graph = read_model(compile_into(convert(zoo.inception_block()), lite.Context(delegates=[ExampleNPUDelegate()]))[0])
    graph.nodes[0].name += HOSTILE
    graph.tensors[graph.nodes[0].outputs[0]].name += HOSTILE
    graph.partitions = [dataclasses.replace(p, delegate=p.delegate + HOSTILE, target=p.target + HOSTILE,
                                            name=p.name + HOSTILE) for p in graph.partitions]
    path.write_bytes(write_model(graph))
    return path


def test_names_read_from_the_file_print_as_escapes(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    path = hostile_file(tmp_path / "hostile.lite")
    html, svg = tmp_path / "p.html", tmp_path / "p.svg"
    for argv in ([str(path), "--html", str(html), "--svg", str(svg)], [str(path), "--delegate", "example_npu"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and not any(line.startswith("fake line") for line in out.splitlines())
        assert "\\x1b[2J\\nfake line" in out
        assert "saved partition" in out and "built for:\n  ExampleNPUDelegate\\x1b[2J\\nfake line: " in out
    for page in (html.read_text(), svg.read_text()):
        assert "\x1b" not in page and "\\x1b[2J\\nfake line" in page
    ET.fromstring(svg.read_text())  # XML allows no control characters: the SVG stays well-formed


def test_printable_escapes_only_what_a_terminal_would_act_on():
    from lite.tools import printable, printable_lines

    assert printable("conv_1/Relu:0 Ünïcødé 卷积 😀") == "conv_1/Relu:0 Ünïcødé 卷积 😀"
    assert printable("a\x1b[2Jb\tc\rd\x00e\u202ef") == "a\\x1b[2Jb\\tc\\rd\\x00e\\u202ef"
    assert printable_lines("two\nlines\x07") == "two\nlines\\x07"


def test_the_model_may_be_given_as_an_option_as_in_lite_benchmark(capsys):
    from lite.tools.inspector import parse_args

    assert parse_args(["--model", "zoo:inception_block"]).model == "zoo:inception_block"
    with pytest.raises(SystemExit):
        parse_args(["zoo:inception_block", "--model", "zoo:resnet18"])
    assert "give the model once" in capsys.readouterr().err
