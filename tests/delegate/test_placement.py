"""Measured placement (``Context(placement="measured")``) with delegates whose speed the test controls.

Native kernels are slowed per node by a fixture (``slow_native``); the test delegates' graph
kernels compute the covered nodes and wait a set time per node. So which side is faster is
known in advance, by milliseconds, far above the timing noise.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegate.placement import (
    MAX_CACHE_BYTES,
    Candidate,
    DecisionCache,
    placement_cache_directory,
)
from lite.scheduler import contiguous_order
from lite.tools.converter import convert
from tests.support.delegates import NativeGraphKernel, assert_matches_onnxruntime, build, chain_model
from tests.support.oracle import relative_l2, run_onnxruntime

MS = 1e-3


def plain_execute(kernel: lite.Kernel) -> None:
    """The kernel's own execute, without the fixture's delay."""
    method = type(kernel).execute
    getattr(method, "original", method)(kernel)


@pytest.fixture
def slow_native(monkeypatch):
    """Node name -> seconds its native kernel waits before computing; counts native executes too."""
    delays: dict[str, float] = {}
    runs: list[str] = []
    for cls in {type(k) for k in build(chain_model())._engine.kernels}:
        original = cls.execute

        def execute(self, original=original):
            runs.append(self.name)
            time.sleep(delays.get(self.name, 0.0))
            original(self)

        execute.original = original
        monkeypatch.setattr(cls, "execute", execute)
    delays["runs"] = runs
    return delays


class TimedKernel(NativeGraphKernel):
    """Computes its nodes with their own kernels, then waits the delegate's delay per node."""

    def __init__(self, kernels, inputs, outputs, events, name, delays):
        super().__init__(kernels, inputs, outputs, events, name)
        self.delays = delays

    def execute(self) -> None:
        self.events.append(("execute", self.name))
        for kernel in self.kernels:
            plain_execute(kernel)
            time.sleep(self.delays.get(kernel.name, 0.0))


class TimedDelegate(lite.SimpleDelegate):
    """Takes the nodes it is given; its graph kernels wait ``delays[node]`` seconds per node."""

    def __init__(self, nodes: set[str], delays: dict[str, float] | None = None, label: str = "timed"):
        self.nodes = sorted(nodes)
        self.delays = delays or {}
        self.label = label
        self.events: list = []  # NOTE: public and plain, so part of the fingerprint: tests build once per delegate

    def is_supported(self, kernel, primitive):
        return kernel.name in self.nodes or "not in this delegate's list"

    def create_graph_kernel(self, kernels, inputs, outputs, model):
        return TimedKernel(kernels, inputs, outputs, self.events, model.kernel_name(self.label), self.delays)


class FirstDelegate(TimedDelegate):
    pass


class SecondDelegate(TimedDelegate):
    pass


@pytest.fixture
def chain():
    """The test model (its constants are drawn anew on each call, so one per test)."""
    return chain_model()


ALL = {"add1", "relu", "mul", "sigmoid", "add2"}


def measured(onnx_model, *delegates, cache=None, budget=60.0, fallback=True):
    model = lite.Model()
    context = lite.Context(thread_num=1, delegates=list(delegates), placement="measured", placement_budget=budget,
                           placement_cache=cache, fallback=fallback)
    model.build(convert(onnx_model, fusion=False), lite.ModelType.LITE, context)
    return model


def proposed(model: lite.Model) -> list[lite.PlacementRow]:
    return [r for r in model.placement_report() if r.role == "proposed"]


def runs_on(model: lite.Model) -> dict[str, str]:
    return {row.node: row.runs_on for row in model.partition_report()}


def test_a_delegate_slower_than_native_is_refused(slow_native, chain):
    delegate = TimedDelegate(ALL, dict.fromkeys(ALL, 2 * MS))
    model = measured(chain, delegate)
    assert set(runs_on(model).values()) == {"native"}
    [row] = proposed(model)
    assert (row.decision, row.role, row.source) == ("refused", "proposed", "measured")
    assert row.seconds > row.native_seconds and row.reason == "slower than native"
    reasons = {r.node: r.reason for r in model.partition_report()}
    assert all("measured placement:" in reasons[n] and "refused (slower than native)" in reasons[n] for n in ALL)
    assert_matches_onnxruntime(model, chain)


