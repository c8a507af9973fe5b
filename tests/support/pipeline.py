"""Helpers shared by the pipeline tests: one-node models, two-stage chains, pipeline threads, worker leftovers,
test delegates that make a worker fail, die, wedge or start slowly, and scripts run in a child interpreter."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.pipeline.shared import block_names
from lite.tools.converter import convert
from tests.support.delegates import NativeGraphKernel

RNG = np.random.default_rng(23)


def one_op(op: str, inputs: dict[str, tuple[int, list]], output: tuple[str, int, list],
           consts: dict[str, np.ndarray] | None = None) -> bytes:
    """A one-node model: ``inputs`` {name: (onnx type, dims)} -> ``output`` (name, type, dims)."""
    consts = consts or {}
    name, elem, dims = output
    node = helper.make_node(op, [*inputs, *consts], [name], name=op.lower())
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, t, d) for k, (t, d) in inputs.items()],
        [helper.make_tensor_value_info(name, elem, dims)], [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))


def build(data: bytes, *delegates: lite.Delegate) -> lite.Model:
    """Builds ``.lite`` bytes with one thread and ``delegates``."""
    model = lite.Model()
    model.build(data, context=lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def relu_model(shape=(1, 4), inp="x", out="h") -> lite.Model:
    """A built Relu: ``inp`` -> ``out``."""
    return build(one_op("Relu", {inp: (TensorProto.FLOAT, list(shape))}, (out, TensorProto.FLOAT, list(shape))))


def add_model(shape=(1, 4), inp="h", dtype=np.float32) -> lite.Model:
    """A built Add of the constant ``arange``: ``inp`` -> ``y``."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    const = {"c": np.arange(np.prod(shape), dtype=dtype).reshape(shape)}
    return build(one_op("Add", {inp: (elem, list(shape))}, ("y", elem, list(shape)), const))


def chain(first: lite.Model, second: lite.Model) -> lite.PipelineConfig:
    """x -> stage 0 (x -> h) -> stage 1 (h -> y) -> y."""
    return lite.PipelineConfig([first, second]).connect("x", (0, "x")).connect((0, "h"), (1, "h")).connect(
        (1, "y"), "y")


