"""lite-benchmark --generate: ``lite.Generator`` against onnxruntime's own greedy loop on the same decoder.

Both engines generate greedily from the same seeded random prompt (batch 1) at the same thread count, round by
round, interleaved with a pause before each so that neither engine's spinning threads slow the other; the report
gives the medians over the rounds and checks that the two engines chose the same tokens in every round.
onnxruntime's loop (``OnnxRuntimeDecoder``) uses IO binding: each step's ``present`` OrtValues are bound as the
next step's ``past`` inputs, as an application serving a decoder with onnxruntime would.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

import lite
from lite.errors import InputError
from lite.extras import ort_session_options, require
from lite.generate import DecoderNames

ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32}


@dataclass
class GenerationTimes:
    """One generation's figures (or the medians of several), as ``lite.GenerationStats`` defines them."""

    time_to_first_token_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    token_latency_p50_ms: float
    token_latency_p90_ms: float

    @classmethod
    def of(cls, prompt_tokens: int, first_s: float, steps_s: list[float]) -> GenerationTimes:
        """From the time to the first token and each decode step's time (batch 1)."""
        steps = np.asarray(steps_s) * 1e3
        return cls(first_s * 1e3, prompt_tokens / first_s, len(steps) / steps.sum() * 1e3 if len(steps) else 0.0,
                   float(np.percentile(steps, 50)) if len(steps) else 0.0,
                   float(np.percentile(steps, 90)) if len(steps) else 0.0)

    @classmethod
    def median(cls, runs: list[GenerationTimes]) -> GenerationTimes:
        return cls(**{name: float(np.median([getattr(r, name) for r in runs])) for name in asdict(runs[0])})


@dataclass
class GenerateReport:
    """What ``lite-benchmark --generate`` measured (written by --json)."""

    model: str
    delegates: list[str]
    thread_num: int
    prompt_length: int
    new_tokens: int
    rounds: int
    warmup: int
    pause_ms: float
    medians: dict[str, GenerationTimes]  # "lite", "onnxruntime"
    ratios: dict[str, float]  # lite / onnxruntime, per figure
    tokens_identical: bool  # in every round, both engines chose the same tokens
    first_difference: int | None  # the first token where they differ (None: identical)
    tokens: dict[str, list[int]]  # each engine's tokens in the first timed round
    samples: dict[str, list[GenerationTimes]] = field(default_factory=dict)