def test_a_delegate_faster_than_native_runs_its_partition(slow_native, chain):
    slow_native.update(dict.fromkeys(ALL, 2 * MS))
    model = measured(chain, TimedDelegate(ALL))
    assert set(runs_on(model).values()) == {"TimedDelegate"}
    [row] = model.placement_report()
    assert row.decision == "chosen" and row.graph_kernel == "timed_0" and row.seconds < row.native_seconds
    assert "chosen" in {r.node: r.placement for r in model.partition_report()}["mul"]
    assert_matches_onnxruntime(model, chain)


def test_the_faster_of_two_overlapping_delegates_wins_over_priority(slow_native, chain):
    slow_native["mul"] = 4 * MS
    first = FirstDelegate({"relu", "mul"}, {"mul": 8 * MS, "relu": 1 * MS})
    second = SecondDelegate({"mul", "sigmoid"})
    by_priority = build(chain, FirstDelegate({"relu", "mul"}), SecondDelegate({"mul", "sigmoid"}))
    assert runs_on(by_priority)["mul"] == "FirstDelegate"
    model = measured(chain, first, second)
    placed = runs_on(model)
    assert (placed["mul"], placed["sigmoid"], placed["relu"]) == ("SecondDelegate", "SecondDelegate", "native")
    rows = {r.delegate: r for r in model.placement_report() if r.role == "proposed"}
    assert rows["FirstDelegate"].decision == "refused" and rows["SecondDelegate"].decision == "chosen"
    assert_matches_onnxruntime(model, chain)


def test_a_partition_slow_in_one_op_is_split_around_it(slow_native, chain):
    slow_native.update({"add1": 3 * MS, "relu": 3 * MS, "sigmoid": 3 * MS, "add2": 3 * MS})
    model = measured(chain, TimedDelegate(ALL, {"mul": 30 * MS}))
    chosen = sorted(r.nodes for r in model.placement_report() if r.decision == "chosen")
    assert chosen == [("add1", "relu"), ("sigmoid", "add2")]
    assert {r.role for r in model.placement_report() if r.decision == "chosen"} == {"split"}
    assert runs_on(model)["mul"] == "native"
    whole = next(r for r in model.placement_report() if r.role == "proposed")
    assert whole.decision == "refused" and len(whole.nodes) == 5
    assert_matches_onnxruntime(model, chain)


def test_the_second_build_times_nothing(slow_native, tmp_path, chain):
    slow_native.update(dict.fromkeys(ALL, 2 * MS))
    first = measured(chain, TimedDelegate(ALL), cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    slow_native["runs"].clear()
    delegate = TimedDelegate(ALL)
    second = measured(chain, delegate, cache=tmp_path)
    assert slow_native["runs"] == [] and ("execute", "timed_0") not in delegate.events
    assert [r.source for r in second.placement_report()] == ["cache"]
    assert runs_on(second) == runs_on(first)
    assert_matches_onnxruntime(second, chain)


def test_split_pieces_come_back_from_the_cache(slow_native, tmp_path, chain):
    slow_native.update({"add1": 3 * MS, "relu": 3 * MS, "sigmoid": 3 * MS, "add2": 3 * MS})
    measured(chain, TimedDelegate(ALL, {"mul": 30 * MS}), cache=tmp_path)
    slow_native["runs"].clear()
    delegate = TimedDelegate(ALL, {"mul": 30 * MS})
    again = measured(chain, delegate, cache=tmp_path)
    assert slow_native["runs"] == [] and not [e for e in delegate.events if e[0] == "execute"]
    chosen = sorted((r.nodes, r.role, r.source) for r in again.placement_report() if r.decision == "chosen")
    assert chosen == [(("add1", "relu"), "split", "cache"), (("sigmoid", "add2"), "split", "cache")]
    assert_matches_onnxruntime(again, chain)


def test_other_delegate_options_are_timed_again(slow_native, tmp_path, chain):
    measured(chain, TimedDelegate(ALL), cache=tmp_path)
    again = measured(chain, TimedDelegate(ALL, label="other"), cache=tmp_path)
    assert [r.source for r in proposed(again)] == ["measured"]
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 1, "candidates": {"0:add1": {"seconds": -1}}}),
                                     json.dumps([1, 2]), "x" * 100])
