"""The bundled delegates by name (lite.delegates): which ones this machine can run."""

from __future__ import annotations

import importlib.util

import lite
from lite import delegates


def test_available_delegates_are_the_bundled_ones_that_accept_this_machine():
    names = lite.available_delegates()
    assert "example_npu" in names and set(names) <= set(delegates.BUNDLED)
    assert ("ort" in names) == (importlib.util.find_spec("onnxruntime") is not None)
    assert ("tvm" in names) == (importlib.util.find_spec("tvm") is not None)


def test_a_delegate_that_declines_or_cannot_load_is_left_out(monkeypatch):
    monkeypatch.setitem(delegates.BUNDLED, "absent", "tests.delegate_support:AbsentDevice")
    monkeypatch.setitem(delegates.BUNDLED, "broken", "no_such_package:Delegate")
    names = lite.available_delegates()
    assert "absent" not in names and "broken" not in names and "example_npu" in names