class OnnxRuntimeDecoder:
    """onnxruntime's greedy loop over a decoder with its KV cache as inputs and outputs (``DecoderNames``).

    IO binding throughout: the prompt and cache inputs are bound, the logits are written into a numpy buffer
    bound as the output, and each step's ``present`` OrtValues are bound as the next step's ``past`` inputs.

    Args:
        source: an ``.onnx`` path or the model's bytes.
        thread_num: onnxruntime's intra-op threads (inter-op: 1).
        names: the decoder's input and output names.

    Raises:
        InputError: the model lacks a name, or its cache's heads or head size are not fixed numbers.
    """

    def __init__(self, source: str | bytes, thread_num: int, names: DecoderNames | None = None) -> None:
        ort = require("onnxruntime", "lite-benchmark --generate")
        options = ort_session_options(ort.SessionOptions())
        options.intra_op_num_threads, options.inter_op_num_threads = thread_num, 1
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        self.names = names or DecoderNames()
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        n, layers = self.names, 0
        while n.past_key.format(layers) in self.inputs:
            layers += 1
        self.cache = [(past.format(i), present.format(i)) for i in range(layers)
                      for past, present in ((n.past_key, n.present_key), (n.past_value, n.present_value))]
        missing = [x for x in [n.input_ids, *(p for p, _ in self.cache)] if x not in self.inputs]
        missing += [x for x in [n.logits, *(p for _, p in self.cache)] if x not in self.outputs]
        if not layers or missing:
            raise InputError(f"not a decoder with a KV cache in the names {self.names}: missing "
                             f"{missing or [n.past_key.format(0)]}")
        self.vocabulary = self._vocabulary()

    def generate(self, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float, list[float]]:
        """Greedy tokens after ``prompt`` [batch, length]: (tokens [batch, new_tokens], seconds to the first
        token, each decode step's seconds)."""
        start = time.perf_counter()
        binding = self.session.io_binding()
        batch, length = prompt.shape
        self._bind_small(binding, prompt, 0, length)
        for past, _ in self.cache:
            binding.bind_cpu_input(past, self._empty_cache(past, batch))
        token, present = self._step(binding, batch, length)
        first, tokens, steps, total = time.perf_counter() - start, [token], [], length
        while len(tokens) < new_tokens:
            began = time.perf_counter()
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            self._bind_small(binding, token[:, None], total, total + 1)
            for (past, _), value in zip(self.cache, present, strict=True):
                binding.bind_ortvalue_input(past, value)
            token, present = self._step(binding, batch, 1)
            tokens.append(token)
            total += 1
            steps.append(time.perf_counter() - began)
        return np.stack(tokens, axis=1), first, steps

    def _vocabulary(self) -> int:
        """The logits' last dimension (the vocabulary size)."""
        shape = next(o.shape for o in self.session.get_outputs() if o.name == self.names.logits)
        if not isinstance(shape[-1], int):
            raise InputError(f"the logits output's vocabulary dimension is {shape[-1]!r}, not a fixed size")
        return shape[-1]

    def _bind_small(self, binding, ids: np.ndarray, first: int, total: int) -> None:
        """input_ids at positions first.., attention_mask over ``total`` and position_ids where the model has them."""
        n, (batch, seq) = self.names, ids.shape
        binding.bind_cpu_input(n.input_ids, np.ascontiguousarray(ids, self._dtype(n.input_ids)))
        if n.attention_mask in self.inputs:
            binding.bind_cpu_input(n.attention_mask, np.ones((batch, total), self._dtype(n.attention_mask)))
        if n.position_ids in self.inputs:
            row = np.arange(first, first + seq, dtype=self._dtype(n.position_ids))
            binding.bind_cpu_input(n.position_ids, np.tile(row, (batch, 1)))

    def _step(self, binding, batch: int, seq: int) -> tuple[np.ndarray, list]:
        """Runs the bound inputs; (the chosen token per row, the present OrtValues in ``self.cache`` order)."""
        logits = np.empty((batch, seq, self.vocabulary), np.float32)
        binding.bind_output(self.names.logits, "cpu", 0, np.float32, list(logits.shape), logits.ctypes.data)
        for _, present in self.cache:
            binding.bind_output(present, "cpu")
        self.session.run_with_iobinding(binding)
        values = dict(zip([self.names.logits] + [p for _, p in self.cache], binding.get_outputs(), strict=True))
        return logits[:, -1].argmax(-1).astype(np.int64), [values[p] for _, p in self.cache]

    def _empty_cache(self, name: str, batch: int) -> np.ndarray:
        shape = self.inputs[name].shape
        if not all(isinstance(d, int) for d in (shape[1], shape[3])):
            raise InputError(f"input {name!r} has shape {shape}: its heads and head size must be fixed numbers")
        return np.zeros((batch, shape[1], 0, shape[3]), self._dtype(name))

    def _dtype(self, name: str) -> type:
        kind = self.inputs[name].type
        if kind not in ORT_DTYPES:
            raise InputError(f"input {name!r} is a {kind}: the loop feeds {', '.join(ORT_DTYPES)}")
        return ORT_DTYPES[kind]


# ---- the run ---------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> GenerateReport:
    """Builds both engines, generates round by round, and compares tokens and times.

    Raises:
        InputError: the model is not such a decoder, or its ONNX file is missing for onnxruntime.
    """
    from lite.delegates import load_delegate, parse_options
    from lite.tools.bench_inputs import build_model
    from lite.tools.sources import load_source

    require("onnxruntime", "lite-benchmark --generate")
    data, onnx_model, _ = load_source(args.model)
    ort = OnnxRuntimeDecoder(_onnx_source(args, onnx_model), args.thread_num)
    options = parse_options(args.delegate_option)
    delegates = [d for d in (load_delegate(s, options) for s in args.delegate) if d is not None]
    generator = lite.Generator(build_model(data, args, delegates))
    prompt = seeded_prompt(args.seed, ort.vocabulary, args.prompt_length)
    rounds = measure(generator, ort, prompt, args)
    return report_of(args, rounds)


def seeded_prompt(seed: int, vocabulary: int, length: int) -> np.ndarray:
    """The prompt both engines get: ``length`` seeded random token ids below ``vocabulary``, [1, length]."""
    return np.random.default_rng(seed).integers(0, vocabulary, (1, length))


def _onnx_source(args: argparse.Namespace, onnx_model: Any) -> str | bytes:
    if args.model.startswith("zoo:"):
        return onnx_model.SerializeToString()
    if onnx_model is not None:
        return args.model  # NOTE: the path, so that external data resolves
    if not args.onnx:
        raise InputError("--generate needs the ONNX model for onnxruntime: give an .onnx model or --onnx")
    return args.onnx


Round = tuple[list[int], GenerationTimes]


