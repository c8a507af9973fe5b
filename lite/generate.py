"""Generator: text generation over a decoder model whose KV cache is graph inputs and outputs.

The model follows Hugging Face's export naming (``DecoderNames`` changes it): ``input_ids``, ``attention_mask``,
optional ``position_ids`` and ``past_key_values.{i}.key/.value`` [batch, heads, past, head_dim] in; ``logits``
[batch, seq, vocab] and ``present.{i}.key/.value`` [batch, heads, past + seq, head_dim] out. One predict runs the
whole prompt with an empty cache (prefill), then one predict per new token (decode), each reading the cache the
step before wrote. How it works and what is not done yet: docs/generate.md.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lite.arguments import positive_int
from lite.context import Context
from lite.errors import InputError
from lite.model import Model
from lite.tensor import Tensor

TokenCallback = Callable[[np.ndarray], None]


@dataclass(frozen=True)
class DecoderNames:
    """The decoder's input and output names; ``{}`` in the cache names is the layer index."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    past_key: str = "past_key_values.{}.key"
    past_value: str = "past_key_values.{}.value"
    logits: str = "logits"
    present_key: str = "present.{}.key"
    present_value: str = "present.{}.value"


@dataclass
class GenerationStats:
    """Timings of one ``Generator.generate`` call (tokens count every row of the batch).

    Attributes:
        batch: rows generated at once.
        prompt_tokens: prompt tokens per row.
        generated_tokens: new tokens per row (the longest row, stop token included).
        time_to_first_token_s: from the call to the first token chosen (the prefill and one sampling).
        prefill_tokens_per_s: batch * prompt_tokens over the prefill's time.
        decode_tokens_per_s: the tokens of the decode steps (every row) over their time; 0.0 without one.
        token_latency_p50_ms, token_latency_p90_ms: a decode step's time (predict and sampling), median and
            90th percentile; 0.0 without a decode step.
        peak_rss_mb: the process's peak resident memory so far (MiB).
        load_s: seconds the Generator's build took (``Model.build_timings`` summed).
    """

    batch: int
    prompt_tokens: int
    generated_tokens: int
    time_to_first_token_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    token_latency_p50_ms: float
    token_latency_p90_ms: float
    peak_rss_mb: float
    load_s: float


@dataclass
class GenerationResult:
    """What ``Generator.generate`` returns: the new tokens of each row, and the stats.

    A row that chose a stop token ends with it; the other rows run to ``max_new_tokens``.
    """

    tokens: list[list[int]]
    stats: GenerationStats


@dataclass
class _Sampler:
    temperature: float
    top_k: int
    top_p: float
    rng: np.random.Generator

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        """One token per row of ``logits`` [batch, vocab]: argmax at temperature 0, else a draw."""
        if self.temperature == 0.0:
            return logits.argmax(axis=-1).astype(np.int64)
        return np.array([self._draw(row) for row in logits.astype(np.float64)], dtype=np.int64)

    def _draw(self, row: np.ndarray) -> int:
        order = np.argsort(-row, kind="stable")
        if self.top_k:
            order = order[:self.top_k]
        scaled = row[order] / self.temperature
        probs = np.exp(scaled - scaled[0])
        probs /= probs.sum()
        if self.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p)) + 1
            probs = probs[:keep] / probs[:keep].sum()
        at = int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum(), side="right"))
        return int(order[min(at, len(probs) - 1)])


@dataclass
class _Run:
    """One generate call's state: the rows' tokens, which have stopped, and the step times."""

    stops: frozenset[int]
    callback: TokenCallback | None
    tokens: list[list[int]] = field(default_factory=list)
    done: np.ndarray | None = None
    steps: list[float] = field(default_factory=list)

    def take(self, chosen: np.ndarray) -> None:
        """Records one step's tokens (rows already stopped get none) and calls the callback."""
        if self.done is None:
            self.done = np.zeros(len(chosen), bool)
            self.tokens = [[] for _ in chosen]
        shown = np.where(self.done, -1, chosen)
        for row, token in enumerate(shown):
            if token >= 0:
                self.tokens[row].append(int(token))
        self.done |= np.isin(chosen, list(self.stops)) if self.stops else False
        if self.callback is not None:
            self.callback(shown)


