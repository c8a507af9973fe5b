import argparse

import onnx
import pytest

from lite.schema.reader import read_model
from lite.tools import zoo
from lite.tools.converter.cli import main, parse_input_shapes
from tests.support.converter import three_unsupported_model


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "old.onnx"
    onnx.save(zoo.old_style_opset9(), path)
    return path


def test_convert_prints_summary_and_writes_file(model_path, tmp_path, capsys):
    output = tmp_path / "out.lite"
    assert main([str(model_path), "-o", str(output)]) == 0
    out = capsys.readouterr().out
    assert "ONNX nodes: 20 (opset 9) -> lite nodes: 11" in out
    assert "constant-folded nodes:      7" in out and "activations fused:          2" in out
    assert f"wrote {output} ({output.stat().st_size:,} bytes)" in out
    assert len(read_model(output.read_bytes()).nodes) == 11


def test_default_output_path_and_no_fusion(model_path, capsys):
    assert main([str(model_path), "--no-fusion"]) == 0
    graph = read_model(model_path.with_suffix(".lite").read_bytes())
    assert sum(n.op_type == "Activation" for n in graph.nodes) == 2
    assert "activations fused:          0" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--input-shapes", "--input-shape"])  # the other tools' name, and the old one
def test_input_shapes_option(tmp_path, capsys, option):
    path = tmp_path / "resnet.onnx"
    onnx.save(zoo.inception_block(dynamic_batch=True), path)
    assert main([str(path), option, "input:4,192,28,28", "-o", str(tmp_path / "r.lite")]) == 0
    graph = read_model((tmp_path / "r.lite").read_bytes())
    assert graph.tensors[graph.inputs[0]].shape == (4, 192, 28, 28)


def test_parse_input_shapes():
    assert parse_input_shapes(["a:1,3", "onnx::x:2;b:-1,4"]) == {"a": [1, 3], "onnx::x": [2], "b": [-1, 4]}
    assert parse_input_shapes(["scalar:"]) == {"scalar": []}
    for bad in ["nocolon", ":1,2", "a:1,x"]:
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME:D1,D2"):
            parse_input_shapes([bad])


def test_bad_input_shape_is_a_usage_error(model_path, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(model_path), "--input-shape", "data=1,3"])
    assert info.value.code == 2 and "bad --input-shape" in capsys.readouterr().err


def test_unknown_input_name_is_reported(model_path, capsys):
    assert main([str(model_path), "--input-shape", "image:1,3,32,32"]) == 1
    assert "'image'" in capsys.readouterr().err


def test_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "examples:" in out and "lite-convert resnet18.onnx -o resnet18.lite" in out


def test_unsupported_model_exits_1_with_message(tmp_path, capsys):
    path = tmp_path / "bad.onnx"
    onnx.save(three_unsupported_model(), path)
    assert main([str(path), "-o", str(tmp_path / "bad.lite")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite-convert: error: 3 unsupported op(s)") and "Det" in err
    assert not (tmp_path / "bad.lite").exists()


def test_missing_model_exits_1(tmp_path, capsys):
    assert main([str(tmp_path / "missing.onnx")]) == 1
    assert "cannot read ONNX model" in capsys.readouterr().err


def test_big_models_say_each_stage_on_stderr(model_path, tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "m.lite")
    assert main([str(model_path), "-o", out]) == 0
    assert capsys.readouterr().err == ""  # a small model converts in well under a second: no stages
    monkeypatch.setattr("lite.tools.converter.cli.PROGRESS_BYTES", 1)
    assert main([str(model_path), "-o", out]) == 0
    stages = capsys.readouterr().err.splitlines()
    assert len(stages) == 6 and all(line.startswith("lite-convert: ") for line in stages)
    assert "reading the ONNX model" in stages[0] and f"writing {out}" in stages[-1]
    assert main([str(model_path), "-o", out, "--progress", "off"]) == 0
    assert capsys.readouterr().err == ""


def test_delegate_option_saves_compiled_partitions(tmp_path, capsys):
    source, output = tmp_path / "inception.onnx", tmp_path / "inception.lite"
    onnx.save(zoo.inception_block(), source)
    assert main([str(source), "-o", str(output), "--delegate", "example_npu"]) == 0
    out = capsys.readouterr().out
    assert "saved ExampleNPUDelegate example_npu_0: 7 nodes, 0.3 MB" in out
    (partition,) = read_model(output.read_bytes()).partitions
    assert partition.delegate == "ExampleNPUDelegate" and len(partition.nodes) == 7


def test_a_delegate_that_takes_nothing_is_noted_and_a_declining_one_fails(tmp_path, monkeypatch, capsys):
    model_path, output = tmp_path / "encoder.onnx", tmp_path / "out.lite"
    onnx.save(zoo.bert_encoder(seq_len=8, layers=1, width=32, heads=2, feed_forward=64), model_path)  # no 4-D image
    assert main([str(model_path), "-o", str(output), "--delegate", "example_npu"]) == 0
    assert "note: example_npu saved no partition (no node runs on them, see lite-inspect)" in capsys.readouterr().out
    monkeypatch.setenv("DELITE_EXAMPLE_NPU", "off")
    assert main([str(model_path), "-o", str(output), "--delegate", "example_npu"]) == 1
    assert "the example NPU is switched off" in capsys.readouterr().err
