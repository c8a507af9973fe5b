"""Build time of a .lite file with delegate partitions saved in it, against a cold build, in fresh processes.

    python -m lite.tools.saved_bench --model resnet18 --model bert_encoder --delegate tvm --delegate ort
    python -m lite.tools.saved_bench --model resnet50 --delegate tvm --delegate-option target=cuda

For each zoo model and delegate, the model is converted twice: plainly, and with the delegate's
partitions compiled and saved (``lite-convert --delegate``). Then, interleaved over ``--repeats``
rounds, a fresh process builds each file with the delegate and predicts once:

- cold: the plain file, the delegate compiling everything (TVM's module cache off);
- saved: the file with saved partitions; for TVM in a process where ``import tvm`` fails (the
  runtime alone, as on a device without a compiler), with ``trust_saved_code``.

It prints the median build time of each (``Model.build_from_file``; the process start and
``import lite`` are left out, as both pay them), their ratio, and the relative L2 error of the
saved build's output against onnxruntime on the original model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import onnx

import lite
from lite.delegates import load_delegate, parse_options
from lite.extras import ort_session_options
from lite.model import compile_into
from lite.tools import zoo
from lite.tools.converter import convert

CHILD = """
import json, sys, time
if sys.argv[4] == "saved" and sys.argv[3] == "tvm":
    sys.modules["tvm"] = None  # the TVM runtime alone: its compiler cannot be imported here
import numpy as np
import lite
from lite.delegates import load_delegate

options = json.loads(sys.argv[6])
if sys.argv[3] == "tvm":
    options.update(cache_dir=None, trust_saved_code=True)
context = lite.Context(thread_num=int(sys.argv[5]), delegates=[load_delegate(sys.argv[3], options)])
model = lite.Model()
start = time.perf_counter()
model.build_from_file(sys.argv[1], context=context)
seconds = time.perf_counter() - start
np.save(sys.argv[2] + ".out.npy", model.predict([np.load(sys.argv[2])])[0].get_data_to_numpy())
rows = model.partition_report()
print(json.dumps({"seconds": seconds, "loaded": sum(r.blob.startswith("loaded") for r in rows),
                  "delegated": sum(r.runs_on != "native" for r in rows), "nodes": len(rows),
                  "not_loaded": sorted({r.blob for r in rows if r.blob and not r.blob.startswith("loaded")})}))
"""


def models(names: list[str]) -> dict[str, onnx.ModelProto]:
    return {name: zoo.MODELS[name]() for name in names}


def child(path: Path, feed: Path, delegate: str, options: dict, kind: str, threads: int) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(path), str(feed), delegate, kind,
                             str(threads), json.dumps(options)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{kind} build of {path.name} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(name: str, onnx_model: onnx.ModelProto, delegate: str, options: dict, repeats: int, threads: int,
            folder: Path) -> dict:
    """Cold and saved build times (medians) of one model on one delegate (constructed with ``options``),
    and the saved build's error."""
    import onnxruntime

    plain = convert(onnx_model)
    compiling = {**options, "cache_dir": None} if delegate == "tvm" else options
    saved, partitions, _ = compile_into(plain, lite.Context(delegates=[load_delegate(delegate, compiling)]))
    paths = {"cold": folder / f"{name}.lite", "saved": folder / f"{name}_{delegate}.lite"}
    paths["cold"].write_bytes(plain)
    paths["saved"].write_bytes(saved)
    value = onnx_model.graph.input[0]
    feed = np.random.default_rng(0).standard_normal([d.dim_value for d in value.type.tensor_type.shape.dim])
    feed_path = folder / f"{name}.npy"
    np.save(feed_path, feed.astype(np.float32))
    times: dict[str, list[float]] = {"cold": [], "saved": []}
    for _ in range(repeats):
        for kind, path in paths.items():
            report = child(path, feed_path, delegate, options, kind, threads)
            times[kind].append(report["seconds"])
    session = onnxruntime.InferenceSession(onnx_model.SerializeToString(), ort_session_options(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, {value.name: np.load(feed_path)})[0]
    got = np.load(str(feed_path) + ".out.npy")
    error = float(np.linalg.norm(got - expected) / np.linalg.norm(expected))
    cold, fast = statistics.median(times["cold"]), statistics.median(times["saved"])
    named = " ".join([delegate, *(f"{key}={value}" for key, value in options.items())])
    return {"model": name, "delegate": named, "partitions": len(partitions), "loaded": report["loaded"],
            "delegated": report["delegated"], "nodes": report["nodes"], "not_loaded": report["not_loaded"],
            "cold_s": cold, "saved_s": fast, "ratio": fast / cold, "error": error, "file_mb": len(saved) / 1e6,
            "plain_mb": len(plain) / 1e6}


def table(rows: list[dict]) -> str:
    header = ("| model | delegate | cold build (s) | saved build (s) | saved / cold | error vs onnxruntime | file (MB) "
              "| nodes loaded |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['delegate']} | {r['cold_s']:.2f} | {r['saved_s']:.2f} | {r['ratio']:.1%} | "
              f"{r['error']:.1e} | {r['plain_mb']:.0f} -> {r['file_mb']:.0f} | {r['loaded']} of {r['nodes']} |"
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], choices=sorted(zoo.MODELS),
                   help="zoo models (repeatable; default: resnet18 and bert_encoder)")
    p.add_argument("--delegate", action="append", default=[], choices=["tvm", "ort", "example_npu"],
                   help="delegates (repeatable; default: tvm and ort)")
    p.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                   help="constructor option for the delegates, e.g. target=cuda (repeatable)")
    p.add_argument("--repeats", type=int, default=3, help="fresh-process builds of each file (default: %(default)s)")
    p.add_argument("--thread-num", type=int, default=2)
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    options = parse_options(args.delegate_option)
    rows = []
    with tempfile.TemporaryDirectory(prefix="delite-saved-bench-") as folder:
        for name, onnx_model in models(args.model or ["resnet18", "bert_encoder"]).items():
            for delegate in args.delegate or ["tvm", "ort"]:
                rows.append(measure(name, onnx_model, delegate, options, args.repeats, args.thread_num,
                                    Path(folder)))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    for row in rows:
        for reason in row["not_loaded"]:
            print(f"{row['model']} on {row['delegate']}, saved build: {reason}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