class Generator:
    """Generates tokens with a decoder model: a prefill over the prompt, then one predict per token.

    Example:
        >>> gen = lite.Generator("decoder.onnx", context=lite.Context(thread_num=2))   # doctest: +SKIP
        >>> result = gen.generate([5, 7, 9], max_new_tokens=16)                          # doctest: +SKIP
        >>> result.tokens, result.stats.decode_tokens_per_s                              # doctest: +SKIP

    Args:
        model: a ``.lite`` or ``.onnx`` path, the bytes of either, or a built ``lite.Model``.
        context: threads and delegates for the build (ignored for a built Model).
        names: the model's input and output names (Hugging Face's export naming by default).
        cache: "static" (where the model has ``attention_mask`` and ``position_ids`` inputs): after the
            prefill, one buffer per layer and kind holds the whole generation's cache, the decode steps read
            it with the unfilled positions masked out and one fixed shape, and each step's new entry is written
            into its slot; "dynamic": each step reads the step before's ``present`` arrays, one position longer
            every token (the model is resized per token). ``cache_mode`` tells which one runs.
        bind_cache: (dynamic cache) True: each step's ``present`` arrays become the next step's ``past`` inputs
            as they are; False: they are copied in with ``Tensor.set_data_from_numpy`` (to measure that copy).

    Raises:
        InputError: the model lacks an input or output the names give, or ``cache`` is not a known mode.
    """

    def __init__(self, model: str | os.PathLike | bytes | Model, context: Context | None = None,
                 names: DecoderNames | None = None, *, cache: str = "static", bind_cache: bool = True) -> None:
        if isinstance(model, Model):
            self.model = model
        else:
            self.model = Model()
            self.model.build_from_file(model, context=context)
        self.names = names or DecoderNames()
        self.bind_cache = bind_cache
        self.load_s = float(sum(self.model.build_timings.values()))
        self._inputs = {t.name: t for t in self.model.get_inputs()}
        self._outputs = {t.name: t for t in self.model.get_outputs()}
        self.layers = self._count_layers()
        self.cache_mode = self._cache_mode(cache)
        self._static: _StaticCache | None = None

    def _cache_mode(self, cache: str) -> str:
        """``cache`` where the model allows it: a static cache needs the mask and the positions as inputs
        (the decode step's query then sits past every slot, and only the mask says which are filled)."""
        if cache not in ("static", "dynamic"):
            raise InputError(f"cache must be 'static' or 'dynamic', got {cache!r}")
        n = self.names
        if cache == "static" and not {n.attention_mask, n.position_ids} <= set(self._inputs):
            return "dynamic"
        return cache

    def _count_layers(self) -> int:
        n = self.names
        layers = 0
        while n.past_key.format(layers) in self._inputs:
            layers += 1
        wanted_in = [n.input_ids] + [f.format(i) for i in range(layers) for f in (n.past_key, n.past_value)]
        wanted_out = [n.logits] + [f.format(i) for i in range(layers) for f in (n.present_key, n.present_value)]
        missing = [x for x in wanted_in if x not in self._inputs] + [x for x in wanted_out if x not in self._outputs]
        if not layers or missing:
            raise InputError(f"not a decoder with a KV cache in the names {self.names}: missing "
                             f"{missing or [n.past_key.format(0)]}; inputs {list(self._inputs)}, "
                             f"outputs {list(self._outputs)}")
        return layers

    def generate(self, prompt: Sequence[int] | np.ndarray, max_new_tokens: int, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop_tokens: Sequence[int] = (),
                 on_token: TokenCallback | None = None) -> GenerationResult:
        """Generates up to ``max_new_tokens`` tokens after ``prompt``.

        Args:
            prompt: token ids: one row [length], or equal-length rows [batch, length] (no padding).
            max_new_tokens: the most tokens to add to each row.
            temperature: 0 chooses the most likely token (greedy); above 0, tokens are drawn from the
                softmax of logits / temperature.
            top_k: draw among the ``top_k`` most likely tokens only (0: all).
            top_p: draw among the most likely tokens whose probabilities add up to ``top_p`` (1.0: all).
            seed: seeds the draws (``numpy.random.default_rng``): the same seed gives the same tokens.
            stop_tokens: a row stops after choosing one of these; the call returns when every row has.
            on_token: called after each step with that step's tokens, int64 [batch]; -1 for a row that
                has stopped.

        Raises:
            InputError: a malformed prompt or option, or the model refused the shapes.
        """
        ids = _prompt(prompt)
        positive_int(max_new_tokens, "max_new_tokens")
        sampler = _sampler(temperature, top_k, top_p, seed)
        run = _Run(frozenset(int(t) for t in stop_tokens), on_token)
        start = time.perf_counter()
        logits = self._prefill(ids)
        run.take(sampler(logits))
        first = time.perf_counter() - start
        total = ids.shape[1]
        if self.cache_mode == "static" and max_new_tokens > 1:
            self._static = _StaticCache.after_prefill(self, total + max_new_tokens - 1)
        while len(run.steps) + 1 < max_new_tokens and not run.done.all():
            began = time.perf_counter()
            logits = self._decode(np.array([row[-1] if row else 0 for row in run.tokens]), total)
            run.take(sampler(logits))
            total += 1
            run.steps.append(time.perf_counter() - began)
        return GenerationResult(run.tokens, self._stats(ids.shape, run, first))

    # ---- the two kinds of step -------------------------------------------------------------------------

    def _prefill(self, ids: np.ndarray) -> np.ndarray:
        """Runs the prompt with an empty cache; the logits of its last position [batch, vocab]."""
        batch, length = ids.shape
        feed = {name: np.zeros((batch, *t.shape[1:2], 0, *t.shape[3:]), t.dtype)
                for name, t in self._inputs.items() if name not in self._small_inputs()}
        feed.update(self._small_feed(ids, 0, length))
        self.model.predict(feed, output_names=[])
        return self._last_logits()

    def _decode(self, last: np.ndarray, past: int) -> np.ndarray:
        """Runs one token per row on the cache of ``past`` positions; the logits [batch, vocab]."""
        if self.cache_mode == "static":
            return self._static.step(last[:, None].astype(np.int64), past)
        small = self._small_feed(last[:, None].astype(np.int64), past, past + 1)
        present = self._present_arrays()
        if not self.bind_cache:
            self.model.predict({**small, **present}, output_names=[])
            return self._last_logits()
        inputs = list(self._inputs.values())
        shapes = [small[t.name].shape if t.name in small else present[t.name].shape for t in inputs]
        self.model.resize(inputs, [list(s) for s in shapes])
        for tensor in inputs:
            array = small.get(tensor.name)
            if array is not None:
                tensor.set_data_from_numpy(array)
            else:
                _bind(tensor, present[tensor.name], self._outputs)
        self.model.predict(None, output_names=[])
        return self._last_logits()

    def _small_inputs(self) -> set[str]:
        n = self.names
        return {n.input_ids, n.attention_mask, n.position_ids} & set(self._inputs)

    def _small_feed(self, ids: np.ndarray, first: int, total: int) -> dict[str, np.ndarray]:
        """input_ids [batch, seq] at positions first.., and attention_mask [batch, total] and position_ids
        where the model has them."""
        n, (batch, seq) = self.names, ids.shape
        feed = {n.input_ids: ids.astype(self._inputs[n.input_ids].dtype, copy=False)}
        if n.attention_mask in self._inputs:
            feed[n.attention_mask] = np.ones((batch, total), self._inputs[n.attention_mask].dtype)
        if n.position_ids in self._inputs:
            row = np.arange(first, first + seq, dtype=self._inputs[n.position_ids].dtype)
            feed[n.position_ids] = np.tile(row, (batch, 1))
        return feed

    def _present_arrays(self) -> dict[str, np.ndarray]:
        """The last step's present outputs by the past input names they feed (not copied)."""
        n = self.names
        pairs = [(n.past_key, n.present_key), (n.past_value, n.present_value)]
        return {past.format(i): self._outputs[present.format(i)].data
                for i in range(self.layers) for past, present in pairs}

    def _last_logits(self) -> np.ndarray:
        return np.array(self._outputs[self.names.logits].data[:, -1, :], dtype=np.float32)

    # ---- stats -------------------------------------------------------------------------------------------

    def _stats(self, shape: tuple[int, int], run: _Run, first: float) -> GenerationStats:
        batch, length = shape
        steps = np.array(run.steps) if run.steps else np.zeros(0)
        decode = float(steps.sum())
        prefill = first  # NOTE: includes the first token's sampling, as time to first token does
        return GenerationStats(
            batch=batch, prompt_tokens=length, generated_tokens=max(len(t) for t in run.tokens),
            time_to_first_token_s=first, prefill_tokens_per_s=batch * length / prefill,
            decode_tokens_per_s=batch * len(steps) / decode if decode else 0.0,
            token_latency_p50_ms=float(np.percentile(steps, 50) * 1e3) if len(steps) else 0.0,
            token_latency_p90_ms=float(np.percentile(steps, 90) * 1e3) if len(steps) else 0.0,
            peak_rss_mb=_peak_rss_mb(), load_s=self.load_s)


