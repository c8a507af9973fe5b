"""``lite-convert``: the ONNX -> .lite converter on the command line."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import onnx

from lite.context import Context
from lite.delegates import load_delegate, parse_options
from lite.errors import LiteError
from lite.loader import load_onnx
from lite.model import compile_into
from lite.schema.writer import write_model
from lite.tools import add_version
from lite.tools.converter import convert_to_graph
from lite.tools.converter.quantize import (
    METHODS,
    MODES,
    accuracy_summary,
    load_calibration,
    quantize_model,
    tensor_report,
    write_report_csv,
)
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
  lite-convert model.onnx -o model_int8.lite --quantize static --calibration inputs.npz
  lite-convert model.onnx -o model_int8.lite --quantize dynamic --calibration inputs.npz --quantize-report q.csv
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
                        help="turn off every converter fusion: BatchNormalization folding, activations, LayerNorm, "
                             "GELU, attention and MatMul + bias blocks, canonical spellings, quantized groups "
                             "(which then stay as QuantizeLinear/DequantizeLinear around float ops)")
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
    _add_quantization(parser)
    return parser


def _add_quantization(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("quantization (onnxruntime.quantization, then conversion)")
    group.add_argument("--quantize", choices=MODES,
                       help="static: int8 weights and activations (QDQ, calibrated); dynamic: int8 weights, "
                            "activations quantized at run time; weight-only: int8 weights, float activations")
    group.add_argument("--calibration", metavar="FILE.npz",
                       help="inputs by name, each (N, *input shape): N samples; static calibrates on them, every "
                            "mode compares the quantized model with the float one on them")
    group.add_argument("--calibration-method", choices=METHODS, default="minmax",
                       help="how static quantization picks activation ranges (default: %(default)s)")
    group.add_argument("--per-tensor", action="store_true",
                       help="one scale per weight tensor (default: one per output channel)")
    group.add_argument("--quantize-report", metavar="FILE.csv",
                       help="write a row per quantized tensor: scales, zero points, and its error against the "
                            "float tensor")


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
    if not args.quantize and (args.calibration or args.quantize_report or args.per_tensor):
        parser.error("--calibration, --per-tensor and --quantize-report go with --quantize")
    output = Path(args.output) if args.output else Path(args.model).with_suffix(".lite")
    stage = Stages() if _shows_progress(args) else None
    quantizing = Quantizing(args, stage) if args.quantize else None
    try:
        source = quantizing.model() if quantizing else args.model
        graph, report = convert_to_graph(source, fusion=not args.no_fusion, input_shapes=shapes,
                                         custom_domains=args.custom_domain, progress=stage)
        if stage:
            stage(f"writing {output}")
        data = write_model(graph)
        if args.delegate:
            if stage:
                stage(f"compiling partitions for {', '.join(args.delegate)}")
            data, notes = save_partitions(data, args.delegate, args.delegate_option)
        output.write_bytes(data)
        quantized = quantizing.report(data) if quantizing else []
    except (LiteError, OSError) as exc:
        print(f"lite-convert: error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    if quantized:
        print("\n".join(quantized))
    if args.delegate:
        print("\n".join(notes))
    print(f"wrote {output} ({len(data):,} bytes)")
    return 0


class Quantizing:
    """lite-convert's ``--quantize``: the quantized ONNX model to convert, then the lines that say
    how close the written model is to the float one."""

    def __init__(self, args: argparse.Namespace, stage: Stages | None) -> None:
        self.args, self.stage = args, stage or (lambda _: None)
        self.float_model = self.samples = self.quantized = None

    def model(self) -> onnx.ModelProto:
        """The model quantized as ``--quantize`` says (the float model and samples are kept for ``report``)."""
        args = self.args
        self.stage("reading the ONNX model and the calibration samples")
        self.float_model = load_onnx(args.model)
        if args.calibration:
            self.samples = load_calibration(args.calibration, self.float_model)
        self.stage(f"quantizing ({args.quantize}) with onnxruntime")
        self.quantized = quantize_model(self.float_model, args.quantize, self.samples,
                                        method=args.calibration_method, per_channel=not args.per_tensor)
        return self.quantized.model

    def report(self, data: bytes) -> list[str]:
        """The accuracy table (with --calibration) and the per-tensor CSV (with --quantize-report)."""
        args = self.args
        lines = [self.describe()]
        if self.samples is not None:
            self.stage("comparing the quantized model with the float one")
            lines.append(accuracy_summary(self.float_model, data, self.samples).table())
        else:
            lines.append("no --calibration: the quantized model was not compared with the float one")
        if args.quantize_report:
            rows = tensor_report(self.quantized, self.samples)
            write_report_csv(rows, args.quantize_report)
            lines.append(f"wrote {args.quantize_report} ({len(rows)} quantized tensors)")
        return lines

    def describe(self) -> str:
        args = self.args
        weights = f"int8 weights per {'tensor' if args.per_tensor else 'channel'}"
        what = {"static": f"{weights}, int8 activations calibrated ({args.calibration_method}) on "
                          f"{_count(self.samples)} samples",
                "dynamic": f"{weights}, uint8 activations quantized at run time",
                "weight-only": f"{weights}, float activations"}[args.quantize]
        return f"quantized ({args.quantize}): {what}"


def _count(samples: dict | None) -> int:
    return len(next(iter(samples.values()))) if samples else 0


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