def pipeline_threads() -> list[threading.Thread]:
    """The pipeline worker threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("lite-pipeline-")]


def arrays(outputs: list[lite.Tensor]) -> dict[str, np.ndarray]:
    """``{name: array}`` of the Tensors ``get_output`` (or ``Model.predict``) returned."""
    return {t.name: t.get_data_to_numpy() for t in outputs}


class NaNRefusingKernel(NativeGraphKernel):
    """Runs the native kernels it replaced, but raises on an input holding NaN (a stage error on demand)."""

    def execute(self) -> None:
        if any(np.isnan(t.data).any() for t in self.inputs):
            raise RuntimeError("this stage refuses NaN")
        super().execute()


class NaNRefusingDelegate(lite.SimpleDelegate):
    """Takes every kernel into one NaNRefusingKernel; holds no state, so it pickles to a worker process."""

    def is_supported(self, kernel, primitive):
        return True

    def create_graph_kernel(self, kernels, inputs, outputs):
        return NaNRefusingKernel(kernels, inputs, outputs, [], "nan-refusing")


class TrapKernel(NativeGraphKernel):
    """Runs the native kernels it replaced, but on an input holding +inf its process kills itself
    (SIGKILL) and on -inf it stops itself (SIGSTOP: wedged until killed). Use it in worker processes only."""

    def execute(self) -> None:
        if any(np.isposinf(t.data).any() for t in self.inputs):
            os.kill(os.getpid(), signal.SIGKILL)
        if any(np.isneginf(t.data).any() for t in self.inputs):
            os.kill(os.getpid(), signal.SIGSTOP)
        super().execute()


class TrapDelegate(lite.SimpleDelegate):
    """Takes every kernel into one TrapKernel (a worker that dies or wedges mid-request on demand)."""

    def is_supported(self, kernel, primitive):
        return True

    def create_graph_kernel(self, kernels, inputs, outputs):
        return TrapKernel(kernels, inputs, outputs, [], "trap")


class SlowStartDelegate(lite.Delegate):
    """Its ``init`` waits ``seconds``, then declines: a stage that takes that long to build."""

    def __init__(self, seconds: float = 600.0):
        self.seconds = seconds

    def init(self) -> None:
        time.sleep(self.seconds)
        raise lite.NotSupportedError("only slows the build down")

    def build(self, model) -> None:
        pass


RELU = one_op("Relu", {"x": (TensorProto.FLOAT, [1, 4])}, ("h", TensorProto.FLOAT, [1, 4]))
ADD = one_op("Add", {"h": (TensorProto.FLOAT, [1, 4])}, ("y", TensorProto.FLOAT, [1, 4]),
             {"c": np.arange(4, dtype=np.float32)[None]})


def tiny_chain(*first_delegates: lite.Delegate) -> lite.PipelineConfig:
    """x -> Relu -> h -> Add arange(4) -> y, both stages with a source (stage 0's Context with
    ``first_delegates``, which run only where the stage is built from its source: in a worker)."""
    config = chain(build(RELU), build(ADD))
    return config.set_source(0, RELU, lite.Context(thread_num=1, delegates=list(first_delegates))).set_source(
        1, ADD, lite.Context(thread_num=1))


def tiny_expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.arange(4, dtype=np.float32)


def large_config(*delegates: lite.Delegate) -> lite.PipelineConfig:
    """One stage, x -> Add of 40 000 constants -> y: its source (160 KB) is larger than a pipe buffer."""
    n = 40_000
    data = one_op("Add", {"x": (TensorProto.FLOAT, [1, n])}, ("y", TensorProto.FLOAT, [1, n]),
                  {"c": np.ones((1, n), np.float32)})
    config = lite.PipelineConfig([build(data)]).connect("x", (0, "x")).connect((0, "y"), "y")
    return config.set_source(0, data, lite.Context(thread_num=1, delegates=list(delegates)))


def wait_until_gone(pid: int, timeout: float = 30.0) -> None:
    """Waits until child process ``pid`` has ended, leaving it to be reaped by its owner; fails after
    ``timeout`` seconds. (Its status says zombie earlier, while its other threads still end.)"""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline, f"process {pid} still runs after {timeout} s"
        time.sleep(0.01)


def wait_until_stopped(pid: int, timeout: float = 30.0) -> None:
    """Waits until process ``pid`` is stopped (SIGSTOP); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, f"process {pid} did not stop within {timeout} s"
        time.sleep(0.01)


def worker_processes() -> list[psutil.Process]:
    """This process's children that are spawned workers (not the resource tracker)."""
    children = psutil.Process().children(recursive=True)
    return [p for p in children if _is_spawned_worker(p)]