class _StaticCache:
    """The decode steps' cache: per layer and kind one buffer of ``capacity + 1`` positions, its first
    ``capacity`` bound as the past input and the whole of it as the present output.

    A step feeds the whole past with ``attention_mask`` 1 on the filled slots and on the new token (which the
    model appends after the last slot) and 0 elsewhere, and ``position_ids`` the true position, so every step
    has the same shapes (one resize after the prefill, none per token) and masked slots weigh exactly 0. The
    model's Concat of past and new writes into the present output, whose first ``capacity`` positions are the
    past itself, so it copies only the new position (``lite.kernels.shape.Concat`` skips an input already in its
    slot). The new token's key and value (the buffer's last position) are then written into the next slot.
    """

    def __init__(self, generator: Generator, buffers: dict[str, np.ndarray], capacity: int) -> None:
        self.generator, self.capacity = generator, capacity
        self.buffers = {name: buffer[:, :, :capacity] for name, buffer in buffers.items()}  # the past inputs
        n, inputs = generator.names, generator._inputs
        batch = next(iter(buffers.values())).shape[0]
        self.mask = np.zeros((batch, capacity + 1), inputs[n.attention_mask].dtype)
        self.mask[:, capacity] = 1
        self.ids = np.zeros((batch, 1), inputs[n.input_ids].dtype)
        self.positions = np.zeros((batch, 1), inputs[n.position_ids].dtype)
        pairs = [(n.past_key, n.present_key), (n.past_value, n.present_value)]
        self.sources = [(buffers[past.format(i)], generator._outputs[present.format(i)])
                        for i in range(generator.layers) for past, present in pairs]

    @classmethod
    def after_prefill(cls, generator: Generator, capacity: int) -> _StaticCache:
        """Copies the prefill's present arrays into new buffers of ``capacity + 1`` positions, resizes the model
        to the decode step's shapes once and binds the buffers as its past inputs and present outputs."""
        present = generator._present_arrays()
        filled = next(iter(present.values())).shape[2]
        buffers = {}
        for name, array in present.items():
            buffer = np.empty((*array.shape[:2], capacity + 1, *array.shape[3:]), array.dtype)
            buffer[:, :, :filled] = array
            buffer[:, :, filled:] = 0  # NOTE: written now, so its pages are resident from the start (flat RSS)
            buffers[name] = buffer
        cache = cls(generator, buffers, capacity)
        cache.mask[:, :filled] = 1
        cache._resize()
        return cache

    def _resize(self) -> None:
        n, model, inputs = self.generator.names, self.generator.model, self.generator._inputs
        feeds = {n.input_ids: self.ids, n.attention_mask: self.mask, n.position_ids: self.positions, **self.buffers}
        tensors = [t for t in inputs.values() if t.name in feeds]
        model.resize(tensors, [list(feeds[t.name].shape) for t in tensors])
        for tensor in tensors:
            tensor.data = feeds[tensor.name]  # NOTE: the step's arrays, bound once; each step writes into them
        self._bind_outputs()

    def _bind_outputs(self) -> None:
        """Makes each buffer its present output's array (planned at the resize with the decode step's shape)."""
        for buffer, present in self.sources:
            if present.data is not None and present.data.shape == buffer.shape and present.dtype == buffer.dtype:
                present.data = buffer

    def step(self, ids: np.ndarray, filled: int) -> np.ndarray:
        """Runs one token per row at position ``filled`` (the slots before it hold the cache); the logits."""
        self.ids[...] = ids
        self.positions[...] = filled
        self.generator.model.predict(None, output_names=[])
        for buffer, present in self.sources:
            buffer[:, :, filled] = present.data[:, :, self.capacity]  # NOTE: a delegate may have rebound present
            if present.data is not buffer:
                self._bind_outputs()
        self.mask[:, filled] = 1
        return self.generator._last_logits()


