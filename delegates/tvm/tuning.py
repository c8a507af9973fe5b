"""MetaSchedule tuning of a model's TVM partitions (the engine behind ``lite-tune``).

1. Build the model with a TVMDelegate that lowers each partition (static shapes: MetaSchedule
   cannot tune a symbolic batch) without compiling it.
2. Legalize and fuse each module as ``compile_relax`` will (``relax.get_pipeline("zero")``),
   extract the fused functions as tasks, and merge identical ones across partitions.
3. Compile each task untuned and time it: tasks are tuned by their share of the untuned time
   (the costliest ones carrying ``time_share`` of it; trials follow the time).
4. Tune them with a JSON database in the given directory. The budget is the number of measured
   trials the database should hold for these tasks: a second run only tunes the difference,
   so an interrupted run resumes where it stopped.

``TVMDelegate(tuning_db=DIR)`` then compiles with the database (``compile_relax``), whose
workloads match because both sides fuse the same Relax module the same way.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lite
from lite.delegates.tvm.compiler import check_ffi_for_database
from lite.delegates.tvm.delegate import TVMDelegate

MS_LOGGER = "tvm.s_tir.meta_schedule"


class PartitionCollector(TVMDelegate):
    """A TVMDelegate whose graph kernels lower their partition (static shapes) and never compile."""

    def __init__(self, target: str | dict[str, Any] = "llvm", **options):
        super().__init__(target, cache_dir=None, symbolic_batch=False, **options)

    def create_graph_kernel(self, kernels, inputs, outputs, model):
        kernel = super().create_graph_kernel(kernels, inputs, outputs, model)
        kernel.lower_only = True
        return kernel


def partition_modules(data: bytes, target: str | dict[str, Any] = "llvm",
                      input_shapes: dict[str, list[int]] | None = None, thread_num: int = 1):
    """(delegate, [(graph kernel name, Relax IRModule)]) for the partitions TVM would compile.

    Raises:
        lite.InputError: an input shape is still dynamic (give ``input_shapes``).
        lite.NotSupportedError: TVM or the target's device is missing.
    """
    delegate = PartitionCollector(target)
    delegate.init()  # NOTE: raises NotSupportedError here, where a Model would silently run natively
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=thread_num, delegates=[delegate]))
    inputs = model.get_inputs()
    shapes = dict(input_shapes or {})
    unknown = set(shapes) - {t.name for t in inputs}
    if unknown:
        raise lite.InputError(f"input shapes name {sorted(unknown)}; the model's inputs are {[t.name for t in inputs]}")
    if shapes:
        model.resize(inputs, [shapes.get(t.name, list(t.shape)) for t in inputs])
    dynamic = [t.name for t in inputs if -1 in t.shape]
    if dynamic:
        raise lite.InputError(f"inputs {dynamic} have dynamic shapes; MetaSchedule tunes static shapes: give them "
                              "with --input-shapes name:1,3,224,224")
    return delegate, [(k.name, k.lowered.mod) for k in model.graph_kernels() if k.lowered is not None]


@dataclass
class Task:
    """One fused function to tune; ``weight`` counts its uses across partitions."""

    name: str
    mod: Any  # the fused PrimFunc's IRModule (MetaSchedule's workload)
    extracted: Any
    weight: int = 1
    partitions: list[str] = field(default_factory=list)
    seconds: float = 0.0  # one untuned run, measured (``measure_untuned``)

    @property
    def cost(self) -> float:
        """Its untuned time per predict: one run's time by its number of uses."""
        return self.seconds * self.weight


def extract_tasks(modules: list[tuple[str, Any]], target) -> list[Task]:
    """The tuning tasks of every partition, identical workloads merged."""
    import tvm_ffi
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    tasks: dict[tuple[int, str], Task] = {}
    for partition, mod in modules:
        with target:
            fused = relax.get_pipeline("zero")(mod)
        for extracted in ms.relax_integration.extract_tasks(fused, target):
            workload = extracted.dispatched[0]
            key = (tvm_ffi.structural_hash(workload), extracted.task_name)
            task = tasks.get(key)
            if task is None:
                tasks[key] = Task(extracted.task_name, workload, extracted, int(extracted.weight), [partition])
            else:
                task.weight += int(extracted.weight)
                task.partitions.append(partition)
    return list(tasks.values())