def measure(generator: lite.Generator, ort: OnnxRuntimeDecoder, prompt: np.ndarray,
            args: argparse.Namespace) -> dict[str, list[Round]]:
    """``args.warmup`` untimed generations per engine, then ``args.loop_count`` rounds, interleaved with a pause
    of ``args.pause_ms`` before each generation."""
    engines = {"lite": lambda: _lite_round(generator, prompt, args.new_tokens),
               "onnxruntime": lambda: _ort_round(ort, prompt, args.new_tokens)}
    for _ in range(args.warmup):
        for engine in engines.values():
            engine()
    rounds: dict[str, list[Round]] = {name: [] for name in engines}
    for _ in tqdm(range(args.loop_count), desc="generate", disable=None, leave=False, file=sys.stderr):
        for name, engine in engines.items():
            time.sleep(args.pause_ms / 1e3)
            rounds[name].append(engine())
    return rounds


def _lite_round(generator: lite.Generator, prompt: np.ndarray, new_tokens: int) -> Round:
    result = generator.generate(prompt, new_tokens)
    s = result.stats
    return result.tokens[0], GenerationTimes(s.time_to_first_token_s * 1e3, s.prefill_tokens_per_s,
                                             s.decode_tokens_per_s, s.token_latency_p50_ms, s.token_latency_p90_ms)


def _ort_round(ort: OnnxRuntimeDecoder, prompt: np.ndarray, new_tokens: int) -> Round:
    tokens, first, steps = ort.generate(prompt, new_tokens)
    return tokens[0].tolist(), GenerationTimes.of(prompt.shape[1], first, steps)


def report_of(args: argparse.Namespace, rounds: dict[str, list[Round]]) -> GenerateReport:
    """Medians, ratios (lite / onnxruntime) and the token check over every round."""
    medians = {name: GenerationTimes.median([times for _, times in runs]) for name, runs in rounds.items()}
    lite_m, ort_m = asdict(medians["lite"]), asdict(medians["onnxruntime"])
    ratios = {name: lite_m[name] / ort_m[name] if ort_m[name] else 0.0 for name in lite_m}
    expected = rounds["lite"][0][0]
    differences = [first_difference(expected, tokens) for runs in rounds.values() for tokens, _ in runs]
    found = [d for d in differences if d is not None]
    return GenerateReport(
        args.model, args.delegate or ["native"], args.thread_num, args.prompt_length, args.new_tokens,
        args.loop_count, args.warmup, args.pause_ms, medians, ratios, not found, min(found, default=None),
        {name: runs[0][0] for name, runs in rounds.items()},
        {name: [times for _, times in runs] for name, runs in rounds.items()})


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where the token lists differ (a shorter list differs where it ends); None if equal."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return None if at == len(a) == len(b) else at


# ---- the report ------------------------------------------------------------------------------------------------

ROWS = {"time_to_first_token_ms": ("time to first token", "ms"), "prefill_tokens_per_s": ("prefill", "tokens/s"),
        "decode_tokens_per_s": ("decode", "tokens/s"), "token_latency_p50_ms": ("decode step p50", "ms"),
        "token_latency_p90_ms": ("decode step p90", "ms")}


def print_report(report: GenerateReport, out=None) -> None:
    """The table of medians per engine, the ratios and the token check."""
    w = (out or sys.stdout).write
    w(f"model: {report.model}  delegates: {', '.join(report.delegates)}  threads: {report.thread_num}\n")
    w(f"generate: a {report.prompt_length}-token prompt (seeded random ids), {report.new_tokens} greedy tokens, "
      f"batch 1; medians of {report.rounds} rounds per engine after {report.warmup} warmup, interleaved with a "
      f"{report.pause_ms:g} ms pause before each\n")
    w(f"{'':<22} {'lite':>12} {'onnxruntime':>12} {'lite / onnxruntime':>19}\n")
    lite_m, ort_m = asdict(report.medians["lite"]), asdict(report.medians["onnxruntime"])
    for name, (label, unit) in ROWS.items():
        w(f"{label + ' (' + unit + ')':<22} {lite_m[name]:12.2f} {ort_m[name]:12.2f} {report.ratios[name]:19.2f}\n")
    w(token_line(report))


def token_line(report: GenerateReport) -> str:
    """Whether both engines chose the same tokens in every round."""
    if report.tokens_identical:
        return f"tokens: the {report.new_tokens} greedy tokens are identical in both engines, in every round\n"
    return (f"tokens: the engines' greedy tokens differ from token {report.first_difference} on (first round: lite "
            f"{report.tokens['lite'][:12]}..., onnxruntime {report.tokens['onnxruntime'][:12]}...)\n")


def exit_status(report: GenerateReport) -> int:
    """0 when the tokens are identical, else 1 (an accuracy miss)."""
    if not report.tokens_identical:
        print(f"lite-benchmark: --generate: the greedy tokens differ between lite and onnxruntime from token "
              f"{report.first_difference} on", file=sys.stderr)
        return 1
    return 0