def test_a_broken_cache_file_is_timed_again(slow_native, tmp_path, content, chain):
    measured(chain, TimedDelegate(ALL), cache=tmp_path)
    [path] = tmp_path.glob("*.json")
    path.write_text(content)
    model = measured(chain, TimedDelegate(ALL), cache=tmp_path)
    assert [r.source for r in proposed(model)] == ["measured"]
    assert_matches_onnxruntime(model, chain)


def nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def rewrite_entries(path, change) -> None:
    """Rewrites the cache file at ``path`` after ``change(candidates)``; a value "NEST" becomes deep JSON."""
    data = json.loads(path.read_text())
    change(data["candidates"])
    path.write_text(json.dumps(data).replace('"NEST"', nest(100_000)))


def proposal(candidates: dict) -> dict:
    [entry] = [e for e in candidates.values() if e["role"] == "proposed"]
    return entry


@pytest.mark.parametrize("change", [
    lambda c: proposal(c).update(native_seconds=10 ** 400),  # float() of it overflows
    lambda c: proposal(c).update(seconds="NEST"),  # json.loads: RecursionError
    lambda c: proposal(c).update(reason=["not", "text"]),
    lambda c: proposal(c).update(role=3),
    lambda c: proposal(c).update(seconds=1e300),
], ids=["400-digit-int", "nested", "reason-list", "role-int", "seconds-out-of-range"])
def test_a_planted_entry_is_timed_again(slow_native, tmp_path, change, chain):
    measured(chain, TimedDelegate(ALL), cache=tmp_path)
    [path] = tmp_path.glob("*.json")
    rewrite_entries(path, change)
    model = measured(chain, TimedDelegate(ALL), cache=tmp_path)
    assert [r.source for r in proposed(model)] == ["measured"]
    assert_matches_onnxruntime(model, chain)


def test_a_key_with_non_ascii_digits_is_ignored(slow_native, tmp_path, chain):
    first = measured(chain, TimedDelegate(ALL), cache=tmp_path)
    [path] = tmp_path.glob("*.json")
    piece = {"seconds": 1e-6, "native_seconds": 1.0, "role": "probe", "reason": "", "failed": False}
    rewrite_entries(path, lambda c: c.update({"0:\u00b2": piece, "\u00b9:0": piece}))  # '²'.isdigit() is True
    model = measured(chain, TimedDelegate(ALL), cache=tmp_path)
    rows = model.placement_report()
    assert {r.source for r in rows} == {"cache"} and len(rows) == len(first.placement_report())


def cache_with(tmp_path, content: str | bytes) -> DecisionCache:
    cache = DecisionCache(tmp_path, "key")
    data = content.encode() if isinstance(content, str) else content
    cache.path.write_bytes(data)
    return cache


def timed(key: str = "0:0,1") -> Candidate:
    return Candidate(None, 0, [], seconds=1e-3, native_seconds=2e-3, key=key)


GOOD = {"seconds": 1e-3, "native_seconds": 2e-3, "role": "proposed", "reason": "", "failed": False}


@pytest.mark.parametrize("content", [
    '{"format": 1, "candidates": {"0:0": ' + nest(100_000) + "}}",
    json.dumps({"format": 1, "candidates": {"0:0": {**GOOD, "native_seconds": 10 ** 400}}}),
    json.dumps({"format": 1, "candidates": {"0:0": {**GOOD, "extra": 1}}}),
    json.dumps({"format": 1, "candidates": {"0:\u0660": GOOD, "0:1:2": GOOD, "0:": GOOD}}),
], ids=["nested", "400-digits", "extra-field", "bad-keys"])
def test_the_cache_loads_nothing_from_a_malformed_file(tmp_path, content):
    assert cache_with(tmp_path, content).load() == {}


