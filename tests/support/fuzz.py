"""The fuzzers' shared machinery (tests/e2e/test_fuzz*.py): a small CNN to mutate, byte mutations, one case
run under a timer (it must work or raise a ``lite.LiteError``), chunks of seeds run in a child process with a
capped address space, and the floors on the share of each outcome."""

from __future__ import annotations

import collections
import contextlib
import functools
import json
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
from onnx import TensorProto, helper, numpy_helper

import lite

CHILD_ADDRESS_SPACE = 8 << 30  # virtual memory of a fuzzing child (numpy and BLAS reserve some)
REPO = Path(__file__).resolve().parents[2]
CASE_SECONDS = 5.0
MAX_INPUT_ELEMENTS = 1 << 20
KINDS = ("truncate", "bit_flips", "overwrite_8", "insert", "random_bytes")
SPECIAL_RUNS = (b"\xff" * 8, b"\x00" * 8, b"\xff\xff\xff\x7f\x00\x00\x00\x00", b"\x00\x00\x00\x80\xff\xff\xff\xff",
                b"\x01\x00\x00\x00\x00\x00\x00\x00", b"\xff\xff\xff\xff\xff\xff\xff\x7f")
INTS = (-3, -2, -1, 0, 1, 2, 3, 5, 64, 2**31, 2**62, -(2**62))
FLOATS = (0.0, -1.0, math.nan, math.inf, -math.inf, 1e30, 1e-30)
OUTCOMES = "OUTCOMES"  # the start of the child's last line, then its outcomes as JSON


class CaseTimeout(BaseException):
    """Raised by the case timer; a BaseException so no ``except Exception`` in the library swallows it."""


class CompileClock:
    """Seconds this process spent compiling (or loading) numba kernels, the compile under way included:
    a case's time limit leaves them out, since a cold cache on a busy machine compiles for seconds
    (numba's ``numba:compile`` events; always 0 where numba is not importable)."""

    def __init__(self) -> None:
        self.total, self.depth, self.started = 0.0, 0, 0.0
        try:
            from numba.core import event
        except Exception:  # NOTE: no numba, no compiling
            return
        clock = self

        class Listener(event.Listener):
            def on_start(self, _event) -> None:
                if clock.depth == 0:
                    clock.started = time.perf_counter()
                clock.depth += 1

            def on_end(self, _event) -> None:
                clock.depth -= 1
                if clock.depth == 0:
                    clock.total += time.perf_counter() - clock.started

        event.register("numba:compile", Listener())

    def seconds(self) -> float:
        return self.total + (time.perf_counter() - self.started if self.depth else 0.0)


@functools.cache
def compile_clock() -> CompileClock:
    """The process's CompileClock (listening from its first use)."""
    return CompileClock()


class Budget:
    """Wall time since ``start`` less the kernel compiling in it (``CompileClock``)."""

    def __init__(self) -> None:
        self.clock = compile_clock()
        self.start, self.compiled_before = time.perf_counter(), self.clock.seconds()

    def spent(self) -> float:
        return time.perf_counter() - self.start - (self.clock.seconds() - self.compiled_before)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[Budget]:
    """Interrupts the block with CaseTimeout once it has run ``seconds`` besides compiling kernels
    (SIGALRM: main thread, POSIX); yields the Budget it counts with."""
    budget = Budget()

    def expire(signum, frame):
        left = seconds - budget.spent()
        if left > 0:  # NOTE: kernels compiled meanwhile: wait for the rest
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        raise CaseTimeout(f"still running after {seconds} s (kernel compiling aside)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield budget
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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


def run_case(build: Callable[[lite.Model], None], shape: tuple[int, ...] | None, seed: int, what: str,
             check: Callable[[lite.Model, list[lite.Tensor]], None] | None = None) -> str:
    """Builds a fresh model with ``build`` and, when it builds, predicts once on valid random inputs.

    Returns the outcome ("built+predicted" or "<stage>: <LiteError subclass>"); raises AssertionError
    on a forbidden one (another exception, a case past CASE_SECONDS). ``check`` then inspects the
    model and the outputs of the prediction (none when a stage failed).
    """
    stage, budget = "build", None
    model, outputs = lite.Model(), []
    try:
        with time_limit(CASE_SECONDS) as budget:
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
        assert budget is None or budget.spent() < CASE_SECONDS + 1, f"{what}: the timer did not stop the case"
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


def in_child(first: int, count: int, case: str, module: str, cwd: Path = REPO,
             env: dict[str, str] | None = None, prelude: str = "") -> collections.Counter:
    """Runs ``run_chunk`` on ``module.case`` in a child process (working directory ``cwd``, extra environment
    ``env``, Python code ``prelude`` run first) whose address space is capped at CHILD_ADDRESS_SPACE; returns
    the outcomes. The module's own ``run_chunk`` is used where it has one (it may check more after a chunk).

    An allocation bomb then fails inside the child (and the test) instead of taking the
    machine's memory, and a crash (a signal) is reported as a failure, not lost.
    """
    code = (f"{prelude}\nimport json\nimport {module} as cases\nfrom tests.support import fuzz\n"
            f"outcomes = getattr(cases, 'run_chunk', fuzz.run_chunk)({first}, {count}, cases.{case})\n"
            f"print({OUTCOMES!r}, json.dumps(outcomes))")
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                            preexec_fn=_cap_address_space, timeout=count * (CASE_SECONDS + 1))
    assert result.returncode == 0, (
        f"{case} seeds {first}..{first + count - 1}: the child "
        f"{'was killed by signal ' + str(-result.returncode) if result.returncode < 0 else 'failed'}:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    lines = result.stdout.strip().splitlines()
    print("\n".join(lines[:-1]))
    assert lines and lines[-1].startswith(OUTCOMES), f"{case}: the child printed no outcomes:\n{result.stdout[-3000:]}"
    return collections.Counter(json.loads(lines[-1][len(OUTCOMES):]))


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


def outcome_class(outcome: str) -> str:
    """"built+predicted", "build" or "predict" (the stage that raised a LiteError), or another outcome as is."""
    return outcome.split(":")[0]


def assert_shares(outcomes: collections.Counter, floors: dict[str, float], what: str) -> None:
    """Each outcome class in ``floors`` takes at least that share of the cases: the mutations still reach it."""
    total = sum(outcomes.values())
    shares = collections.Counter()
    for outcome, count in outcomes.items():
        shares[outcome_class(outcome)] += count / total
    low = {name: round(shares[name], 4) for name, floor in floors.items() if shares[name] < floor}
    assert not low, (f"{what}: outcome shares {low} below their floors {floors} over {total} cases "
                     f"({dict(outcomes)}): did the mutations or the checks standing in their way change?")
