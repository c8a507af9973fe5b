"""Fuzzing the .lite reader and runtime with seeded mutations of valid files.

Byte mutations: a valid .lite file (a small CNN or the inception block) is truncated, has
bits flipped, an 8-byte run overwritten, bytes inserted, or is replaced by random bytes.
Three quarters of the positions hit the file's structure (every byte not inside a constant
tensor's data), the rest anywhere. Structured mutations: the GraphDef of an e2e op case
(``tests.e2e.test_ops.CASES``) gets a changed attribute, dim, dtype, tensor index, graph
input/output list or small constant, and is written back as a well-formed file, so the
runtime's own checks (not the flatbuffers reader's) are what stands in the way.

Every case builds the bytes and, when they build, predicts on a valid random input for the
inputs the mutated model declares. It must either work or raise a ``lite.LiteError``; any
other exception, or a case running past ``CASE_SECONDS`` (interrupted by a timer), fails
with the seed that reproduces it::

    kind, data = mutation("cnn", seed)          # or: structured_mutation(seed)
    lite.Model().build(data, lite.ModelType.LITE, lite.Context())
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import math
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.schema.graph import DTYPES, GraphDef, NodeDef, TensorDef
from lite.schema.primitives import ENUM_FIELDS, enum_names
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tools import zoo
from lite.tools.converter import convert
from tests.oracle import single_node_model

CASES_DEFAULT = 2000  # of each family, byte and structured
CASES_SLOW = 20000
CHUNK = 250
CHILD_ADDRESS_SPACE = 8 << 30  # virtual memory of a fuzzing child (numpy and BLAS reserve some)
REPO = Path(__file__).resolve().parents[2]
CASE_SECONDS = 5.0
MAX_INPUT_ELEMENTS = 1 << 20
KINDS = ("truncate", "bit_flips", "overwrite_8", "insert", "random_bytes")
SPECIAL_RUNS = (b"\xff" * 8, b"\x00" * 8, b"\xff\xff\xff\x7f\x00\x00\x00\x00", b"\x00\x00\x00\x80\xff\xff\xff\xff",
                b"\x01\x00\x00\x00\x00\x00\x00\x00", b"\xff\xff\xff\xff\xff\xff\xff\x7f")
INTS = (-3, -2, -1, 0, 1, 2, 3, 5, 64, 2**31, 2**62, -(2**62))
FLOATS = (0.0, -1.0, math.nan, math.inf, -math.inf, 1e30, 1e-30)


# mutated models compute nonsense (sqrt of a negative variance, 0/0): numpy's warnings are expected
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


class CaseTimeout(BaseException):
    """Raised by the case timer; a BaseException so no ``except Exception`` in the library swallows it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupts the block with CaseTimeout after ``seconds`` (SIGALRM: main thread, POSIX)."""

    def expire(signum, frame):
        raise CaseTimeout(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---- bases -----------------------------------------------------------------------------------


def small_cnn():
    """Conv -> Relu -> MaxPool -> Add(bias) -> Flatten -> Gemm -> Softmax, dynamic batch."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)), "b": rng.standard_normal(4), "fc": rng.standard_normal((5, 64)),
             "shift": rng.standard_normal((1, 4, 1, 1))}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["p", "shift"], ["a"], name="add"),
        helper.make_node("Flatten", ["a"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["g"], name="gemm", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax"),
    ]
    graph = helper.make_graph(nodes, "fuzz_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


BASES = {"cnn": lambda: (small_cnn(), (2, 3, 8, 8)),
         "inception": lambda: (zoo.inception_block(image_size=8, dynamic_batch=True), (1, 192, 8, 8))}


@functools.cache
def base(name: str) -> tuple[bytes, np.ndarray, tuple[int, ...]]:
    """The valid .lite bytes, the positions of structural bytes (not constant data), the input shape."""
    onnx_model, shape = BASES[name]()
    data = convert(onnx_model)
    weights = np.zeros(len(data), dtype=bool)
    for tensor in read_model(data).tensors:
        if tensor.data is not None and tensor.data.nbytes >= 16:
            start = data.find(tensor.data.tobytes())
            weights[start:start + tensor.data.nbytes] = start >= 0
    return data, np.flatnonzero(~weights), shape


@functools.cache
def graph_bases() -> list[tuple[str, GraphDef]]:
    """(case id, converted GraphDef) of every e2e op case."""
    from tests.e2e.test_ops import CASES

    return [(c.id, read_model(convert(c.model, fusion=c.fusion))) for c in CASES]


# ---- mutations -------------------------------------------------------------------------------


def mutation(name: str, seed: int) -> tuple[str, bytes]:
    """The ``seed``-th byte mutation of base ``name``: (kind, bytes)."""
    data, structural, _ = base(name)
    kind = KINDS[seed % len(KINDS)]
    return kind, mutate_bytes(data, kind, np.random.default_rng([seed, len(data)]), structural)


def mutate_bytes(data: bytes, kind: str, rng: np.random.Generator, structural: np.ndarray | None = None) -> bytes:
    """``data`` with one mutation of ``kind`` (one of KINDS); 3 in 4 positions are ``structural`` ones when given."""

    def position() -> int:
        if structural is not None and rng.random() < 0.75:
            return int(rng.choice(structural))
        return int(rng.integers(max(len(data), 1)))

    out = bytearray(data)
    if kind == "truncate":
        cut = position() if rng.random() < 0.5 else int(rng.integers(0, 64))
        return bytes(out[:cut])
    if kind == "bit_flips":
        for _ in range(int(rng.integers(1, 9)) if out else 0):
            out[min(position(), len(out) - 1)] ^= 1 << int(rng.integers(8))
    elif kind == "overwrite_8":
        at = position()
        run = SPECIAL_RUNS[int(rng.integers(len(SPECIAL_RUNS)))] if rng.random() < 0.5 else rng.bytes(8)
        out[at:at + 8] = run[:max(len(out) - at, 0)]
    elif kind == "insert":
        at = position()
        out[at:at] = rng.bytes(int(rng.integers(1, 17)))
    else:  # random bytes, half of them behind the valid root offset and file identifier
        body = rng.bytes(int(rng.integers(0, 4096)))
        out = bytearray(data[:8] + body if rng.random() < 0.5 else body)
    return bytes(out)


def _pick(rng: np.random.Generator, values):
    return values[int(rng.integers(len(values)))]


def _mutate_attr(g: GraphDef, rng: np.random.Generator) -> str:
    node = _pick(rng, g.nodes)
    if not node.attrs:
        return f"attr {node.op_type} (none)"
    key = _pick(rng, list(node.attrs))
    value = node.attrs[key]
    if key in ENUM_FIELDS:
        value = _pick(rng, list(enum_names(ENUM_FIELDS[key]).values()))
    elif isinstance(value, bool):
        value = not value
    elif isinstance(value, int):
        value = _pick(rng, INTS)
    elif isinstance(value, float):
        value = _pick(rng, FLOATS)
    elif isinstance(value, (tuple, list)):
        value, r = list(value), rng.random()
        if r < 0.3 and value:
            value.pop(int(rng.integers(len(value))))
        elif r < 0.5 or not value:
            value.append(_pick(rng, INTS))
        else:
            value[int(rng.integers(len(value)))] = _pick(rng, INTS)
        value = tuple(value)
    node.attrs[key] = value
    return f"attr {node.op_type}.{key}={value!r}"


def _mutate_tensor(g: GraphDef, rng: np.random.Generator) -> str:
    tensor = _pick(rng, [t for t in g.tensors if t.data is None])
    if rng.random() < 0.3:
        tensor.dtype = _pick(rng, list(DTYPES.values()))
        return f"dtype {tensor.name}={tensor.dtype}"
    shape, r = list(tensor.shape), rng.random()
    if shape and r < 0.7:
        shape[int(rng.integers(len(shape)))] = _pick(rng, (-1, 0, 1, 2, 3, 7, 100))
    elif shape and r < 0.85:
        shape.pop()
    else:
        shape.append(_pick(rng, (-1, 1, 2)))
    tensor.shape = tuple(shape)
    return f"dims {tensor.name}={tensor.shape}"


def _mutate_wiring(g: GraphDef, rng: np.random.Generator) -> str:
    if rng.random() < 0.3:
        ends = g.inputs if rng.random() < 0.5 else g.outputs
        if ends and rng.random() < 0.5:
            ends.pop(int(rng.integers(len(ends))))
        else:
            ends.append(int(rng.integers(len(g.tensors))))
        return f"graph io {g.inputs} -> {g.outputs}"
    node = _pick(rng, g.nodes)
    indices = node.inputs if rng.random() < 0.7 else node.outputs
    indices[int(rng.integers(len(indices)))] = int(rng.integers(-1, len(g.tensors)))
    return f"wiring {node.op_type} {node.inputs} -> {node.outputs}"


def _mutate_const(g: GraphDef, rng: np.random.Generator) -> str:
    small = [t for t in g.tensors if t.data is not None and 0 < t.data.size < 64]
    if not small:
        return "const (none)"
    tensor = _pick(rng, small)
    data = np.array(tensor.data, copy=True)
    flat, at = data.reshape(-1), int(rng.integers(data.size))
    if data.dtype.kind == "f":
        flat[at] = _pick(rng, FLOATS)
    elif data.dtype.kind == "b":
        flat[at] = not flat[at]
    else:
        info = np.iinfo(data.dtype)
        flat[at] = min(max(_pick(rng, INTS), info.min), info.max)
    tensor.data = data
    return f"const {tensor.name}[{at}]={flat[at]}"


MUTATORS: tuple[Callable[[GraphDef, np.random.Generator], str], ...] = (
    _mutate_attr, _mutate_attr, _mutate_tensor, _mutate_wiring, _mutate_const)


def structured_mutation(seed: int) -> tuple[str, str, bytes | None]:
    """(base case id, what changed, the .lite bytes or None when the writer refuses the graph)."""
    rng = np.random.default_rng(seed)
    bases = graph_bases()
    case_id, graph = bases[seed % len(bases)]
    graph = copy.deepcopy(graph)
    what = "; ".join(_pick(rng, MUTATORS)(graph, rng) for _ in range(int(rng.integers(1, 3))))
    try:
        return case_id, what, write_model(graph)
    except Exception:  # the writer is the converter's, not a trust boundary: skip graphs it cannot encode
        return case_id, what, None


# ---- running cases -----------------------------------------------------------------------------


def valid_input(tensor: lite.Tensor, shape: tuple[int, ...] | None, rng: np.random.Generator) -> np.ndarray:
    """Random data of the tensor's dtype; free dims take the base model's size (2 where unknown)."""
    dims = tuple((shape[k] if shape is not None and len(shape) == len(tensor.shape) else 2) if d == -1 else d
                 for k, d in enumerate(tensor.shape))
    if np.prod(dims, dtype=np.float64) > MAX_INPUT_ELEMENTS:
        dims = tuple(min(d, 4) for d in dims)  # wrong for this model, so predict must raise an InputError
    if tensor.dtype.kind == "f":
        return rng.standard_normal(dims).astype(tensor.dtype)
    if tensor.dtype.kind == "b":
        return rng.random(dims) < 0.5
    return rng.integers(0, 4, dims).astype(tensor.dtype)


def build_and_predict(data: bytes, shape: tuple[int, ...] | None, seed: int, what: str) -> str:
    """Builds and predicts the .lite ``data``; returns the outcome, raises AssertionError on a forbidden one."""
    return run_case(lambda model: model.build(data, lite.ModelType.LITE, lite.Context()), shape, seed, what)


def run_case(build: Callable[[lite.Model], None], shape: tuple[int, ...] | None, seed: int, what: str,
             check: Callable[[lite.Model, list[lite.Tensor]], None] | None = None) -> str:
    """Builds a fresh model with ``build`` and, when it builds, predicts once on valid random inputs.

    Returns the outcome ("built+predicted" or "<stage>: <LiteError subclass>"); raises AssertionError
    on a forbidden one (another exception, a case past CASE_SECONDS). ``check`` then inspects the
    model and the outputs of the prediction (none when a stage failed).
    """
    stage, start = "build", time.perf_counter()
    model, outputs = lite.Model(), []
    try:
        with time_limit(CASE_SECONDS):
            build(model)
            stage = "predict"
            rng = np.random.default_rng(seed)
            outputs = model.predict([valid_input(t, shape, rng) for t in model.get_inputs()])
        outcome = "built+predicted"
    except lite.LiteError as exc:
        outcome = f"{stage}: {type(exc).__name__}"
    except CaseTimeout:
        raise AssertionError(f"{what}: {stage} took more than {CASE_SECONDS} s") from None
    except Exception as exc:
        raise AssertionError(
            f"{what}: {stage} raised {type(exc).__name__}, not a lite.LiteError: {exc}\n"
            f"{traceback.format_exc()}") from exc
    finally:
        assert time.perf_counter() - start < CASE_SECONDS + 1, f"{what}: the timer did not stop the case"
    if check is not None:
        check(model, outputs)
    return outcome


def run_chunk(first: int, count: int, run: Callable[[int], str]) -> collections.Counter:
    """Runs the cases of seeds ``first`` .. ``first + count - 1``; prints and returns their outcomes."""
    outcomes: collections.Counter = collections.Counter()
    failures = []
    for seed in range(first, first + count):
        try:
            outcomes[run(seed)] += 1
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{len(failures)} of {count} cases failed:\n" + "\n".join(failures[:5])
    print(f"seeds {first}..{first + count - 1}: {dict(outcomes)}")
    return outcomes


def byte_case(seed: int) -> str:
    name = "cnn" if seed % 2 == 0 else "inception"
    kind, data = mutation(name, seed)
    return build_and_predict(data, base(name)[2], seed, f"mutation({name!r}, {seed}) [{kind}]")


def structured_case(seed: int) -> str:
    case_id, what, data = structured_mutation(seed)
    if data is None:
        return "not writable"
    return build_and_predict(data, None, seed, f"structured_mutation({seed}) [{case_id}: {what}]")


# ---- huge pool windows ------------------------------------------------------------------------------

POOLS = ("MaxPoolFusion", "AvgPoolFusion")


def pool_file(op: str, kernel_size: tuple[int, int]) -> bytes:
    """A .lite file of one SAME_UPPER pool on a (1, 2, 7, 7) input."""
    attrs = {"kernel_size": kernel_size, "strides": (1, 1), "pad_list": (0, 0, 0, 0), "pad_mode": "SAME_UPPER"}
    tensors = [TensorDef("x", np.dtype(np.float32), (1, 2, 7, 7)), TensorDef("y", np.dtype(np.float32), (1, 2, 7, 7))]
    return write_model(GraphDef(tensors, [NodeDef("pool", op, attrs, [0], [1])], [0], [1]))


@pytest.mark.parametrize("op", POOLS)
def test_hostile_same_pool_kernel_is_refused_quickly(op):
    with time_limit(1.0), pytest.raises(lite.UnsupportedOpError, match="taps"):
        lite.Model().build(pool_file(op, (2**31, 3)), lite.ModelType.LITE, lite.Context())


def test_valid_same_pool_with_a_huge_kernel_is_refused_quickly():
    x = np.random.default_rng(0).standard_normal((1, 2, 7, 7)).astype(np.float32)
    onnx_model = single_node_model("MaxPool", {"x": x}, kernel_shape=[1000, 1000], auto_pad="SAME_UPPER")
    with time_limit(1.0), pytest.raises(lite.UnsupportedOpError, match="1000x1000 window has 1000000 taps"):
        convert(onnx_model)


def test_valid_same_pool_with_a_large_kernel_runs():
    x = np.random.default_rng(0).standard_normal((1, 2, 7, 7)).astype(np.float32)
    onnx_model = single_node_model("MaxPool", {"x": x}, kernel_shape=[100, 100], auto_pad="SAME_UPPER")
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1))
    (y,) = model.predict([x])
    np.testing.assert_array_equal(y.get_data_to_numpy(), x.max(axis=(2, 3), keepdims=True).repeat(7, 2).repeat(7, 3))


