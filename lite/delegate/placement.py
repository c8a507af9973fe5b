"""Measured placement: every partition a delegate claims runs where it measured fastest.

With ``Context(placement="measured")`` the build goes:

1. **Proposals.** Each delegate builds on its own copy of the native kernel list, so
   delegates that claim the same kernels all propose (priority does not hide them).
2. **The native run.** The native kernels are prepared and run as the build will run them
   (residual Adds fused into convolutions) on seeded random inputs of the model's shapes; each
   one's time (the least of its runs) is recorded, and every tensor keeps its value, so each
   candidate is timed on real intermediate data.
3. **Timing.** Each candidate's graph kernel is prepared and run on those values (a warm-up
   run, then up to ``RUNS`` timed ones; a run already far slower than native ends it). Its
   time holds everything it does at its boundary (copies, layout and dtype conversions),
   since those are inside ``execute()``. The native side is the sum of the times of the
   kernels it covers.
4. **Splits.** A candidate that lost, from a ``SimpleDelegate``, is probed op by op; when one
   op runs slower on the delegate than natively, the runs on either side of it become
   candidates (and the probes too).
5. **Choice.** Greedily by time saved, non-overlapping, never a candidate that does not save
   at least ``MARGIN`` of the native time (and ``MARGIN_SECONDS``), and never a set that would
   order the graph into a cycle. The chosen graph kernels are swapped in (the kernel order
   changes so each one's kernels are contiguous).

Everything is within ``Context.placement_budget`` seconds (what is not timed in time runs
natively), and the times are cached on disk keyed by the model bytes, its input shapes, the
threads, every delegate's ``fingerprint()``, this machine and Delite's version: a second build
with the same key times nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lite.delegate import Delegate, DelegateModel, SimpleDelegate, read_from_outside, takes_build_argument
from lite.delegate.partition import DelegationLog, Partition, Program
from lite.errors import LiteError, MemoryLimitError, ModelFileError
from lite.files import cache_folder, read_regular_file, replace_file
from lite.fusion import fuse
from lite.kernel import Kernel, execute_charged
from lite.kernels.base import NativeKernel
from lite.scheduler import contiguous_order
from lite.shapes import infer_at_run
from lite.tensor import Tensor

logger = logging.getLogger("lite")

RUNS = 5  # timed runs of a candidate, after one warm-up
NATIVE_RUNS = 5  # timed runs of the native kernels, after one warm-up
# NOTE: both sides keep their least time: other processes only ever add time, and on a busy 2-core machine a
# median of 3 still let a stalled native run make the NPU look faster than it is.
MARGIN = 0.02  # a candidate must save this share of the native time, and at least MARGIN_SECONDS,
MARGIN_SECONDS = 20e-6  # to be chosen: a saving within the timing noise is not worth a boundary
GIVE_UP_FACTOR = 3.0  # a run this many times the native time (plus 1 ms) ends a candidate's timing
CACHE_ENV = "DELITE_PLACEMENT_CACHE"
MAX_CACHE_BYTES = 4 << 20
MAX_CACHE_DEPTH = 8  # a cache file nests three deep (the file, its candidates, an entry)
MAX_CACHED_SECONDS = 1e4  # a cached time above this is not one that a placement measured
CACHE_FORMAT = 1
CACHE_FIELDS = frozenset({"seconds", "native_seconds", "role", "reason", "failed"})
ROLES = ("proposed", "probe", "split")


@dataclass
class Candidate:
    """One partition a delegate could run: the native kernels it covers and its times."""

    delegate: Delegate
    rank: int  # the delegate's place in Context.delegates
    covered: list[NativeKernel]
    kernel: Kernel | None = None
    seconds: float | None = None  # the least of the timed runs (None: not timed)
    native_seconds: float = 0.0
    role: str = "proposed"  # "proposed" by the delegate, an op-by-op "probe", or a "split" piece
    decision: str = "not timed"
    reason: str = ""
    source: str = "measured"  # or "cache"
    failed: bool = False  # its graph kernel raised in prepare() or execute()
    partition: Partition | None = None
    key: str = ""  # the delegate's rank and the covered kernels' places in the model (set by the Placer)

    @property
    def saving(self) -> float:
        return -np.inf if self.seconds is None else self.native_seconds - self.seconds

    @property
    def delegate_name(self) -> str:
        return type(self.delegate).__name__


@dataclass(frozen=True)
class PlacementRow:
    """One candidate partition of a measured placement (``Model.placement_report()``).

    ``seconds`` is the delegate's least time over its runs (None where it was not timed), ``native_seconds``
    the native kernels' time for the same nodes, ``decision`` "chosen", "refused" or
    "not timed", ``role`` "proposed", "probe" (one op) or "split" (a piece around a slow op),
    ``source`` "measured" or "cache".
    """

    delegate: str
    graph_kernel: str
    nodes: tuple[str, ...]
    role: str
    seconds: float | None
    native_seconds: float
    decision: str
    reason: str
    source: str


class Placer:
    """Carries out one measured placement on an engine whose delegates have not built yet."""

    def __init__(self, engine: Program, model_digest: str) -> None:
        self.engine = engine
        self.context = engine.context
        self.digest = model_digest
        self.deadline = time.perf_counter() + self.context.placement_budget
        self.views: dict[int, DelegateModel] = {}
        self.candidates: list[Candidate] = []
        self.native_times: dict[NativeKernel, float] = {}
        self.previous: dict[Tensor, np.ndarray | None] = {}  # activations' arrays before the native run
        self.pristine: dict[Tensor, np.ndarray | None] = {}
        self.order: list[Kernel] = []  # the kernel order that keeps each chosen partition contiguous (choose)
        self.position = {k: i for i, k in enumerate(engine.shape_kernels)}  # NOTE: names may repeat or be empty

    # ---- the steps ----------------------------------------------------------------------

    def run(self) -> list[Candidate]:
        """Proposes, times (or reads the cache), chooses and applies; returns every candidate."""
        self.propose()
        if not self.candidates:
            return []
        cache = DecisionCache(self.context.placement_cache, self.cache_key())
        known = cache.load()
        if all(c.key in known for c in self.candidates):
            self.recall(known)
        else:
            self.measure()
            cache.save(self.candidates)
        chosen = self.choose()
        self.apply(chosen)
        return self.candidates

    def propose(self) -> None:
        """Every delegate builds on its own copy of the kernel list; its partitions become candidates."""
        engine = self.engine
        for rank, delegate in enumerate(self.context.delegates):
            if not engine.init_delegate(delegate):
                continue
            log = DelegationLog()
            view = DelegateModel(list(engine.kernels), engine.inputs, engine.outputs, delegate, log, self.context)
            engine.build_delegate(delegate, view)
            self.views[rank] = view
            for kernel, reasons in log.reasons.items():
                engine.log.reasons.setdefault(kernel, []).extend(reasons)
            for partition in log.partitions.values():
                covered = [k for k in partition.covered if isinstance(k, NativeKernel)]
                self.candidates.append(self.candidate(delegate, rank, covered, kernel=partition.kernel,
                                                      partition=partition))

    def candidate(self, delegate: Delegate, rank: int, covered: list[NativeKernel], **fields) -> Candidate:
        """A Candidate with its cache key: the delegate's rank and where its kernels are in the model."""
        key = f"{rank}:" + ",".join(str(self.position[k]) for k in covered)
        return Candidate(delegate, rank, covered, key=key, **fields)

    def cache_key(self) -> str:
        """What the times depend on: the model, shapes, threads, delegates, machine and versions."""
        from lite.version import __version__

        parts = {
            "model": self.digest,
            "shapes": [list(t.shape) for t in self.engine.inputs],
            "threads": self.context.thread_num,
            "delegates": [f"{rank}:{d.fingerprint()}" for rank, d in enumerate(self.context.delegates)],
            "machine": [platform.machine(), platform.processor(), _cpu_model(), os.cpu_count()],
            "lite": __version__,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def recall(self, known: dict[str, dict]) -> None:
        """Times from the cache: the proposals', and the probes and split pieces measured before."""
        by_key = {c.key: c for c in self.candidates}
        for key, entry in known.items():
            candidate = by_key.get(key)
            if candidate is None:
                candidate = self._recalled_piece(key, entry)
                if candidate is None:
                    continue
                self.candidates.append(candidate)
            candidate.seconds, candidate.native_seconds = entry["seconds"], entry["native_seconds"]
            candidate.reason, candidate.failed = str(entry.get("reason", "")), entry["failed"]
            candidate.source = "cache"

    def _recalled_piece(self, key: str, entry: dict) -> Candidate | None:
        """The probe or split piece a cache entry names, when its kernels still run natively here."""
        rank_text, _, places = key.partition(":")
        natives = set(self.engine.kernels)
        kernels = self.engine.shape_kernels
        numbers = [_ascii_int(p) for p in places.split(",")]
        indices = [n for n in numbers if n is not None and n < len(kernels)]
        rank = _ascii_int(rank_text)
        if (rank not in self.views or not indices or len(indices) != len(places.split(","))
                or entry.get("role") not in ("probe", "split") or any(kernels[i] not in natives for i in indices)):
            return None
        return self.candidate(self.context.delegates[rank], rank, [kernels[i] for i in indices], role=entry["role"])

    def measure(self) -> None:
        """The native run, then every proposal, then splits of those that lost, within the budget."""
        try:
            self.native_run()
        except MemoryLimitError as exc:
            for candidate in self.candidates:
                candidate.reason = f"not timed: keeping every activation for the native run needs more ({exc})"
            return
        try:
            for candidate in sorted(self.candidates, key=lambda c: -self._native_cost(c)):
                self.time_candidate(candidate)
            for candidate in [c for c in self.candidates if c.seconds is not None and c.saving <= 0]:
                self.split(candidate)
        finally:
            self.restore_values()

    # ---- the native run -----------------------------------------------------------------

    def native_run(self) -> None:
        """Prepares and runs the native kernels on random inputs, keeping every value and time.

        They run as the build will run them, residual Adds and activations fused into their
        convolutions (``lite.fusion``): a fused pair's time is the convolution's, so a partition
        that takes the Add or the Activation alone saves nothing, as taking it breaks the fusion.
        """
        engine = self.engine
        natives = [k for k in engine.kernels if isinstance(k, NativeKernel)]
        self.pristine = {t: t.data for k in natives for t in k.inputs if t is not None and t.is_const}
        for kernel in natives:
            engine.prepare_native_once(kernel)
        self._give_arrays(natives)
        static = {k for k in natives if k not in engine.runtime_shaped}
        fusion = fuse(natives, engine.shape_kernels, engine.outputs, static)
        try:
            for kernel in fusion.running:
                if kernel not in static and kernel not in engine.runtime_shaped:
                    kernel.resize()
            samples = self._timed_native_runs(fusion.running)
        finally:
            fusion.revert()  # NOTE: the build fuses again, where the kernels stay native
        self.native_times = {k: min(s) for k, s in samples.items()}
        for candidate in self.candidates:
            candidate.native_seconds = self._native_cost(candidate)

    def _timed_native_runs(self, running: list[Kernel]) -> dict[NativeKernel, list[float]]:
        """A warm-up run, then NATIVE_RUNS timed ones; a fused kernel's time goes to its first part (a
        blocked chain's, member by member)."""
        engine, limit = self.engine, self.context.memory_limit
        engine.choose_threads()
        samples: dict[NativeKernel, list[float]] = {}
        with np.errstate(all="ignore"):
            for run in range(1 + NATIVE_RUNS):
                profile: dict[Kernel, float] = {}
                for kernel in running:
                    start = time.perf_counter()
                    if kernel in engine.runtime_shaped:
                        infer_at_run(kernel, limit)
                    execute_charged(kernel, profile, start)
                for kernel, seconds in profile.items() if run else ():
                    samples.setdefault(kernel, []).append(seconds)
        return samples

    def _give_arrays(self, natives: list[NativeKernel]) -> None:
        """Random model inputs and an array of its own for every activation (no reuse: all are kept)."""
        rng = np.random.default_rng(0)
        tensors = {t: None for k in natives for t in k.outputs if k not in self.engine.runtime_shaped}
        total = sum(math.prod(t.shape) * t.dtype.itemsize for t in tensors)
        if total > self.context.memory_limit:
            raise MemoryLimitError(f"{total} bytes of activations, above the Context's memory_limit")
        self.previous = {t: t.data for t in [*self.engine.inputs, *tensors]}
        for tensor in self.engine.inputs:
            tensor.data = random_array(tensor.shape, tensor.dtype, rng)
        for tensor in tensors:  # NOTE: random, as a fused-away intermediate keeps what it is given here
            tensor.data = random_array(tensor.shape, tensor.dtype, rng)

    def restore_values(self) -> None:
        """Gives the tensors back the arrays they had before the native run (the memory plan comes later)."""
        for tensor, data in self.previous.items():
            tensor.data = data
        for tensor, data in self.pristine.items():
            tensor.data = data

    def _native_cost(self, candidate: Candidate) -> float:
        return sum(self.native_times.get(k, 0.0) for k in candidate.covered)

    # ---- timing a candidate -------------------------------------------------------------

    def time_candidate(self, candidate: Candidate) -> None:
        """Prepares the candidate's graph kernel and times it on the native run's values."""
        if time.perf_counter() > self.deadline:
            candidate.reason = f"not timed: the placement budget of {self.context.placement_budget:g} s was spent"
            return
        candidate.native_seconds = self._native_cost(candidate)
        if candidate.kernel is None:
            candidate.kernel = self.create(candidate)
        partition = candidate.partition or Partition(candidate.delegate, candidate.kernel, candidate.covered)
        candidate.partition = partition
        for tensor, data in self.pristine.items():
            tensor.data = data
        try:
            candidate.kernel.prepare()
            candidate.seconds = self._timed_runs(partition, candidate.native_seconds)
        except Exception as exc:  # NOTE: as the runtime's fallback: a failing graph kernel loses, the build goes on
            if not self.context.fallback:
                raise partition.error("prepare or execute (measured placement)", exc) from exc
            candidate.reason, candidate.failed = f"failed: {type(exc).__name__}: {exc}", True
        finally:
            for tensor, data in self.pristine.items():
                tensor.data = data

    def _timed_runs(self, partition: Partition, native_seconds: float) -> float:
        kernel = partition.kernel
        produced = {t: t.data for t in kernel.outputs}
        for tensor in kernel.outputs:
            tensor.data = np.empty(tensor.shape, tensor.dtype)
        give_up = GIVE_UP_FACTOR * native_seconds + 1e-3
        try:
            self.engine.execute_graph_kernel(partition)  # NOTE: warm-up (first-run allocations, lazy setup)
            times = []
            for _ in range(RUNS):
                start = time.perf_counter()
                self.engine.execute_graph_kernel(partition)
                times.append(time.perf_counter() - start)
                if times[-1] > give_up or time.perf_counter() > self.deadline:
                    break
            return min(times)
        finally:
            for tensor, data in produced.items():
                tensor.data = data

    def create(self, candidate: Candidate) -> Kernel:
        """A graph kernel for a probe or split piece, made by its (simple) delegate."""
        view = self.views[candidate.rank]
        inputs, outputs = group_io(candidate.covered, self.engine.kernels, self.engine.outputs)
        arguments = [list(candidate.covered), inputs, outputs]
        if takes_build_argument(candidate.delegate.create_graph_kernel):
            arguments.append(view)
        return candidate.delegate.create_graph_kernel(*arguments)

    # ---- splits -------------------------------------------------------------------------

    def split(self, candidate: Candidate) -> None:
        """Probes a losing candidate op by op; around the op that loses most, its two sides become candidates."""
        delegate = candidate.delegate
        if not isinstance(delegate, SimpleDelegate) or len(candidate.covered) < 2:
            return
        probes = [self.candidate(delegate, candidate.rank, [k], role="probe") for k in candidate.covered]
        for probe in probes:
            self.time_candidate(probe)
        self.candidates.extend(probes)
        if any(p.seconds is None for p in probes):
            return
        at = max(range(len(probes)), key=lambda i: probes[i].seconds - probes[i].native_seconds)
        if probes[at].saving >= 0:
            return
        for side in (candidate.covered[:at], candidate.covered[at + 1:]):
            if len(side) > 1 and len(side) >= delegate.min_nodes_per_partition:
                piece = self.candidate(delegate, candidate.rank, side, role="split")
                self.time_candidate(piece)
                self.candidates.append(piece)

    # ---- choosing and applying ------------------------------------------------------------

    def choose(self) -> list[Candidate]:
        """Greedy by time saved: no overlap, no candidate slower than native, no cycle."""
        chosen: list[Candidate] = []
        taken: dict[NativeKernel, Candidate] = {}
        self.order = list(self.engine.kernels)
        for candidate in sorted(self.candidates, key=lambda c: (-c.saving, c.rank, c.key)):
            candidate.decision = "refused" if candidate.seconds is not None or candidate.failed else "not timed"
            if candidate.seconds is None:
                continue
            if candidate.saving <= 0:
                candidate.reason = candidate.reason or "slower than native"
                continue
            if candidate.saving < max(MARGIN * candidate.native_seconds, MARGIN_SECONDS):
                candidate.reason = candidate.reason or "not faster than native beyond the timing noise"
                continue
            rival = next((taken[k] for k in candidate.covered if k in taken), None)
            if rival is not None:
                candidate.reason = (f"overlaps a faster choice: {rival.delegate_name} ({_ms(rival.seconds)} for "
                                    f"{len(rival.covered)} node(s))")
                continue
            order = contiguous_order(self.engine.kernels, [c.covered for c in [*chosen, candidate]])
            if order is None:
                candidate.reason = "its kernels cannot run contiguously beside the partitions already chosen"
                continue
            self.order = order
            candidate.decision, candidate.reason = "chosen", ""
            chosen.append(candidate)
            taken.update(dict.fromkeys(candidate.covered, candidate))
        return chosen

    def apply(self, chosen: list[Candidate]) -> None:
        """Swaps the chosen graph kernels in; says on each refused proposal's kernels why they run natively."""
        engine = self.engine
        for candidate in chosen:
            if candidate.kernel is None:
                candidate.kernel = self.create(candidate)
        engine.kernels[:] = self.order  # choose()'s order for exactly the chosen partitions
        for candidate in sorted(chosen, key=lambda c: -engine.kernels.index(c.covered[0])):
            start = engine.kernels.index(candidate.covered[0])
            view = DelegateModel(engine.kernels, engine.inputs, engine.outputs, candidate.delegate, engine.log,
                                 self.context)
            view.replace(start, start + len(candidate.covered), candidate.kernel)
        covered = {k for c in chosen for k in c.covered}
        for candidate in self.candidates:
            if candidate.role == "proposed" and candidate.decision != "chosen":
                for kernel in candidate.covered:
                    if kernel not in covered:
                        engine.log.note(kernel, candidate.delegate, describe(candidate))


def describe(candidate: Candidate) -> str:
    """One line: the measured times and the decision."""
    if candidate.seconds is None:
        return f"measured placement: {candidate.reason or 'not timed'}"
    timing = f"{_ms(candidate.seconds)} against native {_ms(candidate.native_seconds)}"
    if candidate.decision == "chosen":
        return f"measured placement: {timing}, chosen"
    return f"measured placement: {timing}, refused ({candidate.reason})"


def node_placements(candidates: list[Candidate]) -> dict[NativeKernel, str]:
    """Per native kernel: the times and decisions of the proposed (or chosen) partitions covering it."""
    placed: dict[NativeKernel, list[str]] = {}
    for candidate in candidates:
        if candidate.role == "proposed" or candidate.decision == "chosen":
            line = f"{candidate.delegate_name} ({len(candidate.covered)} node(s)): {describe(candidate)}"
            for kernel in candidate.covered:
                placed.setdefault(kernel, []).append(line.replace("measured placement: ", ""))
    return {kernel: "; ".join(lines) for kernel, lines in placed.items()}


def report_rows(candidates: list[Candidate]) -> list[PlacementRow]:
    """The candidates as ``PlacementRow`` s: proposals, split pieces, then probes; by delegate, then in
    the order they were made (a delegate's proposals and probes in execution order)."""
    order = {"proposed": 0, "split": 1, "probe": 2}
    rows = []
    for c in sorted(candidates, key=lambda c: (order[c.role], c.rank)):
        name = c.kernel.name if c.decision == "chosen" and c.kernel is not None else ""
        rows.append(PlacementRow(c.delegate_name, name, tuple(k.name for k in c.covered), c.role, c.seconds,
                                 c.native_seconds, c.decision, c.reason, c.source))
    return rows


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def random_array(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Seeded input data: standard normal floats, zeros for integers (valid indices), random booleans."""
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return np.zeros(shape, dtype)


def group_io(group: list[Kernel], kernels: list[Kernel], model_outputs: list[Tensor]
             ) -> tuple[list[Tensor], list[Tensor]]:
    """A group of kernels' inputs (non-const tensors read in it but produced outside, in first-read
    order) and outputs (produced in it and read outside it, or model outputs)."""
    members = set(group)
    read_outside = {t for k in kernels if k not in members for t in k.inputs if t is not None}
    wanted = read_outside | set(model_outputs)
    return read_from_outside(group), [t for k in group for t in k.outputs if t in wanted]


class DecisionCache:
    """Candidate times on disk, one JSON file per cache key (a folder of small files).

    The folder is untrusted: an entry that is not a regular file, is too big, nests too deep or
    holds anything but the fields and types ``save`` writes is ignored (its candidates are timed
    again), and ``save`` writes a new file created exclusively beside the entry, never through a
    link planted there.
    """

    def __init__(self, setting: str | os.PathLike | None, key: str) -> None:
        self.directory = placement_cache_directory(setting)
        self.key = key

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / f"{self.key}.json"

    def load(self) -> dict[str, dict]:
        """The valid cached entries by candidate key; empty when absent, unreadable or malformed."""
        path = self.path
        if path is None:
            return {}
        try:
            data = _parse(read_regular_file(path, MAX_CACHE_BYTES, "placement cache file",
                                            limit_name="the cache's size limit", follow_links=False))
        except ModelFileError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError):
                logger.info("placement cache %s unreadable (%s); timing again", path, exc)
            return {}
        except (LiteError, ValueError) as exc:
            logger.info("placement cache %s unreadable (%s); timing again", path, exc)
            return {}
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or not isinstance(
                data.get("candidates"), dict):
            return {}
        entries = {key: _checked_entry(value) for key, value in data["candidates"].items() if _valid_key(key)}
        return {key: entry for key, entry in entries.items() if entry is not None}

    def save(self, candidates: list[Candidate]) -> None:
        """Writes the timed candidates (atomically); a failure to write only logs."""
        path = self.path
        if path is None:
            return
        entries = {c.key: {"seconds": c.seconds, "native_seconds": c.native_seconds, "role": c.role,
                           "reason": c.reason, "failed": c.failed}
                   for c in candidates if c.seconds is not None or c.failed}
        text = json.dumps({"format": CACHE_FORMAT, "candidates": entries}, indent=1)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, text.encode())
        except OSError as exc:
            logger.warning("could not write the placement cache %s: %s", path, exc)


# An unescaped quote (after an even run of backslashes) or a bracket: the tokens that set JSON's nesting.
_NESTING_TOKENS = re.compile(rb'(?<!\\)(?:\\\\)*"|[\[\]{}]')
_CACHE_KEY = re.compile(r"[0-9]{1,9}:[0-9]{1,9}(?:,[0-9]{1,9})*")
_ASCII_INT = re.compile(r"[0-9]{1,9}")


def _parse(data: bytes) -> object:
    """``data`` as JSON, refused (ValueError) when it nests deeper than ``MAX_CACHE_DEPTH``, holds an
    integer of more than 18 digits, NaN or Infinity."""
    depth, quoted = 0, False
    for token in _NESTING_TOKENS.finditer(data):
        mark = token.group()[-1:]
        if mark == b'"':
            quoted = not quoted
        elif not quoted:
            depth += 1 if mark in b"[{" else -1
            if depth > MAX_CACHE_DEPTH:
                raise ValueError(f"nested deeper than {MAX_CACHE_DEPTH} levels")
    return json.loads(data.decode("utf-8"), parse_int=_short_int, parse_constant=_no_constant)


def _short_int(text: str) -> int:
    if len(text) > 18:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a time")


def _ascii_int(text: str) -> int | None:
    """``text`` as an int when it is 1 to 9 ASCII digits (``str.isdigit`` also takes '²'), else None."""
    return int(text) if _ASCII_INT.fullmatch(text) else None


def _valid_key(key: str) -> bool:
    """A candidate key as ``Placer.candidate`` makes it: ``rank:place,place,...`` in ASCII digits."""
    return isinstance(key, str) and _CACHE_KEY.fullmatch(key) is not None


def _checked_entry(entry: object) -> dict | None:
    """The entry when it holds exactly what ``save`` writes: a timed entry (two times in range) or a
    failed one (no time), its role and its reason; else None."""
    if not isinstance(entry, dict) or set(entry) != CACHE_FIELDS:
        return None
    failed, role, reason = entry["failed"], entry["role"], entry["reason"]
    native, seconds = _seconds(entry["native_seconds"]), _seconds(entry["seconds"])
    if (not isinstance(failed, bool) or role not in ROLES or not isinstance(reason, str) or native is None
            or (seconds is None) != failed or (failed and entry["seconds"] is not None)):
        return None
    return {"seconds": seconds, "native_seconds": native, "role": role, "reason": reason, "failed": failed}


def _seconds(value: object) -> float | None:
    """``value`` as a time: a number (not a bool) from 0 to ``MAX_CACHED_SECONDS``; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_CACHED_SECONDS:
        return None  # NOTE: the range check first: float() of a 400-digit int overflows, a NaN fails it
    return float(value)


def placement_cache_directory(setting: str | os.PathLike | None) -> Path | None:
    """Where decisions are cached: None (off), a folder, or "default": ``$DELITE_PLACEMENT_CACHE``,
    else ``$XDG_CACHE_HOME/delite/placement`` (``~/.cache`` by default); "off" disables it."""
    return cache_folder(setting, CACHE_ENV, "placement")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def check_measurable(engine: Program) -> str:
    """Why measured placement cannot run on this engine ("" when it can)."""
    if engine.shapes_dirty:
        return ("measured placement needs static input shapes, and this model has dynamic dims (fix them with "
                "lite-convert --input-shapes): the delegates take their partitions in priority order")
    return ""