def _bind(tensor: Tensor, array: np.ndarray, outputs: dict[str, Tensor]) -> None:
    """Makes ``array`` (a present output of the step before) the data of the input ``tensor`` without a copy.

    After the resize the outputs hold new arrays (their shapes grew), so nothing the next predict writes
    aliases ``array``; where an output still holds it, it is copied in instead.
    """
    if any(out.data is array for out in outputs.values()) or array.shape != tensor.shape \
            or array.dtype != tensor.dtype:
        tensor.set_data_from_numpy(array)
    else:
        tensor.data = array


def _prompt(prompt: Sequence[int] | np.ndarray) -> np.ndarray:
    try:
        ids = np.asarray(prompt)
    except ValueError as exc:
        raise InputError(f"prompt rows must have equal lengths (no padding yet): {exc}") from exc
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"prompt must be token ids, [length] or [batch, length] ints, got {ids.dtype}{ids.shape}")
    return ids.astype(np.int64)


def _sampler(temperature: float, top_k: int, top_p: float, seed: int | None) -> _Sampler:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise InputError(f"temperature must be a number >= 0, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise InputError(f"top_k must be an int >= 0, got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p must be in (0, 1], got {top_p!r}")
    return _Sampler(float(temperature), int(top_k), float(top_p), np.random.default_rng(seed))


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # NOTE: bytes on macOS, KiB on Linux
