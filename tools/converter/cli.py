"""``lite-convert``: the ONNX -> .lite converter on the command line."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lite.context import Context
from lite.delegates import load_delegate, parse_options
from lite.embedded import compile_into
from lite.errors import LiteError
from lite.schema.writer import write_model
from lite.tools import add_version
from lite.tools.converter import convert_to_graph
from lite.tools.converter.registry import supported_ops

PROGRESS_BYTES = 64 << 20  # models this big take seconds: lite-convert says each stage

EXAMPLES = """\
examples:
  lite-convert resnet18.onnx -o resnet18.lite
  lite-convert model.onnx -o model.lite --no-fusion
  lite-convert model.onnx -o model.lite --input-shapes input:1,3,224,224
  lite-convert model.onnx --input-shapes "a:1,3,32,32;b:1,10"      # writes model.lite
  lite-convert vendor.onnx -o vendor.lite --custom-domain com.example   # its ops become Custom ops
  lite-convert --list-ops                                              # the ONNX ops that convert
  lite-convert model.onnx -o model.lite --delegate tvm                 # TVM partitions compiled into the file
  lite-convert model.onnx -o model.lite --delegate tvm --delegate-option target=cuda
  lite-convert model.onnx -o model.lite --delegate ort                 # the partitions' ONNX graphs saved too
"""


def parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """``["name:1,3,224,224", "a:1,2;b:3"]`` -> ``{name: dims}`` (-1 keeps a dim dynamic)."""
    shapes: dict[str, list[int]] = {}
    for spec in (part.strip() for text in specs for part in text.split(";")):
        if not spec:
            continue
        name, _, dims = spec.rpartition(":")
        try:
            values = [int(d) for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            values = None
        if not name or values is None:
            raise argparse.ArgumentTypeError(
                f"bad --input-shapes {spec!r}: expected NAME:D1,D2,... such as input:1,3,224,224")
        shapes[name] = values
    return shapes


def list_ops() -> str:
    """The ONNX ops that convert, one per line with their mapper opsets (docs/ops.md has dtypes and delegates)."""
    ops = supported_ops()
    width = max(map(len, ops))
    lines = [f"{op:<{width}}  opsets {', '.join(map(str, versions))}" for op, versions in sorted(ops.items())]
    return "\n".join([*lines, f"{len(ops)} ONNX ops (domain ai.onnx); dtypes and delegates per op: docs/ops.md"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lite-convert", description="Convert an ONNX model to a Delite .lite model.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="the ONNX model (.onnx)")
    add_version(parser)
    parser.add_argument("--list-ops", action="store_true",
                        help="list the ONNX ops that convert, with the opsets where their meaning changed, and exit")
    parser.add_argument("-o", "--output", help="the .lite file to write (default: the model path with .lite)")
    parser.add_argument("--no-fusion", action="store_true",
                        help="keep BatchNormalization and activations as separate nodes")
    parser.add_argument("--input-shapes", "--input-shape", dest="input_shape", action="append", default=[],
                        metavar="NAME:DIMS;...",
                        help="set graph inputs' shapes, e.g. input:1,3,224,224 (';'-separated or repeatable; the "
                             "same option as lite-benchmark's and lite-tune's)")
    parser.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                        help=f"say each stage as it starts, on stderr (auto: for models of "
                             f"{PROGRESS_BYTES >> 20} MiB and more; default: %(default)s)")
    parser.add_argument("--delegate", action="append", default=[],
                        help="compile this delegate's partitions ahead of time and save them in the file (tvm, "
                             "ort, example_npu or module:Class; repeatable, priority order); the nodes stay too, so "
                             "the file also runs where a saved partition cannot")
    parser.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                        help="constructor option for the delegates, e.g. target=cuda (repeatable)")
    parser.add_argument("--custom-domain", action="append", default=[], metavar="DOMAIN",
                        help="keep the ops of this ONNX domain as Custom ops, run by kernels registered with "
                             "lite.register_custom_kernel or by delegates (repeatable)")
    return parser


class Stages:
    """Prints each conversion stage as it starts, with the seconds since the first, on stderr."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, stage: str) -> None:
        print(f"lite-convert: {time.perf_counter() - self.start:6.1f} s  {stage} ...", file=sys.stderr, flush=True)


def _shows_progress(args: argparse.Namespace) -> bool:
    if args.progress != "auto":
        return args.progress == "on"
    try:
        return os.path.getsize(args.model) >= PROGRESS_BYTES
    except OSError:
        return False  # the converter reports the unreadable file


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the converter; returns the exit code (0 ok, 1 conversion error, 2 usage error)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list_ops:
        print(list_ops())
        return 0
    if args.model is None:
        parser.error("the model is required (or --list-ops)")
    try:
        shapes = parse_input_shapes(args.input_shape)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    output = Path(args.output) if args.output else Path(args.model).with_suffix(".lite")
    stage = Stages() if _shows_progress(args) else None
    try:
        graph, report = convert_to_graph(args.model, fusion=not args.no_fusion, input_shapes=shapes,
                                         custom_domains=args.custom_domain, progress=stage)
        if stage:
            stage(f"writing {output}")
        data = write_model(graph)
        if args.delegate:
            if stage:
                stage(f"compiling partitions for {', '.join(args.delegate)}")
            data, notes = save_partitions(data, args.delegate, args.delegate_option)
        output.write_bytes(data)
    except (LiteError, OSError) as exc:
        print(f"lite-convert: error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    if args.delegate:
        print("\n".join(notes))
    print(f"wrote {output} ({len(data):,} bytes)")
    return 0


def save_partitions(data: bytes, names: list[str], options: list[str]) -> tuple[bytes, list[str]]:
    """The .lite ``data`` with the delegates' partitions compiled and saved in it, and a line per partition.

    Raises:
        LiteError: a delegate cannot be loaded, declines here, or the model does not build with it.
    """
    delegates = [d for d in (load_delegate(name, parse_options(options)) for name in names) if d is not None]
    for delegate in delegates:
        delegate.init()  # NOTE: a delegate that declines here would save nothing: say so, do not write a plain file
    data, saved, skipped = compile_into(data, Context(delegates=delegates))
    lines = [f"saved {p.delegate} {p.name}: {len(p.nodes)} nodes, {len(memoryview(p.blob)) / 1e6:.1f} MB"
             for p in saved]
    if not saved:
        lines.append(f"note: {', '.join(names)} saved no partition (no node runs on them, see lite-inspect)")
    return data, lines + skipped


if __name__ == "__main__":
    sys.exit(main())