def measure_untuned(tasks: list[Task], target, repeats: int = 3) -> None:
    """Sets each task's ``seconds``: its untuned code (default schedule) compiled and run on random
    data, the median of ``repeats`` runs after a warm-up. CPU targets only: unscheduled GPU code
    does not compile, so there every task counts one second per use."""
    import numpy as np
    import tvm

    if target.kind.name != "llvm":
        for task in tasks:
            task.seconds = 1.0
        return
    device = tvm.cpu()
    rng = np.random.default_rng(0)
    for task in tasks:
        function = tvm.compile(task.mod, target=target).jit()["main"]
        arguments = [tvm.runtime.tensor(rng.random([int(d) for d in p.shape]).astype(p.dtype), device)
                     for p in task.mod["main"].params]
        function(*arguments)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            function(*arguments)
            times.append(time.perf_counter() - start)
        task.seconds = statistics.median(times)


def carrying(tasks: list[Task], share: float) -> list[Task]:
    """The fewest tasks, costliest first, whose untuned time is at least ``share`` of all tasks' time."""
    ranked = sorted(tasks, key=lambda t: -t.cost)
    total, kept, covered = sum(t.cost for t in tasks) or 1.0, [], 0.0
    for task in ranked:
        if covered >= share * total:
            break
        kept.append(task)
        covered += task.cost
    return kept


def share_table(tasks: list[Task], kept: list[Task]) -> str:
    """Every task's untuned time and share of the total, and whether it is tuned."""
    total = sum(t.cost for t in tasks) or 1.0
    lines = [f"  {'task':<40} {'uses':>4} {'untuned ms':>11} {'share':>6}  tuned"]
    for task in sorted(tasks, key=lambda t: -t.cost):
        share = 100 * task.cost / total
        lines.append(f"  {task.name[:40]:<40} {task.weight:>4} {task.cost * 1e3:>11.3f} {share:>5.1f}%"
                     f"  {'yes' if task in kept else 'no'}")
    return "\n".join(lines)


def measured_trials(database, tasks: list[Task], budget: int) -> int:
    """How many successful measurements the database already holds for ``tasks`` (at most ``budget`` each)."""
    total = 0
    for task in tasks:
        if database.has_workload(task.mod):
            total += len(database.get_top_k(database.commit_workload(task.mod), budget))
    return total


def cost_model_name(requested: str | None = None) -> str:
    """``requested``, or "xgb" when xgboost is installed, else "random"."""
    if requested:
        return requested
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return "random"
    return "xgb"


def build_candidate(mod, target, _params):
    """MetaSchedule's default_build, minus its ``import tvm.s_tir.tensor_intrin``.

    # NOTE: LocalBuilder starts fresh worker processes for every round, and that import (registering
    # CUDA/ROCm/ARM tensor intrinsics) took 45 s per worker on a 2-core machine, against 0.05 s for
    # the build itself. Float32 CPU schedules do not tensorize; a tensorized candidate already holds
    # its intrinsic's implementation, so building needs no registry either.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def progress_callback(bar) -> Any:
    """A MetaSchedule measure callback that advances a tqdm bar by each batch of measurements."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Progress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            bar.update(len(runner_results))

    return Progress()


@dataclass
class TuningSummary:
    partitions: list[str]
    tasks: list[Task]
    already_measured: int
    tuned_trials: int
    database: Path
    cost_model: str


