"""Fuzzing files with delegate partitions saved in them (lite-convert --delegate).

Bases: a small CNN with the example NPU's and ONNX Runtime's partitions saved (float16 weights, an
ONNX graph), and the same CNN with TVM's compiled library saved. Each case changes one thing and
writes the file back well-formed: blob bytes (with the recorded sha256 kept, so the runtime's check
refuses it, or recomputed, so the delegate's own parsing is what stands in the way), the target
description, the delegate's name, the covered nodes, the boundary tensors, or drops or reorders
partitions (a blob's header or a target is sometimes JSON nested up to 100,000 deep). Every case
must build and predict, or raise a ``lite.LiteError``; the test runs the cases in a child process, so
a crash fails the test with its seed.

TVM's library is native code: a changed library with a recomputed sha256 is only offered to a
``TVMDelegate`` that does not trust saved code (loading one is running it). The child runs with
``import tvm`` failing: the TVM runtime alone, as on a device, and no compilation per case.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.blob import MAGIC
from lite.schema.graph import PartitionDef
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tools.converter import convert
from tests.support.fuzz import assert_shares, in_child, mutate_bytes, run_case, small_cnn

CASES_DEFAULT = 600
TVM_BASE_ENV = "DELITE_FUZZ_TVM_BASE"  # the TVM base file, written by the parent test (the child cannot compile)
SHAPE = (2, 3, 8, 8)
KINDS = ("blob bytes", "blob bytes, new digest", "target", "delegate", "nodes", "boundary", "drop", "reorder")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def plain_cnn() -> bytes:
    return convert(small_cnn(), input_shapes={"x": list(SHAPE)})


@functools.cache
def npu_ort_base() -> bytes:
    from lite.delegates.example_npu import ExampleNPUDelegate
    from lite.delegates.onnxruntime import ORTDelegate
    from lite.model import compile_into

    data, partitions, _ = compile_into(plain_cnn(), lite.Context(delegates=[ExampleNPUDelegate(), ORTDelegate()]))
    assert {p.delegate for p in partitions} == {"ExampleNPUDelegate", "ORTDelegate"}, partitions
    return data


def tvm_base() -> bytes:
    from lite.delegates.tvm import TVMDelegate
    from lite.model import compile_into

    data, partitions, _ = compile_into(plain_cnn(), lite.Context(delegates=[TVMDelegate(cache_dir=None)]))
    assert [p.delegate for p in partitions] == ["TVMDelegate"]
    return data


def mutated(data: bytes, kind: str, rng: np.random.Generator) -> bytes:
    graph = read_model(data)
    parts = graph.partitions
    at = int(rng.integers(len(parts)))
    part = parts[at]
    if kind.startswith("blob bytes"):
        how = str(rng.choice(["truncate", "bit_flips", "overwrite_8", "insert", "nested header"]))
        blob = nested_header(rng) if how == "nested header" else mutate_bytes(bytes(part.blob), how, rng)
        digest = hashlib.sha256(blob).hexdigest() if kind.endswith("new digest") else part.digest
        parts[at] = dataclasses.replace(part, blob=blob, digest=digest)
    elif kind == "target":
        parts[at] = dataclasses.replace(part, target=_changed_target(part.target, rng))
    elif kind == "delegate":
        parts[at] = dataclasses.replace(part, delegate=str(rng.choice([p.delegate for p in parts] + ["Other", "x"])))
    elif kind == "nodes":
        nodes = rng.permutation(len(graph.nodes))[:int(rng.integers(1, len(graph.nodes) + 1))]
        parts[at] = dataclasses.replace(part, nodes=[int(n) for n in nodes])
    elif kind == "boundary":
        field = str(rng.choice(["inputs", "outputs"]))
        values = [int(v) for v in rng.integers(0, len(graph.tensors), int(rng.integers(1, 4)))]
        parts[at] = dataclasses.replace(part, **{field: values})
    elif kind == "drop":
        del parts[at]
    else:
        parts.reverse()
        parts.append(dataclasses.replace(parts[0], name=parts[0].name + "_again"))
    return write_model(graph)


def deeply_nested(rng: np.random.Generator) -> str:
    """JSON nested 100 to 100,000 deep (json.loads raises RecursionError past about 1,000)."""
    depth = int(rng.choice([100, 5_000, 100_000]))
    return "[" * depth + "]" * depth


def nested_header(rng: np.random.Generator) -> bytes:
    """A blob whose header is ``deeply_nested`` JSON (and no arrays)."""
    text = deeply_nested(rng).encode()
    head = MAGIC + struct.pack("<Q", len(text)) + text
    return head + bytes(-len(head) % 64)


def _changed_target(target: str, rng: np.random.Generator) -> str:
    if rng.random() < 0.1:
        return deeply_nested(rng)
    try:
        description = json.loads(target)
    except ValueError:
        return target + "x"
    if not isinstance(description, dict) or not description:
        return "{}"
    key = str(rng.choice(sorted(description)))
    description[key] = [None, 0, "x", {"kind": "llvm"}, []][int(rng.integers(5))]
    return json.dumps(description)


def delegates(base: str, kind: str) -> list[lite.Delegate]:
    if base == "tvm":
        from lite.delegates.tvm import TVMDelegate

        return [TVMDelegate(cache_dir=None, trust_saved_code=kind != "blob bytes, new digest")]
    from lite.delegates.example_npu import ExampleNPUDelegate
    from lite.delegates.onnxruntime import ORTDelegate

    return [ExampleNPUDelegate(), ORTDelegate()]


def blob_case(seed: int) -> str:
    """One mutated file, built with the delegates whose partitions it holds, then one predict."""
    rng = np.random.default_rng(seed)
    base = "tvm" if seed % 3 == 2 and os.environ.get(TVM_BASE_ENV) else "npu+ort"
    data = Path(os.environ[TVM_BASE_ENV]).read_bytes() if base == "tvm" else npu_ort_base()
    kind = KINDS[seed % len(KINDS)]
    try:
        data = mutated(data, kind, rng)
    except ValueError:
        return "not writable"
    context = lite.Context(delegates=delegates(base, kind))
    blobs = []
    outcome = run_case(lambda model: model.build(data, lite.ModelType.LITE, context), SHAPE, seed,
                       f"blob_case({seed}) [{base}: {kind}]",
                       lambda model, _: blobs.extend(r.blob for r in model.partition_report() if r.blob))
    return outcome if outcome != "built+predicted" else f"{outcome}, {use_of_saved_partitions(blobs)}"


def use_of_saved_partitions(blobs: list[str]) -> str:
    """What became of the saved partitions, from the partition report's ``blob`` column: "a blob refused to
    load" (the delegate's own parsing raised a LiteError), "a saved partition not used" (a digest, target,
    delegate or boundary that does not match), or "loaded"."""
    if any(b.startswith("not used: the blob failed to load") for b in blobs):
        return "a blob refused to load"
    return "a saved partition not used" if any(not b.startswith("loaded") for b in blobs) else "loaded"


def test_unmutated_bases_load_every_partition(tmp_path):
    for base, data in [("npu+ort", npu_ort_base()), *([("tvm", tvm_base())] if _has_tvm() else [])]:
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(delegates=delegates(base, "")))
        assert all(r.blob.startswith("loaded") for r in model.partition_report() if r.blob)
        assert len(read_model(data).partitions) == len({r.graph_kernel for r in model.partition_report()
                                                        if r.blob.startswith("loaded")})


# The least share of each outcome over the default run, about half of what it was when set (with TVM's base,
# and without: 20.9% and 19.4% of the cases loaded every saved partition, 7.2% and 10.8% had a blob that the
# delegate's own parsing refused, 71.9% and 69.8% a partition not used for a digest, target, delegate or boundary
# that does not match; no case raised, as a refused partition runs natively; over the first 600 seeds with TVM's
# base: 21.5%, 7.0%, 71.5%): mutations that no longer reach a
# delegate's parsing, or that leave every file loadable, fail the test.
FLOORS = {"built+predicted, loaded": 0.1, "built+predicted, a blob refused to load": 0.035,
          "built+predicted, a saved partition not used": 0.35}


def test_mutations_of_saved_partitions_work_or_raise_lite_errors(tmp_path):
    env = {}
    if _has_tvm():
        path = tmp_path / "tvm_base.lite"
        path.write_bytes(tvm_base())
        env[TVM_BASE_ENV] = str(path)
    outcomes = in_child(0, CASES_DEFAULT, "blob_case", module=__name__, env=env,
                        prelude='import sys; sys.modules["tvm"] = None')
    assert_shares(outcomes, FLOORS, "blob_case")


def test_mutated_partitions_are_well_formed_files():
    rng = np.random.default_rng(0)
    for kind in KINDS:
        graph = read_model(mutated(npu_ort_base(), kind, rng))
        assert all(isinstance(p, PartitionDef) for p in graph.partitions)


def _has_tvm() -> bool:
    try:
        import tvm  # noqa: F401
    except ImportError:
        return False
    return "tvm" in sys.modules
