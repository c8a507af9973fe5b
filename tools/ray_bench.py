"""Rows per second of offline batch inference: a plain loop in this process (the actors' callable, one
Model) against Ray Data actor pools (``lite.integrations.ray.predict_dataset``) of each size, on the same
rows, in one run.

    python -m lite.tools.ray_bench --model zoo:mobilenet_v2 --rows 1024 --batch-size 64 --actors 1,2

A zoo model is built with a dynamic batch where it can be; every actor runs one thread (``--thread-num``), and the plain
loop runs with one thread and with as many threads as the largest pool has actors. Ray's times include
starting the actors and building the model in each (what every job pays); the rows are in Ray's object
store before the clock starts.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import logging
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import lite
from lite.extras import require
from lite.integrations.ray import LitePredictor, predict_dataset
from lite.tools.benchmark import parse_input_shapes, random_inputs


def model_bytes(spec: str) -> bytes:
    """``zoo:NAME`` (built with a dynamic batch where it can be) or a .lite/.onnx path, as .lite bytes."""
    from lite.conversion import load_lite_bytes
    from lite.tools import zoo

    if not spec.startswith("zoo:"):
        return load_lite_bytes(spec)
    builder = zoo.MODELS.get(spec[4:])
    if builder is None:
        raise lite.InputError(f"unknown zoo model {spec[4:]!r}; the zoo has {', '.join(sorted(zoo.MODELS))}")
    dynamic = "dynamic_batch" in inspect.signature(builder).parameters
    return load_lite_bytes(builder(dynamic_batch=True) if dynamic else builder())


def built(path: Path, thread_num: int) -> lite.Model:
    model = lite.Model()
    model.build_from_file(path, context=lite.Context(thread_num=thread_num))
    return model


def random_rows(path: Path, rows: int, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Seeded random columns of ``rows`` rows, one per model input (``shapes`` sizes free dims past the batch)."""
    whole = [SimpleNamespace(name=t.name, dtype=t.dtype, shape=tuple(shapes.get(t.name, [rows, *t.shape[1:]])))
             for t in built(path, 1).get_inputs()]
    return random_inputs(whole)  # NOTE: it reads name, dtype and shape; a free dim left (-1) asks for --input-shapes


def plain_loop(path: Path, columns: dict[str, np.ndarray], batch_size: int, thread_num: int) -> float:
    """Rows per second of the actors' callable (one Model) in this process, ``batch_size`` rows at a time."""
    predict = LitePredictor(path, {"thread_num": thread_num})
    rows = len(next(iter(columns.values())))
    predict({name: column[:batch_size] for name, column in columns.items()})  # NOTE: warm, as an actor after a batch
    start = time.perf_counter()
    for first in range(0, rows, batch_size):
        predict({name: column[first:first + batch_size] for name, column in columns.items()})
    return rows / (time.perf_counter() - start)


def on_ray(path: Path, columns: dict[str, np.ndarray], batch_size: int, actors: int, thread_num: int) -> float:
    """Rows per second of ``predict_dataset`` on ``actors`` actors, from starting them to the last row."""
    ray_data = require("ray.data", "lite.tools.ray_bench")
    rows = len(next(iter(columns.values())))
    ds = in_object_store(ray_data, columns, blocks=4 * actors)
    start = time.perf_counter()
    predict_dataset(ds, path, {"thread_num": thread_num}, concurrency=actors, batch_size=batch_size).materialize()
    return rows / (time.perf_counter() - start)


def in_object_store(ray_data, columns: dict[str, np.ndarray], blocks: int):
    """A materialized Dataset of the columns, in ``blocks`` blocks (so that every actor gets some)."""
    parts = [ray_data.from_numpy(np.array_split(column, blocks)).rename_columns({"data": name})
             for name, column in columns.items()]
    return functools.reduce(lambda a, b: a.zip(b), parts).materialize()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pools = [int(n) for n in args.actors.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.lite"
        path.write_bytes(model_bytes(args.model))
        columns = random_rows(path, args.rows, parse_input_shapes(args.input_shapes))
        print(f"{args.model}: {args.rows} rows ({', '.join(f'{k} {v.shape[1:]}' for k, v in columns.items())}), "
              f"batch size {args.batch_size}, {os.cpu_count()} CPUs")
        for threads in sorted({args.thread_num, max(pools) * args.thread_num}):
            print(f"  plain loop, 1 process x {threads} thread(s): "
                  f"{plain_loop(path, columns, args.batch_size, threads):8.1f} rows/s")
        with local_ray():
            for actors in pools:
                print(f"  Ray Data, {actors} actor(s) x {args.thread_num} thread(s): "
                      f"{on_ray(path, columns, args.batch_size, actors, args.thread_num):8.1f} rows/s")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="zoo:mobilenet_v2", help="zoo:NAME, .lite or .onnx (default: %(default)s)")
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--actors", default="1,2", help="actor pool sizes, comma-separated (default: %(default)s)")
    p.add_argument("--thread-num", type=int, default=1, help="threads per actor (default: %(default)s)")
    p.add_argument("--input-shapes", metavar="NAME:D,D,...;...", help="whole-dataset shapes of inputs with "
                   "free dims past the batch, e.g. x:1024,128,768 for zoo:bert_encoder")
    return p.parse_args(argv)


@contextlib.contextmanager
def local_ray():
    """A local Ray with every CPU of this machine, quiet, shut down at the end."""
    ray = require("ray", "lite.tools.ray_bench")
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    require("ray.data", "lite.tools.ray_bench").DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