def test_the_cache_keeps_the_valid_entries_beside_bad_ones(tmp_path):
    candidates = {"0:0": GOOD, "0:1": {**GOOD, "reason": 5}, "1:2": {**GOOD, "seconds": None, "failed": True}}
    loaded = cache_with(tmp_path, json.dumps({"format": 1, "candidates": candidates})).load()
    assert loaded == {"0:0": GOOD, "1:2": {**GOOD, "seconds": None, "failed": True}}


def test_the_cache_refuses_a_file_over_its_size_limit(tmp_path):
    valid = json.dumps({"format": 1, "candidates": {"0:0": GOOD}})
    cache = cache_with(tmp_path, valid.ljust(MAX_CACHE_BYTES + 1))  # valid JSON, then white space
    assert cache.load() == {}


def test_the_cache_never_writes_through_a_link_planted_at_its_temporary_name(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's file")
    folder = tmp_path / "cache"
    folder.mkdir()
    cache = DecisionCache(folder, "key")
    for pid in {os.getpid(), os.getppid()}:  # the names earlier versions wrote to
        (folder / f"key.{pid}.tmp").symlink_to(outside)
    cache.save([timed()])
    assert outside.read_text() == "the user's file"
    assert not cache.path.is_symlink() and cache.load() == {"0:0,1": {**GOOD, "seconds": 1e-3}}
    assert sorted(p.name for p in folder.iterdir() if not p.is_symlink()) == ["key.json"]


def test_a_link_planted_at_the_entry_is_not_read_and_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"format": 1, "candidates": {"0:0": GOOD}}))
    before = outside.read_text()
    folder = tmp_path / "cache"
    folder.mkdir()
    cache = DecisionCache(folder, "key")
    cache.path.symlink_to(outside)
    assert cache.load() == {}
    cache.save([timed()])
    assert outside.read_text() == before and not cache.path.is_symlink()
    assert list(cache.load()) == ["0:0,1"]


