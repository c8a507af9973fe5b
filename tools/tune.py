"""lite-tune: MetaSchedule tuning of a model's TVM partitions, into a resumable database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import lite
from lite.extras import require
from lite.tools import add_version

EXAMPLES = """examples:
  lite-tune model.lite --target llvm --trials 256 --db tuned/
  lite-tune zoo:resnet18 --trials 64 --db r18_db --cost-model random
  lite-tune model.onnx --input-shapes input:1,3,224,224 --trials 1000 --db db/ --thread-num 4

then run with the database:
  lite-benchmark model.lite --delegate tvm --delegate-option tuning_db=tuned/
  TVMDelegate("llvm", tuning_db="tuned/")      # in Python

--trials is the number of measured trials the database should hold for this model's
kernels: run the same command again (or with a larger --trials) to resume. Tune with the
thread count you will run with (--thread-num, TVM_NUM_THREADS) and on the target machine.
Needs the extras tvm and tune: pip install "delite[tvm,tune]" (xgboost for the default cost model).
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lite-tune", description="Tune a model's TVM partitions with MetaSchedule.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help=".lite, .onnx or zoo:NAME")
    add_version(p)
    p.add_argument("--db", required=True, type=Path, metavar="DIR", help="the MetaSchedule database directory")
    p.add_argument("--trials", required=True, type=int, help="measured trials the database should hold (total)")
    p.add_argument("--target", default="llvm",
                   help='a TVM target name, or JSON ({"kind": "llvm", "mcpu": ...}) (default: %(default)s)')
    p.add_argument("--input-shapes", metavar="NAME:D,D,...;...", help="static shapes for dynamic inputs")
    p.add_argument("--thread-num", type=int, help="threads the model will run with (default: all cores)")
    p.add_argument("--cost-model", choices=["xgb", "random"], help="default: xgb if xgboost is installed")
    p.add_argument("--trials-per-iter", type=int, default=64,
                   help="candidates measured per round (default: %(default)s)")
    p.add_argument("--time-share", type=float, default=0.95,
                   help="tune the costliest tasks that carry this share of the untuned time, measured first "
                        "(default: %(default)s)")
    p.add_argument("--seed", type=int, help="seed of the search")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.trials < 1 or args.trials_per_iter < 1 or (args.thread_num is not None and args.thread_num < 1):
        p.error("--trials, --trials-per-iter and --thread-num must be >= 1")
    if not 0 < args.time_share <= 1:
        p.error("--time-share must be in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lite-tune``."""
    from lite.tools.benchmark import parse_input_shapes
    from lite.tools.sources import load_source

    args = parse_args(argv)
    try:
        for module in ("tvm", "cloudpickle", "psutil"):
            require(module, "tuning")
        from lite.delegates.tvm.tuning import tune

        data, _, _ = load_source(args.model)
        summary = tune(data, args.db, args.trials, args.target, parse_input_shapes(args.input_shapes),
                       args.thread_num, args.cost_model, args.trials_per_iter, args.seed, progress=not args.quiet,
                       log=lambda line: print(line, file=sys.stderr), time_share=args.time_share)
    except (lite.LiteError, OSError, ValueError) as exc:
        print(f"lite-tune: {exc}", file=sys.stderr)
        return 1
    print(f"tuned {summary.tuned_trials} trials ({summary.already_measured} were in the database) for "
          f"{len(summary.tasks)} task(s) of {len(summary.partitions)} partition(s), cost model {summary.cost_model}")
    print(f"database: {summary.database}")
    print(f"use it: TVMDelegate(target, tuning_db={str(summary.database)!r}) or "
          f"lite-benchmark {args.model} --delegate tvm --delegate-option tuning_db={summary.database}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