# ---- the tests -----------------------------------------------------------------------------------------


def test_unmutated_bases_build_and_predict():
    for name in BASES:
        data, structural, shape = base(name)
        assert 0 < len(structural) < len(data)
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context())
        (out,) = model.predict([np.random.default_rng(0).standard_normal(shape).astype(np.float32)])
        assert np.isfinite(out.get_data_to_numpy()).all()


def test_mutations_are_deterministic():
    assert mutation("cnn", 7) == mutation("cnn", 7)
    assert structured_mutation(7) == structured_mutation(7)
    assert {mutation("cnn", s)[0] for s in range(len(KINDS))} == set(KINDS)


def test_case_timer_interrupts_a_hang():
    with pytest.raises(CaseTimeout), time_limit(0.05):
        while True:
            pass


def in_child(first: int, count: int, case: str, module: str = "tests.e2e.test_fuzz", cwd: Path = REPO,
             env: dict[str, str] | None = None, prelude: str = "") -> None:
    """Runs ``module.run_chunk`` on ``module.case`` in a child process (working directory ``cwd``, extra
    environment ``env``, Python code ``prelude`` run first) whose address space is capped at CHILD_ADDRESS_SPACE.

    An allocation bomb then fails inside the child (and the test) instead of taking the
    machine's memory, and a crash (a signal) is reported as a failure, not lost.
    """
    code = f"{prelude}\nfrom {module} import run_chunk, {case}; run_chunk({first}, {count}, {case})"
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                            preexec_fn=_cap_address_space, timeout=count * (CASE_SECONDS + 1))
    assert result.returncode == 0, (
        f"{case} seeds {first}..{first + count - 1}: the child "
        f"{'was killed by signal ' + str(-result.returncode) if result.returncode < 0 else 'failed'}:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    print(result.stdout.strip())


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


@pytest.mark.parametrize("case", ["byte_case", "structured_case"])
def test_mutations_work_or_raise_lite_errors(case):
    in_child(0, CASES_DEFAULT, case)


@pytest.mark.slow
@pytest.mark.parametrize("first", range(CASES_DEFAULT, CASES_DEFAULT + CASES_SLOW, 10 * CHUNK))
def test_byte_mutations_long(first):
    in_child(first, 10 * CHUNK, "byte_case")


@pytest.mark.slow
@pytest.mark.parametrize("first", range(CASES_DEFAULT, CASES_DEFAULT + 2 * CASES_SLOW, 10 * CHUNK))
def test_structured_mutations_long(first):
    in_child(first, 10 * CHUNK, "structured_case")