def test_a_fifo_at_the_entry_is_not_waited_on(tmp_path):
    cache = DecisionCache(tmp_path, "key")
    os.mkfifo(cache.path)
    loaded = []
    reader = threading.Thread(target=lambda: loaded.append(cache.load()), daemon=True)
    reader.start()
    reader.join(10)
    blocked = reader.is_alive()
    if blocked:  # NOTE: a blocking open waits for a writer: be one, so the thread ends
        os.close(os.open(cache.path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert not blocked and loaded == [{}]


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    cache = DecisionCache(tmp_path, "key")

    def refuse(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    cache.save([timed()])
    assert list(tmp_path.iterdir()) == []


def test_no_budget_times_nothing_and_runs_natively(slow_native, chain):
    slow_native.update(dict.fromkeys(ALL, 2 * MS))
    model = measured(chain, TimedDelegate(ALL), budget=0)
    [row] = proposed(model)
    assert row.decision == "not timed" and "budget" in row.reason and row.seconds is None
    assert set(runs_on(model).values()) == {"native"}


class Broken(TimedKernel):
    def prepare(self) -> None:
        self.events.append(("prepare", self.name))
        raise RuntimeError("device lost")


class BrokenDelegate(TimedDelegate):
    def create_graph_kernel(self, kernels, inputs, outputs, model):
        return Broken(kernels, inputs, outputs, self.events, model.kernel_name("broken"), {})


def test_a_graph_kernel_that_fails_loses_and_the_build_goes_on(slow_native, chain):
    model = measured(chain, BrokenDelegate(ALL))
    [row] = proposed(model)
    assert row.decision == "refused" and "RuntimeError: device lost" in row.reason
    assert_matches_onnxruntime(model, chain)
    with pytest.raises(lite.DelegateError, match="device lost"):
        measured(chain, BrokenDelegate(ALL), fallback=False)


def test_a_failure_is_cached_too(slow_native, chain, tmp_path):
    measured(chain, BrokenDelegate(ALL), cache=tmp_path)
    delegate = BrokenDelegate(ALL)
    again = measured(chain, delegate, cache=tmp_path)
    [row] = proposed(again)
    assert (row.decision, row.source) == ("refused", "cache") and "device lost" in row.reason
    assert delegate.events == []  # nothing prepared or run: the cache said it fails


def test_dynamic_shapes_keep_priority_order(slow_native, caplog, chain):
    dynamic = chain_model(dynamic_batch=True)
    with caplog.at_level(logging.WARNING, logger="lite"):
        model = measured(dynamic, TimedDelegate(ALL))
    assert "static input shapes" in caplog.text
    assert set(runs_on(model).values()) == {"TimedDelegate"} and model.placement_report() == []
    assert_matches_onnxruntime(model, dynamic, batch=3)


def test_priority_placement_reports_no_candidates(chain):
    model = build(chain, TimedDelegate(ALL))
    assert model.placement_report() == [] and {r.placement for r in model.partition_report()} == {""}


class Node:
    def __init__(self, name, inputs, outputs):
        self.name, self.inputs, self.outputs = name, inputs, outputs


def test_contiguous_order_keeps_each_group_together_or_says_none():
    # a -> b -> c and a -> c: {a, c} cannot be contiguous (b must sit between them); d is independent
    a, b = Node("a", ["x"], ["t1"]), Node("b", ["t1"], ["t2"])
    c, d = Node("c", ["t1", "t2"], ["t3"]), Node("d", ["x"], ["t4"])
    assert contiguous_order([a, b, c], [[a, c]]) is None
    assert contiguous_order([a, d, b, c], [[a, b]]) == [a, b, d, c]
    assert contiguous_order([a, d, b, c], [[a, b], [d, c]]) == [a, b, d, c]


def test_context_checks_the_placement_options():
    with pytest.raises(lite.InputError, match="placement must be one of priority, measured"):
        lite.Context(placement="fastest")
    for budget in (-1, float("nan"), float("inf"), True, "10"):
        with pytest.raises(lite.InputError, match="placement_budget"):
            lite.Context(placement_budget=budget)


def test_the_cache_folder_follows_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("DELITE_PLACEMENT_CACHE", str(tmp_path / "env"))
    assert placement_cache_directory("default") == tmp_path / "env"
    assert placement_cache_directory(tmp_path / "mine") == tmp_path / "mine"
    assert placement_cache_directory(None) is None and placement_cache_directory("off") is None
    monkeypatch.delenv("DELITE_PLACEMENT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert placement_cache_directory("default") == tmp_path / "xdg" / "delite" / "placement"


def test_fingerprint_names_the_class_and_its_plain_options():
    text = TimedDelegate({"mul"}, {"mul": 0.5}, label="x").fingerprint()
    assert "TimedDelegate" in text and '"label": "x"' in text and '"nodes": ["mul"]' in text
    assert '"delays": {"mul": 0.5}' in text
    assert TimedDelegate({"mul"}, {"mul": 0.25}, label="x").fingerprint() != text


def test_a_delegate_taking_a_fused_convolution_gets_it_without_the_fused_activation(monkeypatch):
    """The native run fuses Conv + HardSwish (lite.fusion); the delegate, faster, takes both, and
    runs the convolution's own kernel, which must not apply the activation a second time."""
    from lite.kernels.conv import Conv2DFusion

    original = Conv2DFusion.execute

    def slow(self):
        time.sleep(20 * MS)
        original(self)

    slow.original = original
    monkeypatch.setattr(Conv2DFusion, "execute", slow)
    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("HardSwish", ["c"], ["y"], name="hs")],
        "conv_hard_swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], weights)
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    model = measured(onnx_model, TimedDelegate({"conv", "hs"}))
    assert set(runs_on(model).values()) == {"TimedDelegate"}
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    assert relative_l2(got, run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-6