def _is_spawned_worker(process: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:  # NOTE: it ended while we looked
        return False


def leftovers() -> dict[str, list]:
    """Worker processes and shared-memory blocks of this process that still exist (all empty when clean)."""
    return {"active children": multiprocessing.active_children(), "spawned workers": worker_processes(),
            "blocks": block_names()}


def settled_leftovers(timeout: float = 10.0) -> dict[str, list]:
    """``leftovers()`` once clean, or after ``timeout`` seconds (a worker whose parent was interrupted
    while spawning it ends on its own, a moment later)."""
    deadline = time.monotonic() + timeout
    while any((found := leftovers()).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


# ---- scripts in a child interpreter (a hang there fails the test by its timeout) ----------------

REPO = Path(__file__).resolve().parents[2]

SCRIPT_HEADER = """\
import numpy as np
import lite
import lite.pipeline.executor
from tests.support.pipeline import (SlowStartDelegate, TrapDelegate, large_config, leftovers, report,
                                    say_when_main_thread_runs, settled_leftovers, tiny_chain, wait_until_stopped)
"""


def report(**values) -> None:
    """In a script: prints ``values`` as a line that ``ScriptRun.reports`` reads."""
    print("REPORT " + json.dumps(values, default=repr), flush=True)


def say_when_main_thread_runs(function: str, word: str) -> None:
    """In a script: prints ``word`` once the main thread is inside ``function`` of lite/pipeline/executor.py."""
    main = threading.main_thread().ident

    def inside() -> bool:
        frame = sys._current_frames().get(main)
        while frame is not None:
            code = frame.f_code
            if code.co_name == function and code.co_filename.endswith(os.path.join("pipeline", "executor.py")):
                return True
            frame = frame.f_back
        return False

    def watch() -> None:
        while not inside():
            time.sleep(0.01)
        print(word, flush=True)

    threading.Thread(target=watch, daemon=True, name="script-watch").start()


@dataclass
class ScriptRun:
    """What a child interpreter did: its exit code, output, ``report(...)`` lines and the processes of its
    group (itself and its workers) still running once it exited."""

    returncode: int
    stdout: str
    stderr: str
    reports: list[dict]
    survivors: list[psutil.Process]
    blocks: list[str]

    def report(self, key: str):
        """The value of ``key`` in the last report that has it."""
        return next(r[key] for r in reversed(self.reports) if key in r)


def _default_sigint() -> None:
    """SIGINT's default action in the child, so that Python turns it into KeyboardInterrupt: a shell runs
    background jobs with SIGINT ignored, and a child inherits that (then Python installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Script:
    """A Python script run as the main module of a child interpreter in its own process group.

    Args:
        path: where to write it (a file, so spawned workers import it as the main module).
        body: the code after ``SCRIPT_HEADER`` (which imports numpy, lite and the helpers for scripts).
        guard: run ``body`` under ``if __name__ == "__main__":`` (spawned workers import the script).
    """

    def __init__(self, path: Path, body: str, guard: bool = True):
        code = 'if __name__ == "__main__":\n' + textwrap.indent(textwrap.dedent(body), "    ") if guard else body
        path.write_text(SCRIPT_HEADER + code)
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen([sys.executable, str(path)], cwd=REPO, env=environment, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                        preexec_fn=_default_sigint)
        self.lines: list[str] = []

    def wait_for_line(self, text: str, timeout: float) -> None:
        """Reads the child's output until a line holding ``text`` (fails after ``timeout`` seconds)."""
        reader = threading.Thread(target=self._read_until, args=(text,), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self.kill_group()
            raise AssertionError(f"the script did not print {text!r} within {timeout} s: {self.lines}")

    def _read_until(self, text: str) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if text in line:
                return

    def interrupt(self) -> None:
        """SIGINT to the script's process (its workers ignore SIGINT: a terminal's Ctrl-C changes nothing
        for them)."""
        os.kill(self.process.pid, signal.SIGINT)

    def finish(self, timeout: float) -> ScriptRun:
        """Waits for the child to exit (killing its whole group and failing after ``timeout`` seconds), then
        for its group to end (workers may take a moment after it)."""
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            stdout, stderr = self.process.communicate()
            message = f"the script did not end within {timeout} s; its output:\n{stdout}\n{stderr}"
            raise AssertionError(message) from None
        stdout = "".join(self.lines) + stdout
        survivors = _group_survivors(self.process.pid, timeout=10.0)
        reports = [json.loads(line[len("REPORT "):]) for line in stdout.splitlines() if line.startswith("REPORT ")]
        blocks = block_names(self.process.pid)
        _remove_blocks(blocks)
        return ScriptRun(self.process.returncode, stdout, stderr, reports, survivors, blocks)

    def kill_group(self) -> None:
        """Kills the script and its workers, and removes the blocks they leave."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        _group_survivors(self.process.pid, timeout=10.0)
        _remove_blocks(block_names(self.process.pid))


def run_script(path: Path, body: str, timeout: float = 60.0, guard: bool = True) -> ScriptRun:
    """Runs ``body`` (see ``Script``) to its end."""
    return Script(path, body, guard).finish(timeout)


def _remove_blocks(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join("/dev/shm", name))


def _group_survivors(group: int, timeout: float) -> list[psutil.Process]:
    """The live processes of process group ``group``, once they have had ``timeout`` seconds to end
    (SIGKILLed at the end, so no test leaves them behind)."""
    deadline = time.monotonic() + timeout
    while (alive := _group_members(group)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for process in alive:
        process.kill()
    return alive


def _group_members(group: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.Error):
            pass
    return members
