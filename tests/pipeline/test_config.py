"""PipelineConfig: wiring errors name the connection, incomplete wiring, the stage list, the printed wiring."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.pipeline import TensorSpec
from tests.support.pipeline import add_model, chain, relu_model


@pytest.mark.parametrize(("second", "source", "target", "message"), [
    ("add", "x", (2, "x"), r"no stage 2; stages are 0..1"),
    ("add", "x", (0, "nope"), r"stage 0 has no input 'nope'; its inputs are \['x'\]"),
    ("add", (0, "nope"), (1, "h"), r"stage 0 has no output 'nope'"),
    ("add", (1, "y"), (0, "x"), r"stage 0 does not run after stage 1 \(this edge would make a cycle\)"),
    ("add", (0, "h"), (0, "x"), r"would make a cycle"),
    ("add", "x", "y", r"cannot feed a pipeline output directly"),
    ("add", ("x", 0), (0, "x"), r"an endpoint is a pipeline name"),
    ("add5", (0, "h"), (1, "h"), r"shape \[1, 4\] cannot feed shape \[1, 5\]"),
    ("add64", (0, "h"), (1, "h"), r"dtype float32 cannot feed dtype float64"),
])
def test_wiring_errors_name_the_connection(stages, second, source, target, message):
    config = lite.PipelineConfig([stages["relu"], stages[second]])
    with pytest.raises(lite.InputError, match=message) as error:
        config.connect(source, target)
    assert str(error.value).startswith(f"connect({source!r}, {target!r}): ")


def test_a_target_is_fed_once(stages):
    config = lite.PipelineConfig([stages["relu"], stages["add"]]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"connect\('z', \(0, 'x'\)\): stage 0 'x' is already fed by "
                                              r"pipeline 'x'"):
        config.connect("z", (0, "x"))
    config.connect((0, "h"), (1, "h")).connect((1, "y"), "y")
    with pytest.raises(lite.InputError, match=r"connect\(\(0, 'h'\), 'y'\): pipeline 'y' is already fed by "):
        config.connect((0, "h"), "y")


def test_a_pipeline_input_takes_the_spec_of_its_first_target(stages):
    config = lite.PipelineConfig([relu_model(), add_model((1, 5), inp="x")]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"connect\('x', \(1, 'x'\)\): shape \[1, 4\] cannot feed"):
        config.connect("x", (1, "x"))



def test_input_specs_are_those_of_the_first_targets(stages):
    config = chain(stages["relu"], stages["add"])
    assert config.input_specs == {"x": TensorSpec(np.dtype(np.float32), (1, 4))}


def test_incomplete_wiring_fails_at_build(stages):
    config = lite.PipelineConfig([stages["relu"], stages["add"]]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"stage inputs \[\(1, 'h'\)\] are fed by nothing"):
        lite.PipelineExecutor(config)
    config.connect((0, "h"), (1, "h"))
    with pytest.raises(lite.InputError, match="the pipeline has no outputs"):
        lite.PipelineExecutor(config)


def test_stage_list_errors(stages):
    with pytest.raises(lite.InputError, match="at least one stage"):
        lite.PipelineConfig([])
    with pytest.raises(lite.InputError, match="the same Model appears twice"):
        lite.PipelineConfig([stages["relu"], stages["relu"]])
    with pytest.raises(lite.InputError, match="not built"):
        lite.PipelineConfig([lite.Model()])


def test_str_prints_the_wiring(stages):
    text = str(chain(stages["relu"], stages["add"]))
    assert text.splitlines() == [
        "PipelineConfig: 2 stage(s)",
        "  input  'x': float32[1, 4]",
        "  output 'y': float32[1, 4]",
        "  stage 0: inputs ['x'] -> outputs ['h']",
        "  stage 1: inputs ['h'] -> outputs ['y']",
        "  pipeline 'x' -> stage 0 'x'",
        "  stage 0 'h' -> stage 1 'h'",
        "  stage 1 'y' -> pipeline 'y'",
    ]
