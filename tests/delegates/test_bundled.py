"""The bundled delegates by name (lite.delegates): which ones this machine can run."""

from __future__ import annotations

import importlib.util

import pytest

import lite
from lite import delegates
from lite.arguments import boolean_parameters


def test_available_delegates_are_the_bundled_ones_that_accept_this_machine():
    names = lite.available_delegates()
    assert "example_npu" in names and set(names) <= set(delegates.BUNDLED)
    assert ("ort" in names) == (importlib.util.find_spec("onnxruntime") is not None)
    assert ("tvm" in names) == (importlib.util.find_spec("tvm") is not None)


def test_a_delegate_that_declines_or_cannot_load_is_left_out(monkeypatch):
    monkeypatch.setitem(delegates.BUNDLED, "absent", "tests.support.delegates:AbsentDevice")
    monkeypatch.setitem(delegates.BUNDLED, "broken", "no_such_package:Delegate")
    names = lite.available_delegates()
    assert "absent" not in names and "broken" not in names and "example_npu" in names


TRUE_SPELLINGS = ["true", "True", "TRUE", "1", "yes", "Yes", "on", "ON"]
FALSE_SPELLINGS = ["false", "False", "0", "no", "NO", "off", "Off"]


@pytest.mark.parametrize("text", TRUE_SPELLINGS + FALSE_SPELLINGS)
def test_command_line_booleans_are_read_strictly(text):
    delegate = delegates.load_delegate("tvm", delegates.parse_options([f"trust_saved_code={text}", "cache_dir=off"]))
    assert delegate.trust_saved_code is (text in TRUE_SPELLINGS)


@pytest.mark.parametrize("text", ["maybe", "2", "", "nein", "1.0", "none"])
def test_a_boolean_option_of_another_spelling_is_an_input_error_naming_it(text):
    with pytest.raises(lite.InputError, match=r"delegate 'tvm' option 'trust_saved_code' is a boolean"):
        delegates.load_delegate("tvm", delegates.parse_options([f"trust_saved_code={text}"]))


def test_every_boolean_option_of_the_bundled_delegates_is_read_strictly():
    flags = {name: boolean_parameters(delegates.load_delegate(name).__class__) for name in delegates.BUNDLED}
    assert flags["tvm"] == {"trust_saved_code", "symbolic_batch"}
    for name, options in flags.items():
        for option in options:
            assert getattr(delegates.load_delegate(name, {option: "off"}), option) is False
            with pytest.raises(lite.InputError, match=f"option '{option}' is a boolean"):
                delegates.load_delegate(name, {option: "nope"})
