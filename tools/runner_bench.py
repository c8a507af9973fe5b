"""Throughput of lite.ModelParallelRunner against one Model, on the same stream of requests.

    python -m lite.tools.runner_bench --model zoo:resnet18 --requests 64 --clients 4 --workers 2
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import lite
from lite.tools.sources import load_source


def serve(predict, requests: list[np.ndarray], clients: int) -> float:
    """Requests per second when ``clients`` threads share the stream."""
    chunks = [requests[i::clients] for i in range(clients)]
    threads = [threading.Thread(target=lambda c=c: [predict([x]) for x in c]) for c in chunks]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(requests) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="zoo:resnet18")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--thread-num", type=int, default=1)
    args = p.parse_args(argv)
    data, _, _ = load_source(args.model)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.lite"
        path.write_bytes(data)
        context = lite.Context(thread_num=args.thread_num)
        model = lite.Model()
        model.build_from_file(path, context=context)
        runner = lite.ModelParallelRunner(path, context, workers=args.workers)
    shape = model.get_inputs()[0].shape
    requests = [np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i in range(args.requests)]
    runner.predict([requests[0]]), model.predict([requests[0]])  # warm up
    one = serve(model.predict, requests, args.clients)
    pool = serve(runner.predict, requests, args.clients)
    print(f"{args.model}: one Model {one:.1f} req/s, ModelParallelRunner({args.workers} workers) {pool:.1f} req/s "
          f"({pool / one:.2f}x), {args.clients} client threads, thread_num={args.thread_num}")


if __name__ == "__main__":
    main()