def tune(data: bytes, database_dir: str | os.PathLike, trials: int, target: str | dict[str, Any] = "llvm",
         input_shapes: dict[str, list[int]] | None = None, thread_num: int | None = None,
         cost_model: str | None = None, trials_per_iter: int = 64, seed: int | None = None,
         progress: bool = True, log: Callable[[str], None] = print, build_timeout: float = 120.0,
         run_timeout: float = 60.0, time_share: float = 0.95) -> TuningSummary:
    """Tunes the model's TVM partitions until the database holds ``trials`` measurements for them.

    Args:
        data: the .lite model bytes.
        database_dir: the MetaSchedule database directory (created; reused when it exists).
        trials: measured trials the database should hold for this model's tasks.
        target: as for TVMDelegate.
        input_shapes: static shapes for dynamic inputs.
        thread_num: threads the tuned kernels will run with (TVM_NUM_THREADS; default: all cores).
        cost_model: "xgb" or "random" (default: xgb when xgboost is installed).
        trials_per_iter: candidates measured per round.
        build_timeout, run_timeout: seconds one candidate may take to build and to run
            (MetaSchedule's defaults, 30 s, fail most builds on a busy 2-core machine).
        time_share: tune only the costliest tasks that carry this share of the untuned time
            (each task is compiled untuned and timed first); their trials follow their time.

    Raises:
        lite.InputError: bad arguments, or no partition for TVM to tune.
    """
    from tqdm import tqdm
    from tvm.s_tir import meta_schedule as ms

    threads = thread_num or os.cpu_count() or 1
    os.environ["TVM_NUM_THREADS"] = str(threads)  # NOTE: the runner's workers inherit it; tune as you will run
    check_ffi_for_database()
    delegate, modules = partition_modules(data, target, input_shapes, threads)
    if not modules:
        raise lite.InputError("TVM takes no partition of this model: nothing to tune")
    tasks = extract_tasks(modules, delegate.target)
    measure_untuned(tasks, delegate.target)
    kept = carrying(tasks, time_share)
    log(f"untuned time by task; tuning the {len(kept)} that carry {100 * time_share:g}% of it:\n"
        + share_table(tasks, kept))
    tasks = kept
    work_dir = Path(database_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    done = measured_trials(database, tasks, trials)
    model_name = cost_model_name(cost_model)
    summary = TuningSummary([name for name, _ in modules], tasks, done, 0, work_dir, model_name)
    log(f"{len(modules)} partition(s), {len(tasks)} task(s) for {delegate.target}; "
        f"the database holds {done} of {trials} trials")
    remaining = trials - done
    if remaining <= 0:
        return summary
    tasks = [t for t in tasks if not t.mod.attrs.get("tirx.is_scheduled", False)]
    contexts, _ = ms.relax_integration.extracted_tasks_to_tune_contexts(
        [t.extracted for t in tasks], str(work_dir), seed=seed)
    weights = [t.cost for t in tasks]  # NOTE: the scheduler spends trials where the measured time is
    # NOTE: a budget below tasks x trials_per_iter would leave the last tasks untuned (the scheduler tunes
    # each task once before it picks by gradient), so every task first gets an equal share.
    per_iter = max(1, min(trials_per_iter, remaining // len(tasks)))
    ms_logger = logging.getLogger(MS_LOGGER)
    previous = ms_logger.level
    if progress:
        ms_logger.setLevel(logging.WARNING)  # NOTE: the progress bar replaces MetaSchedule's console log
    try:
        with tqdm(total=remaining, desc="tuning", unit="trial", disable=not progress, file=sys.stderr) as bar:
            callbacks = list(ms.MeasureCallback.create("default")) + [progress_callback(bar)]
            ms.tune.tune_tasks(tasks=contexts, task_weights=weights, work_dir=str(work_dir),
                               max_trials_global=remaining, num_trials_per_iter=per_iter,
                               builder=ms.builder.LocalBuilder(timeout_sec=build_timeout, f_build=build_candidate),
                               runner=ms.runner.LocalRunner(timeout_sec=run_timeout),
                               database=database, cost_model=model_name, measure_callbacks=callbacks)
    finally:
        ms_logger.setLevel(previous)
    summary.tuned_trials = measured_trials(database, tasks, trials) - done
    return summary
