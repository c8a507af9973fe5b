"""How a quantized convolution or product (``lite.kernels.quantized.QuantizedProduct``) runs on the
compiled integer kernels of ``lite.kernels.fast.int8``, chosen once per input shape.

- ``compiled_product``: the int16-pair kernels for 2-D convolutions (any stride, dilation, pads,
  groups) and for products of rows by a constant 2-D weight; None where the layer is another
  form, compiled kernels are off, or its sums could leave int32. A convolution runs on byte
  quads (``int8_quads``, ``vpdpbusd``) where the machine has AVX-512 VNNI and every weight
  offset fits int8 (``_quad_bias``: the input's zero point folded into the bias), and on AMX
  tiles (``int8_amx``, ``tdpbsud``) where the CPU has AMX-INT8 and the layer is one group of
  ``AMX_CHANNELS`` input channels or more (the same sums, its products 16 x 16 x 64 an
  instruction), as do products of ``AMX_PRODUCT_ROWS`` rows or more (``ProductPlan``, and
  MatMulInteger's ``IntegerProductPlan``); elsewhere a 1x1
  convolution (stride 1, unpadded, one group) packs each panel of its input as it goes
  (``PointwisePlan``, ``int8_pointwise``), and a 3x3 stride-1 one of ``WINOGRAD_CHANNELS`` or more
  runs exact integer Winograd F(2x2, 3x3) (``WinogradPlan``, ``int8_winograd``).
- ``exact_in_float32``: depthwise convolutions, whose sums of a few terms (at most
  ``FLOAT32_EXACT`` in magnitude, every one an integer) are exact in float32, run on
  ``lite.kernels.fast.int8_depthwise`` (``DepthwiseInt8Plan``: 8-bit planes copied into float32
  phases, the float32 depthwise kernel's taps, requantized while in cache), else on the float32
  convolution kernels, requantized after.

Nothing here imports the compiler unless compiled kernels run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from lite.aligned import aligned_array
from lite.kernels import fast
from lite.ops.quant import broadcast_param, qrange

FLOAT32_EXACT = 1 << 24
"""Integers up to this magnitude are exact in float32."""
INT32_LIMIT = (1 << 31) - 1
INT8_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def offset_bound(dtype: np.dtype, zero_point: int) -> int:
    """The largest magnitude of ``q - zero_point`` for ``q`` of ``dtype``."""
    low, high = qrange(dtype)
    return max(abs(low - zero_point), abs(high - zero_point))


def _weight_bound(w) -> int:
    """The largest magnitude of ``w - w_zero_point`` over the constant weight ``w``."""
    zero_point = w.quant_params.zero_point
    shaped = broadcast_param(zero_point, w.data.shape, w.quant_params.axis) if zero_point.size else 0
    offsets = weight_offsets(w.data, shaped)
    return int(np.abs(offsets, out=offsets).max(initial=0))


def weight_offsets(weight: np.ndarray, zero_point) -> np.ndarray:
    """``weight - zero_point`` (the zero point shaped to broadcast), exact, in int16 for 8-bit
    weights (a quarter of int64's bytes: these temporaries set the build's peak), else int64."""
    dtype = np.int16 if weight.dtype.itemsize == 1 else np.int64
    return np.subtract(weight, np.asarray(zero_point, dtype), dtype=dtype)


def _per_channel(zero_point: np.ndarray, channels: int) -> np.ndarray:
    """A zero point (none, one, or one per channel) as ``channels`` int64 values."""
    values = np.asarray(zero_point, np.int64).reshape(-1)
    return np.zeros(channels, np.int64) if values.size == 0 else np.broadcast_to(values, (channels,)).copy()


def exact_in_float32(x, w, primitive) -> bool:
    """Whether a quantized depthwise convolution (one input channel per group, several groups) runs exactly on the
    float32 kernels: compiled kernels run, 8-bit operands, and every partial sum is an integer
    below ``FLOAT32_EXACT``."""
    if not fast.enabled() or x.dtype not in INT8_TYPES or w.data is None or w.data.ndim < 3 or w.data.shape[1] != 1:
        return False
    if int(primitive.attrs.get("group", 1)) < 2:  # NOTE: one group may run as Winograd, which is not exact
        return False
    zero_point = int(x.quant_params.zero_point[0]) if x.quant_params.zero_point.size else 0
    taps = math.prod(w.data.shape[1:])
    return taps * offset_bound(x.dtype, zero_point) * _weight_bound(w) < FLOAT32_EXACT


def exact_activation_product(kernel, terms: int) -> bool:
    """Whether a quantized product of two activations (``kernel``, a QuantizedProduct) runs exactly on
    the float32 kernels: compiled kernels run (they requantize the sums), 8-bit operands, and every
    sum of ``terms`` products of offsets is below ``FLOAT32_EXACT`` in magnitude."""
    x, w = kernel.inputs[0], kernel.inputs[1]
    if not fast.enabled() or x.dtype not in INT8_TYPES or w.dtype not in INT8_TYPES:
        return False
    x_zero, w_zero = kernel.layout.zero_points
    return terms * offset_bound(x.dtype, x_zero) * offset_bound(w.dtype, w_zero) < FLOAT32_EXACT


def requantization_terms(kernel, narrow: bool = False
                         ) -> tuple[np.ndarray, np.ndarray, np.float32, np.float32, np.float32]:
    """(bias in the accumulator's units as int64 (int32 where ``narrow``), one multiplier per output
    channel, zero point, low bound, high bound) of a planned QuantizedProduct (floats float32)."""
    channels = kernel.outputs[0].shape[kernel.layout.channel_axis]
    bias = np.zeros(channels, np.int64) if kernel.bias_acc is None else kernel.bias_acc.reshape(-1).astype(np.int64)
    if narrow:
        bias = bias.astype(np.int32)  # NOTE: the callers checked that bias plus sums fit int32
    multiplier = np.ascontiguousarray(kernel.multiplier.reshape(-1), np.float32)
    low, high = kernel.bounds
    return bias, multiplier, np.float32(kernel.zero_point), np.float32(low), np.float32(high)


def padded_terms(terms: tuple, length: int) -> tuple:
    """``requantization_terms`` with bias and multiplier padded (zero, one) to ``length`` channels:
    the register tiles read a whole tile's worth."""
    bias, multiplier, *rest = terms
    bias = np.concatenate([bias, np.zeros(length - bias.size, bias.dtype)])
    multiplier = np.concatenate([multiplier, np.ones(length - multiplier.size, multiplier.dtype)])
    return (bias, multiplier, *rest)


SPLIT_FILL = 1 << 15
"""Inputs of at least this many values are copied into the phases by the crew's threads."""
PHASES_SLOT = 0x1D8  # the workspace slot of the convolutions' padded input (float kernels use low slots)
AMX_SCRATCH_SLOT = PHASES_SLOT + 1  # the slot of the tile convolutions' pieces' scratch


def compiled_product(kernel) -> Callable[[], None] | None:
    """A call computing ``kernel``'s output on the compiled integer kernels, or None where they do
    not cover it."""
    x, w = kernel.inputs[0], kernel.inputs[1]
    if not fast.enabled() or x.dtype not in INT8_TYPES or w.dtype not in INT8_TYPES or kernel.outputs[0].dtype \
            not in INT8_TYPES:
        return None
    if not w.is_const:
        return _activation_quad_plan(kernel)
    if w.data is None:
        return None
    if getattr(kernel, "exact32", False):
        return _depthwise_plan(kernel)
    plan = _conv_plan(kernel) if kernel.primitive.type == "Conv2DFusion" else _product_plan(kernel)
    if plan is None:
        return None
    from lite.kernels.fast import int8

    int8.warm(np.dtype(x.dtype))
    return plan


def _once(kernel, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per kernel, kept in its ``int8_once`` dict: what its constant weight and
    quantization parameters decide is the same at every input shape, so a resize neither computes
    it again nor reads the weight (whose pages may have left memory) to do so."""
    kept = kernel.__dict__.setdefault("int8_once", {})
    if name not in kept:
        kept[name] = compute()
    return kept[name]


def _kernel_weight_bound(kernel) -> int:
    """``_weight_bound`` of the kernel's weight (once per kernel)."""
    return _once(kernel, "weight_bound", lambda: _weight_bound(kernel.inputs[1]))


def _sums_fit(kernel, pairs: int) -> bool:
    """Whether every sum of ``pairs`` pair products plus the bias stays inside int32."""
    bias = 0 if kernel.bias_acc is None else float(np.abs(kernel.bias_acc).max(initial=0))
    x_bound = offset_bound(kernel.inputs[0].dtype, kernel.layout.x_zero_point)
    worst = 2 * pairs * x_bound * _kernel_weight_bound(kernel)
    return worst + bias <= INT32_LIMIT and worst <= INT32_LIMIT


def _conv_plan(kernel) -> Callable[[], None] | None:
    """The integer plan of a 2-D convolution (x 4-D), else None."""
    inner, x_shape, w = kernel.inner, kernel.inputs[0].shape, kernel.inputs[1].data
    if inner.rank != 2 or len(x_shape) != 4 or w.ndim != 4:
        return None
    pairs = (w.shape[1] + 1) // 2 * w.shape[2] * w.shape[3]
    if not _sums_fit(kernel, pairs):
        return None
    if _pointwise(inner, x_shape, w) and _quad_bias(kernel, w) is None:
        return PointwisePlan(kernel, x_shape, w)
    if _winograd(kernel, x_shape, w):
        return WinogradPlan(kernel, x_shape, w)
    return ConvPlan(kernel, x_shape, w, pairs)


WINOGRAD_CHANNELS = 16
"""The fewest input and output channels for a 3x3 stride-1 layer to run integer Winograd."""
WINOGRAD_SAVING = 1.5
"""The fewest times fewer multiplies (``int8_winograd.multiply_saving``) for a layer to run integer
Winograd: on ResNet-50's 7 x 7 planes (0.86 with AVX2's tile, 0.57 with AVX-512's: the tiles
padded to the tile's width) the direct kernel was faster, on 14 x 14 and up (1.44-1.97) slower
(docs/performance.md, the int8 section)."""


def _winograd(kernel, x_shape: tuple[int, ...], w: np.ndarray) -> bool:
    """Whether exact integer Winograd (``int8_winograd``) runs the convolution: 3x3, stride 1, no
    dilation, one group, channels enough in and out, on int16 pairs (no byte quads: with VNNI they
    sum twice the terms an instruction, more than Winograd saves), a plane large enough
    (``WINOGRAD_SAVING``), and every sum exact."""
    from lite.kernels.fast import int8_winograd

    inner = kernel.inner
    if (w.shape[2:] != (3, 3) or tuple(inner.strides) != (1, 1) or tuple(inner.dilations) != (1, 1)
            or inner.group != 1 or min(w.shape[:2]) < WINOGRAD_CHANNELS or _quad_bias(kernel, w) is not None):
        return False
    if int8_winograd.multiply_saving(inner.geometry(x_shape, w.shape)[2]) < WINOGRAD_SAVING:
        return False
    x_bound = offset_bound(kernel.inputs[0].dtype, kernel.layout.x_zero_point)
    return int8_winograd.exact(w.shape[1], x_bound, _kernel_weight_bound(kernel))


def _pointwise(inner, x_shape: tuple[int, ...], w: np.ndarray) -> bool:
    """Whether the convolution is 1x1, stride 1, unpadded, one group (``PointwisePlan``)."""
    begins, ends, _ = inner.geometry(x_shape, w.shape)
    return w.shape[2:] == (1, 1) and tuple(inner.strides) == (1, 1) and inner.group == 1 and \
        not any(begins) and not any(ends)


def _product_plan(kernel) -> Callable[[], None] | None:
    """The integer plan of rows times a constant 2-D weight, else None."""
    inner, x_shape, w = kernel.inner, kernel.inputs[0].shape, kernel.inputs[1].data
    if inner.transpose_a or w.ndim != 2 or len(x_shape) < 2:
        return None
    weight = w.T if inner.transpose_b else w
    if x_shape[-1] != weight.shape[0] or not _sums_fit(kernel, (weight.shape[0] + 1) // 2):
        return None
    return ProductPlan(kernel, x_shape, weight)


def _conv_weight(kernel, w: np.ndarray, rows: int) -> np.ndarray:
    """The weight as ``int8.pack_conv_weight`` packs it: int16 pairs (once per kernel)."""
    from lite.kernels.fast import int8

    return _packed_weight(kernel, w, rows, 2, int8.pack_conv_weight, "int8_weight")


def _packed_weight(kernel, w: np.ndarray, rows: int, per_word: int, pack, cache: str) -> np.ndarray:
    """``w`` packed by ``pack`` into int32 words of ``per_word`` input channels each, kept on the kernel
    under ``cache`` (packed once per kernel)."""
    def packed() -> np.ndarray:
        words = np.zeros((rows, (w.shape[1] + per_word - 1) // per_word * w.shape[2] * w.shape[3]), np.int32)
        pack(np.ascontiguousarray(w), _per_channel(kernel.inputs[1].quant_params.zero_point, w.shape[0]), words)
        return words

    return _once(kernel, cache, packed)


def _quad_bias(kernel, w: np.ndarray) -> np.ndarray | None:
    """``_quad_bias_of`` a convolution's weight (O, C, KH, KW), once per kernel (its plan asks, then
    the convolution's plan reads it): the input's pad byte p is its zero point as an unsigned byte
    (``int8_quads``)."""
    def bias() -> np.ndarray | None:
        if not quads_run():
            return None
        zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, w.shape[0])
        pad = kernel.layout.x_zero_point + (128 if kernel.inputs[0].dtype == np.int8 else 0)
        return _quad_bias_of(kernel, weight_offsets(w.reshape(w.shape[0], -1), zero_point[:, None]), pad)

    return _once(kernel, "quad_bias", bias)


def _product_quad_bias(kernel, weight: np.ndarray) -> np.ndarray | None:
    """``_quad_bias_of`` a product's weight (K, N), once per kernel: p is the input's zero point as a
    signed byte (``int8_quads``' products)."""
    def bias() -> np.ndarray | None:
        if not quads_run():
            return None
        zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, weight.shape[1])
        pad = kernel.layout.x_zero_point - (128 if kernel.inputs[0].dtype == np.uint8 else 0)
        return _quad_bias_of(kernel, weight_offsets(weight, zero_point[None, :]).T, pad)

    return _once(kernel, "product_quad_bias", bias)


def quads_run() -> bool:
    """Whether compiled kernels run, on byte quads here (``int8_quads.available``)."""
    if not fast.enabled():
        return False
    from lite.kernels.fast import int8_quads

    return int8_quads.available()


def _quad_bias_of(kernel, offsets: np.ndarray, pad: int) -> np.ndarray | None:
    """The bias (int32, one per output channel) of the byte-quad form (``int8_quads``): the bias
    minus ``pad * sum of the channel's weight offsets`` (``offsets``: one row per channel); None where
    that form does not run: a weight offset outside int8, or that bias outside int32."""
    if offsets.min(initial=0) < -128 or offsets.max(initial=0) > 127:
        return None
    bias = requantization_terms(kernel)[0] - pad * offsets.sum(axis=1)
    if np.abs(bias).max(initial=0) > INT32_LIMIT:
        return None
    return bias.astype(np.int32)


def _quad_weight(kernel, w: np.ndarray, rows: int) -> np.ndarray:
    """The weight as ``int8_quads.pack_conv_quads`` packs it: byte quads (once per kernel)."""
    from lite.kernels.fast import int8_quads

    return _packed_weight(kernel, w, rows, 4, int8_quads.pack_conv_quads, "int8_quads")


def _conv_jobs(quads: bool, amx: bool = False) -> tuple:
    """The crew's job functions of a convolution on pairs, on quads or on tiles."""
    from lite.kernels.fast import int8

    if not quads:
        return int8.conv_job_int8, int8.conv_job_uint8, int8.fill_job
    from lite.kernels.fast import int8_amx, int8_quads

    return int8_amx.conv_amx_job if amx else int8_quads.conv_quad_job, int8_quads.fill_quad_job


AMX_CHANNELS = 64
"""The fewest input channels for a convolution to run on AMX tiles (``int8_amx``; its tiles take
64 channels a tap, fewer padded with zero weights)."""


def _amx(kernel, w: np.ndarray) -> bool:
    """Whether the quad convolution runs on AMX tiles: one group, ``AMX_CHANNELS`` or more input
    channels, and tiles here (``int8_amx.available``)."""
    if kernel.inner.group != 1 or w.shape[1] < AMX_CHANNELS:
        return False
    from lite.kernels.fast import int8_amx

    return int8_amx.available()


def _amx_weight(kernel, w: np.ndarray) -> np.ndarray:
    """The weight as ``int8_amx.pack_amx_weight`` packs it: byte quads tap by tap, each tap's channel
    words and the rows padded to whole tiles (once per kernel)."""
    from lite.kernels.fast import int8_amx, int8_quads

    def packed() -> np.ndarray:
        taps, channel_words, tile, block = w.shape[2] * w.shape[3], (w.shape[1] + 3) // 4, int8_amx.TILE, \
            int8_amx.BLOCK
        rows = -(-w.shape[0] // block) * block
        quads = np.zeros((rows, channel_words * taps), np.int32)
        zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, w.shape[0])
        int8_quads.pack_conv_quads(np.ascontiguousarray(w), zero_point, quads)
        tiled = _zeros((rows, taps * (-(-channel_words // tile) * tile)))
        int8_amx.pack_amx_weight(quads, channel_words, taps, tiled)
        return tiled

    return _once(kernel, "int8_amx", packed)


def _fill_step(threads, x: np.ndarray, fill_items, args: tuple, items: int,
               jobs: Callable[[list[tuple[int, int]]], Callable[[], None]]) -> Callable[[], None]:
    """The input copy ``fill_items(*args, first, last)`` of ``items`` items: one call, or its items
    shared out on the crew (``jobs``) where the input is large enough to pay for a dispatch."""
    if x.size < SPLIT_FILL or threads.crew() is None:
        return partial(fill_items, *args, 0, items)
    return threads.crew_loop(items, lambda _index, first, last: partial(fill_items, *args, first, last), jobs,
                             per_thread=1)


class ConvPlan:
    """A quantized 2-D convolution on ``int8.fill_phases`` and ``int8.conv_items``, its items
    (image, group, panel) shared out among the model's threads."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w: np.ndarray, pairs: int):
        from lite.kernels.fast import int8

        n, group = x_shape[0], kernel.inner.group
        o_group = w.shape[0] // group
        rows = group * o_group + (-o_group) % int8.ROWS
        self.quad_bias = _quad_bias(kernel, w)
        self.amx = self.quad_bias is not None and _amx(kernel, w)
        if self.quad_bias is None:
            self.weight, words = _conv_weight(kernel, w, rows), (w.shape[1] + 1) // 2
        else:
            from lite.kernels.fast import int8_quads

            int8_quads.warm()
            words = (w.shape[1] + 3) // 4
            self.weight = _amx_weight(kernel, w) if self.amx else _quad_weight(kernel, w, rows)
        layout = PhaseLayout(kernel.inner, x_shape, w.shape, words)
        if self.amx:
            from lite.kernels.fast import int8_amx

            int8_amx.warm()
            tap_words = self.weight.shape[1] // (w.shape[2] * w.shape[3])
            by_word = layout.tap_offsets(tap_words)
            self.offsets = np.ascontiguousarray(by_word.reshape(tap_words, -1).T.reshape(-1))
            width = int8_amx.BLOCK
        else:
            self.offsets, width = layout.tap_offsets(words), int8.WIDTH
        panels, self.size = layout.panels_and_size(self.offsets, width)
        self.filled, self.block, self.phase_shape = layout.filled, layout.block, layout.shape
        self.flat = self.phases = None
        self.scratch = 0  # NOTE: the address of the tile scratch the steps were made with
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(*_conv_jobs(self.quad_bias is not None, self.amx))
        self.x_args = (kernel.layout.x_zero_point, *layout.fill_args)
        (oh, ow), wq = layout.out, layout.wq
        self.kernel, self.wq, self.items = kernel, wq, n * group * panels
        self.whole = self.amx and int8_amx.whole_image(w.shape[0], oh * wq, self.weight.shape[1])
        if self.whole:
            self.items = n * -(-w.shape[0] // int8_amx.BLOCK)  # NOTE: an item is a block of output channels
        self.grid = None if wq == ow else np.zeros((n, w.shape[0], oh * wq), kernel.outputs[0].dtype)
        if self.amx:  # NOTE: a row of conv_amx_items' scratch for each piece of the loop
            held = -(-oh * wq // int8_amx.BLOCK) if self.whole else 1
            self.scratch_shape = (kernel.threads.loop_pieces(self.items),
                                  int8_amx.scratch_words(self.weight.shape[1], held))
        self.out: np.ndarray | None = None
        self.x: np.ndarray | None = None
        self.fill: Callable[[], None] | None = None
        self.steps: Callable[[], None] | None = None

    def _fill_step(self, x: np.ndarray) -> Callable[[], None]:
        """The input copy into the phases: its pair planes shared out on the crew where the input is
        large enough to pay for a dispatch, else one call."""
        from lite.kernels.fast import int8

        zero_point, *rest = self.x_args
        items = self.phases.shape[0] * self.phases.shape[1] * self.phases.shape[2]
        quads, job = self.quad_bias is not None, None
        if quads:
            from lite.kernels.fast import int8_quads

            flip = np.uint8(0x80 if x.dtype == np.int8 else 0)
            zero_point, job = (int(zero_point) ^ int(flip)) & 0xFF, int8_quads.fill_quad_job  # NOTE: the pad byte
            fill_items, args = int8_quads.fill_quad_items, (x.view(np.uint8), flip, np.int64(zero_point), self.phases,
                                                            *rest)
        else:
            fill_items, args = int8.fill_phase_items, (x, np.int64(zero_point), self.phases, *rest)
        return _fill_step(self.kernel.threads, x, fill_items, args, items,
                          lambda bounds: int8.fill_crew_jobs(x, zero_point, self.phases, *rest, bounds, job))

    def _steps(self, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8

        threads, items = self.kernel.threads, self.items
        bias, *terms = requantization_terms(self.kernel, narrow=True)
        quads = self.quad_bias is not None
        terms = padded_terms((self.quad_bias if quads else bias, *terms), self.weight.shape[0])
        grid = out.reshape(*out.shape[:2], -1) if self.grid is None else self.grid
        if self.amx:
            return self._amx_steps(out, grid, terms)
        items_call, job = int8.conv_items, None
        if quads:
            from lite.kernels.fast import int8_quads

            grid, items_call, job = grid.view(np.uint8), int8_quads.conv_quad_items, int8_quads.conv_quad_job

        spares = [np.zeros((int8.ROWS, int8.WIDTH), np.int32) for _ in range(threads.loop_pieces(items))]
        shared = (self.flat, self.phases.shape[1], self.block, self.weight, self.offsets, *terms, grid)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(items_call, *shared, spares[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8.conv_crew_jobs(*shared, spares, bounds, job)

        return self._compacted(threads.crew_loop(items, piece, jobs), out)

    def _compacted(self, step: Callable[[], None], out: np.ndarray) -> Callable[[], None]:
        """``step``, then the grid's rows compacted into ``out`` where the grid is wider."""
        from lite.kernels.fast import int8

        return step if self.grid is None else _Sequence([step, partial(int8.compact, self.grid, out, self.wq)])

    def _amx_steps(self, out: np.ndarray, grid: np.ndarray, terms: tuple) -> Callable[[], None]:
        """The convolution on tiles (``int8_amx``): its items (image and panel, or image and block
        of channels where ``whole``) shared out among the model's threads, each piece with its own
        scratch."""
        from lite.kernels.fast import int8_amx

        threads, items, whole = self.kernel.threads, self.items, self.whole
        scratches = list(self._amx_scratch())
        shared = (self.flat, self.block, self.weight, self.offsets, *terms, grid.view(np.uint8))

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(int8_amx.conv_amx_items, *shared, scratches[index], whole, first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8_amx.conv_crew_jobs(*shared, scratches, whole, bounds)

        if whole:  # NOTE: a whole-image job packs the image's panels itself: one job a thread, not more
            return self._compacted(threads.crew_loop(items, piece, jobs, per_thread=1), out)
        return self._compacted(threads.crew_loop(items, piece, jobs), out)

    def _amx_scratch(self) -> np.ndarray:
        """``scratch_shape`` from the workspace the model's kernels share (they run one at a time, and
        the tiles' kernel writes every word of its scratch before it reads it): one buffer for every
        tile convolution of the model."""
        return self.kernel.workspace.array(self.scratch_shape, np.int32, AMX_SCRATCH_SLOT)

    def __call__(self) -> None:
        flat = self.kernel.workspace.array((self.size,), np.int32, PHASES_SLOT)  # NOTE: scratch the kernels share
        out = self.kernel.outputs[0].data
        x = _compiled_array(self.kernel.inputs[0].data)
        scratch = self._amx_scratch().ctypes.data if self.amx else 0
        if self.flat is None or flat.ctypes.data != self.flat.ctypes.data or out is not self.out or x is not self.x \
                or scratch != self.scratch:
            self.flat, self.out, self.x, self.scratch = flat, out, x, scratch
            self.phases = flat[:self.filled].reshape(self.phase_shape)
            self.steps, self.fill = self._steps(out), self._fill_step(x)
        flat[self.filled:] = 0  # NOTE: past the last block: read by panels whose outputs are dropped
        self.fill()
        self.steps()


class WinogradPlan:
    """A quantized 3x3 stride-1 convolution by exact integer Winograd F(2x2, 3x3)
    (``int8_winograd``): the input into stride-2 phases of pair words (``int8.fill_phases``), then
    image by image the input transform, the 16 products and the output transform, each step
    shared out among the model's threads."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w: np.ndarray):
        from lite.kernels.fast import int8_winograd

        (top, left), _, out = kernel.inner.geometry(x_shape, w.shape)
        rows = w.shape[0] + (-w.shape[0]) % int8_winograd.ROWS

        def transformed() -> np.ndarray:
            zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, w.shape[0])
            return int8_winograd.arrange(weight_offsets(w, zero_point[:, None, None, None]), rows)

        self.u = _once(kernel, "int8_winograd", transformed)
        pairs, count = (w.shape[1] + 1) // 2, int8_winograd.padded_tiles(out)
        self.phase_shape = (x_shape[0], 1, pairs, 2, 2, *int8_winograd.phase_shape(out))
        self.sizes = (math.prod(self.phase_shape) + int8_winograd.phase_reach(out), int8_winograd.AREA * pairs * count,
                      int8_winograd.AREA * rows * count + int8_winograd.product_reach())
        self.shapes = ((int8_winograd.AREA, pairs, count), (int8_winograd.AREA, rows, count))
        self.offsets = np.arange(pairs, dtype=np.int64) * count
        self.fill_terms = (kernel.layout.x_zero_point, 1, top, left, 2, 2, 15)  # NOTE: group 1, all four phases
        int8_winograd.warm()
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew, int8

            crew.warm(int8.fill_job, int8_winograd.input_job, int8_winograd.products_job, int8_winograd.output_job)
        self.kernel = kernel
        self.bound: tuple | None = None
        self.steps: list[Callable[[], None]] = []

    def _fill_step(self, x: np.ndarray, phases: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8

        zero_point, *rest = self.fill_terms
        return _fill_step(self.kernel.threads, x, int8.fill_phase_items, (x, np.int64(zero_point), phases, *rest),
                          phases.shape[0] * phases.shape[2],
                          lambda bounds: int8.fill_crew_jobs(x, zero_point, phases, *rest, bounds))

    def _steps(self, x: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> list[Callable[[], None]]:
        from lite.kernels.fast import int8_winograd

        (v_shape, m_shape), threads = self.shapes, self.kernel.threads
        phases_size, v_size, _ = self.sizes
        phases = scratch[:math.prod(self.phase_shape)].reshape(self.phase_shape)
        v = scratch[phases_size:phases_size + v_size].reshape(v_shape)
        m = scratch[phases_size + v_size:phases_size + v_size + math.prod(m_shape)].reshape(m_shape)
        requantization = requantization_terms(self.kernel, narrow=True)  # NOTE: _conv_plan checked the sums
        steps = [self._fill_step(x, phases)]
        for image in range(x.shape[0]):
            layer = int8_winograd.Layer(phases[image, 0], self.u, v, m, self.offsets, requantization,
                                        out[image].view(np.uint8))
            for step, ((function, terms), count) in enumerate(zip(layer.calls(), layer.units(), strict=True)):
                steps.append(threads.crew_loop(
                    count, lambda _index, first, last, function=function, terms=terms: partial(function, *terms,
                                                                                                 first, last),
                    lambda bounds, layer=layer, step=step: layer.jobs(step, bounds)))
        return steps

    def __call__(self) -> None:
        scratch = self.kernel.workspace.array((sum(self.sizes),), np.int32, PHASES_SLOT)  # NOTE: ConvPlan's too
        x, out = _compiled_array(self.kernel.inputs[0].data), self.kernel.outputs[0].data
        if self.bound is None or self.bound[0] != scratch.ctypes.data or self.bound[1] is not x \
                or self.bound[2] is not out:
            self.bound, self.steps = (scratch.ctypes.data, x, out), self._steps(x, out, scratch)
        for step in self.steps:
            step()


class PointwisePlan:
    """A quantized 1x1 convolution on ``int8_pointwise.pointwise_items`` (each panel's input packed
    in cache, no phases), its items (image, panel) shared out among the model's threads."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w: np.ndarray):
        from lite.kernels.fast import int8, int8_pointwise

        n, _, h, width = x_shape
        rows = w.shape[0] + (-w.shape[0]) % int8.ROWS
        self.weight = _conv_weight(kernel, w, rows)
        self.offsets = np.arange(self.weight.shape[1], dtype=np.int64) * int8.WIDTH
        self.kernel, self.shape, self.items = kernel, (n, x_shape[1], h * width), n * -(-(h * width) // int8.WIDTH)
        int8.warm(np.dtype(kernel.inputs[0].dtype))
        int8_pointwise.warm(np.dtype(kernel.inputs[0].dtype))
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(int8_pointwise.pointwise_job)
        self.x: np.ndarray | None = None
        self.out: np.ndarray | None = None
        self.steps: Callable[[], None] | None = None

    def _steps(self, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8, int8_pointwise

        threads, items, x = self.kernel.threads, self.items, x.reshape(self.shape)
        bias, multiplier, *floats = padded_terms(requantization_terms(self.kernel, narrow=True), self.weight.shape[0])
        view = out.view(np.uint8).reshape(self.shape[0], out.shape[1], -1)
        scratch = [[np.zeros(self.weight.shape[1:] + (int8.WIDTH,), np.int32), np.zeros((int8.ROWS, int8.WIDTH),
                                                                                        np.int32)]
                   for _ in range(threads.loop_pieces(items))]
        zero_point = np.int64(self.kernel.layout.x_zero_point)
        shared = (x, zero_point, self.weight, self.offsets, bias, multiplier, *floats, view)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(int8_pointwise.pointwise_items, *shared, *scratch[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8_pointwise.crew_jobs(x, int(zero_point), self.weight, self.offsets, bias, multiplier,
                                            tuple(map(float, floats)), view, scratch, bounds)

        return threads.crew_loop(items, piece, jobs)

    def __call__(self) -> None:
        x, out = _compiled_array(self.kernel.inputs[0].data), self.kernel.outputs[0].data
        if x is not self.x or out is not self.out:
            self.x, self.out, self.steps = x, out, self._steps(x, out)
        self.steps()


class _Sequence:
    """Steps run one after the other (a Step)."""

    def __init__(self, steps: list[Callable[[], None]]):
        self.steps = steps

    def __call__(self) -> None:
        for step in self.steps:
            step()


def _compiled_array(x: np.ndarray) -> np.ndarray:
    """``x`` as the compiled kernels take it (itself, or a contiguous writable copy)."""
    return x if fast.takes(x) else np.array(x, order="C", copy=True)


class PhaseLayout:
    """A convolution's padded input split into stride phases, as ``int8.fill_phase_items`` (pairs)
    and ``int8_quads.fill_quad_items`` (quads) write it: ``words`` input words a tap position per
    (image, group) block, the blocks' shape, the fill's arguments after its zero point, and the
    scratch size once the taps' offsets are known."""

    def __init__(self, inner, x_shape: tuple[int, ...], w_shape: tuple[int, ...], words: int):
        n, _, h, width = x_shape
        (top, left), (bottom, right), self.out = inner.geometry(x_shape, w_shape)
        (sh, sw), self.dilations, group = inner.strides, inner.dilations, inner.group
        self.hq, self.wq = -(-(h + top + bottom) // sh), -(-(width + left + right) // sw)
        self.kernel, self.strides = tuple(w_shape[2:]), (sh, sw)
        self.block = words * sh * sw * self.hq * self.wq
        self.filled, self.blocks = n * group * self.block, n * group
        self.shape = (n, group, words, sh, sw, self.hq, self.wq)
        self.fill_args = (group, top, left, sh, sw, used_phases(self.kernel, self.strides, self.dilations))

    def tap_offsets(self, words: int) -> np.ndarray:
        """``_tap_offsets`` of ``words`` words a tap position on this layout."""
        return _tap_offsets(words, self.kernel, self.strides, self.dilations, (self.hq, self.wq))

    def panels_and_size(self, offsets: np.ndarray, width: int) -> tuple[int, int]:
        """(panels of ``width`` output grid positions an (image, group), the scratch words): the last
        block reaches as far as its last panel reads."""
        panels = -(-(self.out[0] * self.wq) // width)
        reach = max(self.block, int(offsets.max()) + panels * width)
        return panels, (self.blocks - 1) * self.block + reach


def used_phases(kernel: tuple[int, ...], strides: tuple[int, int], dilations: tuple[int, int]) -> int:
    """The phases a convolution's taps read, as ``fill_phase_items`` takes them: bit ``ph * stride_w
    + pw`` set for each; -1 (every phase) where the strides make more phases than an int64 has bits
    (a ViT's 16 x 16 patches: 256)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    if sh * sw > 63:
        return -1
    return sum(1 << bit for bit in {((i * dh) % sh) * sw + (j * dw) % sw for i in range(kh) for j in range(kw)})


def _tap_offsets(channel_pairs: int, kernel: tuple[int, ...], strides: tuple[int, int], dilations: tuple[int, int],
                 plane: tuple[int, int]) -> np.ndarray:
    """Where each pair (channel pair, kh, kw) starts in an (image, group) block of the phases, in
    pair words, for the output grid position 0."""
    (kh, kw), (sh, sw), (dh, dw), (hq, wq) = kernel, strides, dilations, plane
    rows, cols = np.arange(kh) * dh, np.arange(kw) * dw
    phase = ((rows % sh)[:, None] * sw + (cols % sw)[None, :]) * hq * wq
    start = phase + (rows // sh)[:, None] * wq + (cols // sw)[None, :]
    pairs = np.arange(channel_pairs)[:, None, None] * (sh * sw * hq * wq) + start[None]
    return pairs.reshape(-1).astype(np.int64)


def _pack_weight_quads(weight: np.ndarray, zero_point: np.ndarray, panels: np.ndarray) -> None:
    """A constant weight (K, N) minus its zero point (one per column), plus 128, into panels of
    unsigned byte quads (``int8_quads.pack_activation_quads``' layout; zeros past K and N)."""
    from lite.kernels.fast import int8_quads

    unsigned = np.add(weight_offsets(weight, zero_point[None, :]), 128).astype(np.uint8)  # NOTE: wraps to the low byte
    sums = np.zeros(weight.shape[1], np.int64)
    int8_quads.pack_activation_quads(unsigned, np.uint8(0), panels.view(np.uint8).reshape(*panels.shape[:2], -1), sums)


def _tile_weight_quads(blocks: int, weight: np.ndarray, zero_point: np.ndarray, panels: np.ndarray) -> np.ndarray:
    """``_pack_weight_quads`` into ``panels``, then as ``int8_amx.tile_product_weight``'s tiles of
    ``blocks`` blocks of columns (64-byte aligned)."""
    from lite.kernels.fast import int8_amx

    _pack_weight_quads(weight, zero_point, panels)
    tiles = _zeros((blocks, panels.shape[1] // int8_amx.TILE, 2, int8_amx.TILE, int8_amx.TILE))
    int8_amx.tile_product_weight(panels, blocks, tiles)
    return tiles


class ProductPlan:
    """Quantized rows (any leading dims) times a constant 2-D weight on ``int8.fill_rows`` and
    ``int8.product_panels`` (int16 pairs), or on ``int8_quads.fill_quad_rows`` and
    ``int8_quads.quad_product_panels`` (byte quads, where they run: ``_product_quad_bias``), or on
    the same quads and ``int8_amx.product_amx_items`` (AMX tiles, where they run: ``_product_amx``),
    the weight's panels (or blocks of columns, on tiles) shared out among the model's threads."""

    def __init__(self, kernel, x_shape: tuple[int, ...], weight: np.ndarray):
        from lite.kernels.fast import int8

        k, n = weight.shape
        m = math.prod(x_shape[:-1])
        self.quad_bias = _product_quad_bias(kernel, weight)
        self.amx = self.quad_bias is not None and _product_amx(m, k)
        zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, n)
        panel_count = -(-n // int8.WIDTH)
        self.columns = panel_count * int8.WIDTH
        if self.quad_bias is None:
            words, pack, name, job = (k + 1) // 2, int8.pack_product_weight, "product_panels", int8.product_job
            self.rows = np.zeros((m + (-m) % int8.ROWS, words), np.int32)
        elif self.amx:
            from lite.kernels.fast import int8_amx

            self.rows, self.row_terms, words, pack, panel_count, self.columns = _tile_layout(m, k, n)
            name, job = "product_amx", int8_amx.product_amx_job
        else:
            from lite.kernels.fast import int8_quads

            int8_quads.warm()
            words, pack, name = (k + 3) // 4, _pack_weight_quads, "product_quads"
            job = int8_quads.quad_product_job
            self.rows, self.row_terms = np.zeros((m, words), np.int32), np.zeros(m, np.int32)

        self.panels = _once(kernel, name,
                            lambda: _packed_panels(pack, np.ascontiguousarray(weight), zero_point, panel_count, words))
        self.offsets = np.arange(words, dtype=np.int64) * int8.WIDTH
        self.kernel, self.m, self.k, self.n = kernel, m, k, n
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(job)
        self.out: np.ndarray | None = None
        self.steps: Callable[[], None] | None = None

    def _steps(self, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8

        bias, *terms = requantization_terms(self.kernel, narrow=True)
        quads = self.quad_bias is not None
        terms = padded_terms((self.quad_bias if quads else bias, *terms), self.columns)
        out = out.reshape(self.m, -1)
        if self.amx:
            return self._amx_steps(out.view(np.uint8), terms)

        threads, count = self.kernel.threads, self.panels.shape[0]
        spares = [np.zeros((int8.ROWS, int8.WIDTH), np.int32) for _ in range(threads.loop_pieces(count))]
        shared = (self.rows, self.panels, self.offsets, *terms, out)
        if quads:
            from lite.kernels.fast import int8_quads

            panels_call, job, row_terms = int8_quads.quad_product_panels, int8_quads.quad_product_job, self.row_terms
            leading = (self.rows, row_terms)
        else:
            panels_call, job, row_terms, leading = int8.product_panels, None, None, (self.rows,)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(panels_call, *leading, *shared[1:], spares[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8.product_crew_jobs(*shared, spares, bounds, job, row_terms)

        return threads.crew_loop(count, piece, jobs, per_thread=1)

    def _amx_steps(self, out: np.ndarray, terms: tuple) -> Callable[[], None]:
        """The steps on tiles: blocks of BLOCK columns shared out, each piece with its own scratch."""
        from lite.kernels.fast import int8_amx

        threads, count = self.kernel.threads, self.panels.shape[0]
        scratches = [np.zeros(int8_amx.PRODUCT_SCRATCH_WORDS, np.int32) for _ in range(threads.loop_pieces(count))]
        shared = (self.rows, self.row_terms, self.panels, *terms, out)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(int8_amx.product_amx_items, *shared, scratches[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8_amx.product_crew_jobs(*shared, scratches, bounds)

        return threads.crew_loop(count, piece, jobs, per_thread=1)

    def __call__(self) -> None:
        from lite.kernels.fast import int8

        x = _compiled_array(self.kernel.inputs[0].data).reshape(self.m, self.k)
        if self.quad_bias is None:
            int8.fill_rows(x, np.int64(self.kernel.layout.x_zero_point), self.rows)
        else:
            from lite.kernels.fast import int8_quads

            flip = np.uint8(0x80 if x.dtype == np.uint8 else 0)
            int8_quads.fill_quad_rows(x.view(np.uint8), flip, np.int64(128), self.rows[:self.m].view(np.uint8),
                                      self.row_terms[:self.m])
        out = self.kernel.outputs[0].data
        if out is not self.out:
            self.out, self.steps = out, self._steps(out)
        self.steps()


def _tile_layout(m: int, k: int, n: int) -> tuple:
    """What a quad product of M x K by K x N runs with on AMX tiles: (rows, row terms, quad words a
    row, the weight's packing, its panels before tiling, the columns of its blocks); the rows and
    row terms zero, padded as ``int8_amx.product_shapes`` pads them."""
    from lite.kernels.fast import int8, int8_amx

    int8_amx.warm()
    rows, words, blocks = int8_amx.product_shapes(m, k, n)
    columns = blocks * int8_amx.BLOCK
    return (_zeros((rows, words)), np.zeros(rows, np.int32), words, partial(_tile_weight_quads, blocks),
            -(-columns // int8.WIDTH), columns)


def _packed_panels(pack, weight: np.ndarray, zero_point: np.ndarray, panel_count: int, words: int) -> np.ndarray:
    """The weight packed by ``pack`` into ``panel_count`` panels of ``words`` words (64-byte aligned),
    or the tiles it returns where it tiles them (``_tile_weight_quads``)."""
    from lite.kernels.fast import int8

    packed = _zeros((panel_count, words, int8.WIDTH))
    tiles = pack(weight, zero_point, packed)
    return packed if tiles is None else tiles


def _zeros(shape: tuple[int, ...], dtype: np.dtype | type = np.int32) -> np.ndarray:
    """Zeros, 64-byte aligned (a tile's rows and a vector of 16 floats load whole from aligned addresses)."""
    array = aligned_array(shape, dtype)
    array[...] = 0
    return array


AMX_PRODUCT_ROWS = 16
"""The fewest rows for a product to run on AMX tiles: a tile's rows (fewer leave most of each
tile's products unused)."""


def _product_amx(m: int, k: int) -> bool:
    """Whether a quad product of ``m`` rows by a K x N weight runs on AMX tiles: ``AMX_PRODUCT_ROWS``
    rows or more, K of ``AMX_CHANNELS`` or more, and tiles here (``int8_amx.available``)."""
    if m < AMX_PRODUCT_ROWS or k < AMX_CHANNELS:
        return False
    from lite.kernels.fast import int8_amx

    return int8_amx.available()


def _activation_quad_plan(kernel) -> Callable[[], None] | None:
    """The byte-quad plan of a product of two 8-bit activations (``ActivationQuadPlan``), else None:
    no VNNI, transposed operands, batch dims that differ, or sums that could leave int32."""
    x_shape, w_shape = kernel.inputs[0].shape, kernel.inputs[1].shape
    if (not quads_run() or kernel.attrs.get("transpose_a") or kernel.attrs.get("transpose_b") or len(x_shape) < 2
            or tuple(x_shape[:-2]) != tuple(w_shape[:-2]) or len(kernel.inputs) > 2):
        return None
    x_zero, w_zero = kernel.layout.zero_points
    bound = offset_bound(kernel.inputs[0].dtype, x_zero) * offset_bound(kernel.inputs[1].dtype, w_zero)
    if x_shape[-1] * bound > INT32_LIMIT:
        return None
    return ActivationQuadPlan(kernel, x_shape, w_shape)


class ActivationQuadPlan:
    """A quantized product of two 8-bit activations (attention's) on ``int8_quads.activation_quad_batches``:
    batch by batch, x's rows filled as signed bytes and w packed as unsigned ones, then the quad
    product; the batches shared out among the model's threads."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w_shape: tuple[int, ...]):
        from lite.kernels.fast import int8, int8_quads

        int8_quads.warm_activations()
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(int8_quads.activation_job)
        (m, k), n = x_shape[-2:], w_shape[-1]
        self.batches, quads, columns = math.prod(x_shape[:-2]), (k + 3) // 4, -(-n // int8.WIDTH) * int8.WIDTH
        x, w = kernel.inputs[0], kernel.inputs[1]
        x_zero, w_zero = kernel.layout.zero_points
        self.flips = (np.uint8(0x80 if x.dtype == np.uint8 else 0), np.uint8(0x80 if w.dtype == np.int8 else 0))
        pad = x_zero - (128 if x.dtype == np.uint8 else 0)
        factor = w_zero + (128 if w.dtype == np.int8 else 0)
        self.offsets_of_bytes = (np.int64(factor), np.int64(pad))
        _, multiplier, *bounds = requantization_terms(kernel)
        self.terms = (np.full(columns, multiplier[0], np.float32), *bounds)
        self.shapes = ((self.batches, m, k), (self.batches, k, n), (self.batches, m, n))
        self.scratch = [self._scratch(m, quads, columns) for _ in range(kernel.threads.loop_pieces(self.batches))]
        self.offsets = np.arange(quads, dtype=np.int64) * int8.WIDTH
        self.kernel = kernel
        self.bound: tuple = ()
        self.step: Callable[[], None] | None = None

    @staticmethod
    def _scratch(m: int, quads: int, columns: int) -> tuple:
        """(rows and their bytes, row terms, panels and their bytes, column sums, bias, spare) of one piece."""
        from lite.kernels.fast import int8

        rows, panels = np.zeros((m, quads), np.int32), np.zeros((columns // int8.WIDTH, quads, int8.WIDTH), np.int32)
        return (rows, rows.view(np.uint8), np.zeros(m, np.int32), panels,
                panels.view(np.uint8).reshape(panels.shape[0], quads, -1), np.zeros(columns, np.int64),
                np.zeros(columns, np.int32), np.zeros((int8.ROWS, int8.WIDTH), np.int32))

    def _step(self, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8_quads

        x_shape, w_shape, out_shape = self.shapes
        x8, w8 = x.view(np.uint8).reshape(x_shape), w.view(np.uint8).reshape(w_shape)
        out8 = out.view(np.uint8).reshape(out_shape)
        (x_flip, w_flip), (factor, pad) = self.flips, self.offsets_of_bytes

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            rows, rows8, row_terms, panels, panels8, sums, bias, spare = self.scratch[index]
            return partial(int8_quads.activation_quad_batches, x8, x_flip, w8, w_flip, factor, pad, *self.terms,
                           out8, rows, rows8, row_terms, panels, panels8, sums, bias, self.offsets, spare, first,
                           last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8_quads.activation_crew_jobs(x8, w8, out8, self.flips, int(factor), int(pad), *self.terms,
                                                   self.offsets, self.scratch, bounds)

        return self.kernel.threads.crew_loop(self.batches, piece, jobs, per_thread=1)

    def __call__(self) -> None:
        x = _compiled_array(self.kernel.inputs[0].data)
        w = _compiled_array(self.kernel.inputs[1].data)
        out = self.kernel.outputs[0].data
        if len(self.bound) != 3 or any(a is not b for a, b in zip(self.bound, (x, w, out), strict=True)):
            self.bound, self.step = (x, w, out), self._step(x, w, out)
        self.step()


def integer_product_plan(kernel) -> Callable[[], None] | None:
    """The byte-quad plan of an ONNX MatMulInteger (``lite.kernels.integer.MatMulInteger``) with a
    constant 2-D weight whose offsets fit int8, an 8-bit x with one zero point (or none), where
    VNNI runs and every sum fits int32 (``IntegerProductPlan``); else None."""
    x, w = kernel.inputs[0], kernel.inputs[1]
    x_zero = kernel.zero_point_tensor(0)
    if (not quads_run() or not kernel.const_weight() or w.data is None or w.data.ndim != 2
            or len(x.shape) < 2 or x.dtype not in INT8_TYPES or (x_zero is not None and math.prod(x_zero.shape) != 1)):
        return None
    offsets = _once(kernel, "integer_offsets", lambda: _integer_offsets(kernel))
    bound = 0 if offsets is None else max(-int(offsets.min(initial=0)), int(offsets.max(initial=0)), 1)
    if offsets is None or x.shape[-1] * 255 * bound > INT32_LIMIT:
        return None
    return IntegerProductPlan(kernel, offsets)


def _integer_offsets(kernel) -> np.ndarray | None:
    """The constant weight less its zero point (K, N) as int8 (kept on the kernel: half of the int16
    it is computed in), or None where an offset leaves int8."""
    w = kernel.inputs[1].data
    zero_point = kernel.zero_point_tensor(1)
    offsets = weight_offsets(w, 0 if zero_point is None else np.asarray(zero_point.data).reshape(
        (1, -1) if zero_point.data.size > 1 else ()))
    return offsets.astype(np.int8) if offsets.min(initial=0) >= -128 and offsets.max(initial=0) <= 127 else None


class IntegerProductPlan:
    """MatMulInteger's int32 sums on byte quads (``int8_quads.quad_product_sums``), or on AMX tiles
    where they run (``int8_amx.product_amx_sums``, ``_product_amx``): x's rows as signed bytes
    (their row terms), the weight's offsets packed once as unsigned ones (+128), and x's zero point,
    read at each call (a DynamicQuantizeLinear's output), times the columns' sums of offsets as the
    columns' terms."""

    def __init__(self, kernel, offsets: np.ndarray):
        from lite.kernels.fast import int8, int8_quads

        int8_quads.warm()
        k, n = offsets.shape
        m, quads = math.prod(kernel.inputs[0].shape[:-1]), (k + 3) // 4
        self.amx = _product_amx(m, k)
        if self.amx:
            from lite.kernels.fast import int8_amx

            self.rows, self.row_terms, quads, pack, panel_count, columns = _tile_layout(m, k, n)
            name, job = "integer_amx", int8_amx.product_amx_job
        else:
            pack, name, job = _pack_weight_quads, "integer_quads", int8_quads.integer_product_job
            panel_count = -(-n // int8.WIDTH)
            columns = panel_count * int8.WIDTH
            self.rows, self.row_terms = np.zeros((m, quads), np.int32), np.zeros(m, np.int32)

        self.panels = _once(kernel, name, lambda: _packed_panels(pack, offsets, np.zeros(n, np.int64), panel_count,
                                                                 quads))
        if kernel.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(job)
        self.column_sums = np.zeros(columns, np.int64)
        self.column_sums[:n] = offsets.sum(axis=0, dtype=np.int64)
        self.column_terms = np.zeros(columns, np.int32)
        self.offsets = np.arange(quads, dtype=np.int64) * int8.WIDTH
        self.kernel, self.m, self.k, self.n = kernel, m, k, n
        self.out: np.ndarray | None = None
        self.step: Callable[[], None] | None = None
        self.scale = np.ones(columns, np.float32)
        self.scaled_key: tuple = ()
        self.scaled_step: Callable[[], None] | None = None

    def _step(self, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8, int8_quads

        out = out.reshape(self.m, self.n)
        threads, count = self.kernel.threads, self.panels.shape[0]
        if self.amx:
            return self._amx_step(out)
        spares = [np.zeros((int8.ROWS, int8.WIDTH), np.int32) for _ in range(threads.loop_pieces(count))]
        shared = (self.rows, self.row_terms, self.panels, self.offsets, self.column_terms, out)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(int8_quads.quad_product_sums, *shared, spares[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            unread = np.ones(self.column_terms.size, np.float32)  # NOTE: no requantization: the block's multiplier
            return int8.product_crew_jobs(self.rows, self.panels, self.offsets, self.column_terms, unread, 0.0, 0.0,
                                          0.0, out, spares, bounds, int8_quads.integer_product_job, self.row_terms)

        return threads.crew_loop(count, piece, jobs, per_thread=1)

    def _amx_step(self, out: np.ndarray, bias: np.ndarray | None = None) -> Callable[[], None]:
        """The sums on tiles (``out`` int32), or the sums scaled (``out`` float32: by ``self.scale``,
        plus ``bias`` where not empty): blocks of columns shared out, each piece with its own scratch."""
        from lite.kernels.fast import int8_amx

        threads, count = self.kernel.threads, self.panels.shape[0]
        scratches = [np.zeros(int8_amx.PRODUCT_SCRATCH_WORDS, np.int32) for _ in range(threads.loop_pieces(count))]
        leading = (self.rows, self.row_terms, self.panels, self.column_terms)
        scaled = bias is not None

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            if scaled:
                return partial(int8_amx.product_amx_scaled, *leading, self.scale, bias, out, scratches[index], first,
                               last)
            return partial(int8_amx.product_amx_sums, *leading, out, scratches[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8_amx.product_crew_jobs(*leading, self.scale, 0.0, 0.0, 0.0, out, scratches, bounds, bias)

        return threads.crew_loop(count, piece, jobs, per_thread=1)

    def _fill(self) -> None:
        """x's rows as signed quads and their terms, and the columns' terms of x's zero point."""
        from lite.kernels.fast import int8_quads

        kernel = self.kernel
        x = _compiled_array(kernel.inputs[0].data).reshape(self.m, self.k)
        zero_point = kernel.zero_point_tensor(0)
        x_zero = 0 if zero_point is None else int(np.asarray(zero_point.data).reshape(-1)[0])
        pad = x_zero - (128 if x.dtype == np.uint8 else 0)
        flip = np.uint8(0x80 if x.dtype == np.uint8 else 0)
        int8_quads.fill_quad_rows(x.view(np.uint8), flip, np.int64(128), self.rows[:self.m].view(np.uint8),
                                  self.row_terms[:self.m])
        self.column_terms[:] = (self.column_sums * -pad).astype(np.int32)

    def __call__(self) -> None:
        self._fill()
        out = self.kernel.outputs[0].data
        if out is not self.out:
            self.out, self.step = out, self._step(out)
        self.step()

    def scaled(self, scale: np.ndarray, bias: np.ndarray, out: np.ndarray) -> bool:
        """On tiles (``self.amx``): out (float32, the sums' shape) = float32(sum) * scale (one value,
        or one a column) plus ``bias`` (one a column; empty: none), in the pass after each block
        (``int8_amx.product_amx_scaled``), and True; elsewhere nothing, and False."""
        if not self.amx:
            return False
        self._fill()
        self.scale[:self.n] = scale
        if len(self.scaled_key) != 2 or self.scaled_key[0] is not out or self.scaled_key[1] is not bias:
            self.scaled_key, self.scaled_step = (out, bias), self._amx_step(out.reshape(self.m, self.n), bias)
        self.scaled_step()
        return True


def integer_conv_plan(kernel) -> Callable[[], None] | None:
    """The int16-pair plan of an ONNX ConvInteger (``lite.kernels.integer.ConvInteger``) with a
    constant weight, a 4-D x and a 2-D convolution, where compiled kernels run
    (``IntegerConvPlan``); else None. Every offset of x and w lies in [-255, 255], so each pair's
    two products sum exactly in int32, and the sums wrap as ONNX's 32-bit accumulation does."""
    w = kernel.inputs[1].data
    if (not fast.enabled() or not kernel.const_weight() or w is None or w.ndim != 4 or kernel.inner.rank != 2
            or len(kernel.inputs[0].shape) != 4):
        return None
    return IntegerConvPlan(kernel, kernel.inputs[0].shape, w)


class IntegerConvPlan:
    """ConvInteger's int32 sums on the convolutions' tiles: x less its zero point (read at each call:
    a DynamicQuantizeLinear's output) copied into the phases, the weight less its zero points
    packed once, the sums stored as they are; both loops' items shared out among the model's
    threads. On VNNI's byte quads where every weight offset fits int8 (``int8_quads.
    conv_quad_sum_items``: x's bytes less the pad byte, its share of the sums one term a channel
    at each call), else on int16 pairs (``int8.conv_sum_items``)."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w: np.ndarray):
        from lite.kernels.fast import int8

        n, group = x_shape[0], kernel.inner.group
        o_group, offsets = w.shape[0] // group, self._offsets(kernel, w)
        self.quads = quads_run() and int(offsets.min(initial=0)) >= -128 and int(offsets.max(initial=0)) <= 127
        words = (w.shape[1] + 3) // 4 if self.quads else (w.shape[1] + 1) // 2
        rows = group * o_group + (-o_group) % int8.ROWS
        self.weight = _once(kernel, "integer_words", lambda: self._packed(offsets, rows, words))
        self.weight_sums = offsets.reshape(w.shape[0], -1).sum(axis=1)
        self.terms = (np.zeros(max(int8.WIDTH, rows), np.int32), np.zeros(rows, np.int32))  # NOTE: columns', rows'
        layout = PhaseLayout(kernel.inner, x_shape, w.shape, words)
        self.offsets = layout.tap_offsets(words)
        panels, self.size = layout.panels_and_size(self.offsets, int8.WIDTH)
        self.filled, self.block, self.phase_shape, self.fill_args = layout.filled, layout.block, layout.shape, \
            layout.fill_args
        (oh, ow), wq = layout.out, layout.wq
        self.kernel, self.wq, self.items, self.fills = kernel, wq, n * group * panels, n * group * words
        self.grid = None if wq == ow else np.zeros((n, w.shape[0], oh * wq), np.int32)
        self.key: tuple = ()
        self.phases: np.ndarray | None = None
        self.steps: Callable[[], None] | None = None
        self.fill: tuple[tuple, Callable[[], None] | None] = ((), None)  # (what it was made for, the step)
        self._warm(np.dtype(kernel.inputs[0].dtype))

    def _warm(self, dtype: np.dtype) -> None:
        from lite.kernels.fast import crew, int8, int8_quads

        int8.warm_sums(dtype)
        if self.quads:
            int8_quads.warm()
        if self.kernel.threads.crew() is not None:
            crew.warm(*((int8_quads.conv_quad_sum_job, int8_quads.fill_quad_job) if self.quads else
                        (int8.conv_sum_job, int8.fill_job)))

    @staticmethod
    def _offsets(kernel, w: np.ndarray) -> np.ndarray:
        """The weight less its zero points (one a tensor or an output channel), int64."""
        zero_point = kernel.zero_point_tensor(1)
        shaped = kernel.shaped_zero_point(1, None if zero_point is None else zero_point.data, w.shape)
        return w.astype(np.int64) - (0 if shaped is None else np.asarray(shaped, np.int64))

    def _packed(self, offsets: np.ndarray, rows: int, words: int) -> np.ndarray:
        """The offsets as quad or pair words (rows padded to whole tiles; zeros past the channels)."""
        from lite.kernels.fast import int8, int8_quads

        packed = np.zeros((rows, words * offsets.shape[2] * offsets.shape[3]), np.int32)
        pack = int8_quads.pack_conv_quads if self.quads else int8.pack_conv_weight
        pack(np.ascontiguousarray(offsets), np.zeros(offsets.shape[0], np.int64), packed)
        return packed

    def _steps(self, flat: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        from lite.kernels.fast import int8, int8_quads

        threads, grid = self.kernel.threads, out.reshape(*out.shape[:2], -1) if self.grid is None else self.grid
        spares = [np.zeros((int8.ROWS, int8.WIDTH), np.int32) for _ in range(threads.loop_pieces(self.items))]
        shared = (flat, self.phase_shape[1], self.block, self.weight, self.offsets)
        columns, rows = self.terms
        block_terms = (rows, columns.view(np.float32), 0.0, 0.0, 0.0)  # NOTE: in the block's bias and multiplier slots
        if self.quads:
            items = partial(int8_quads.conv_quad_sum_items, *shared, columns, rows, grid)
            job = int8_quads.conv_quad_sum_job
        else:
            items, job = partial(int8.conv_sum_items, *shared, grid), int8.conv_sum_job

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(items, spares[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return int8.conv_crew_jobs(*shared, *block_terms, grid, spares, bounds, job)

        step = threads.crew_loop(self.items, piece, jobs)
        return step if self.grid is None else _Sequence([step, partial(int8.compact, self.grid, out, self.wq)])

    def _fill_step(self, x: np.ndarray, zero_point: int) -> Callable[[], None]:
        """The copy of x into the phases (less ``zero_point``; on quads its bytes, the pads the pad
        byte), made again when x, the phases or the zero point change."""
        from lite.kernels.fast import int8, int8_quads

        key = (x.ctypes.data, x.shape, self.phases.ctypes.data, zero_point)
        if self.fill[0] != key:
            if self.quads:
                flip = np.uint8(0x80 if x.dtype == np.int8 else 0)
                pad = (zero_point ^ int(flip)) & 0xFF
                args, items, job = (x.view(np.uint8), flip, np.int64(pad), self.phases, *self.fill_args), \
                    int8_quads.fill_quad_items, int8_quads.fill_quad_job
                self.terms[1][:self.weight_sums.size] = (self.weight_sums * -pad).astype(np.int32)  # NOTE: wraps
            else:
                args, items, job, pad = (x, np.int64(zero_point), self.phases, *self.fill_args), \
                    int8.fill_phase_items, None, zero_point
            self.fill = key, _fill_step(self.kernel.threads, x, items, args, self.fills,
                                        lambda bounds: int8.fill_crew_jobs(x, pad, self.phases, *self.fill_args,
                                                                           bounds, job))
        return self.fill[1]

    def __call__(self) -> None:
        flat = self.kernel.workspace.array((self.size,), np.int32, PHASES_SLOT)  # NOTE: scratch the kernels share
        out, x = self.kernel.outputs[0].data, _compiled_array(self.kernel.inputs[0].data)
        if self.key != (flat.ctypes.data, out.ctypes.data, out.shape):
            self.key = (flat.ctypes.data, out.ctypes.data, out.shape)
            self.phases = flat[:self.filled].reshape(self.phase_shape)
            self.steps = self._steps(flat, out)
        zero_point = self.kernel.zero_point_tensor(0)
        self._fill_step(x, 0 if zero_point is None else int(np.asarray(zero_point.data).reshape(-1)[0]))()
        flat[self.filled:] = 0  # NOTE: past the last block: read by panels whose outputs are dropped
        self.steps()


def _depthwise_plan(kernel) -> Callable[[], None] | None:
    """The compiled plan of a depthwise convolution whose sums are exact in float32
    (``exact_in_float32``), else None: x not 4-D, or sums plus bias that could reach
    ``FLOAT32_EXACT`` (the bias joins the float32 sums)."""
    x_shape, w = kernel.inputs[0].shape, kernel.inputs[1].data
    if len(x_shape) != 4 or w.ndim != 4 or w.shape[0] % x_shape[1] or kernel.inner.group != x_shape[1]:
        return None
    bias = 0 if kernel.bias_acc is None else int(np.abs(kernel.bias_acc).max(initial=0))
    taps = w.shape[2] * w.shape[3]
    if taps * offset_bound(kernel.inputs[0].dtype, kernel.layout.x_zero_point) * _kernel_weight_bound(kernel) \
            + bias >= FLOAT32_EXACT:
        return None
    plan = DepthwiseInt8Plan(kernel, x_shape, w)
    if kernel.threads.crew() is not None:
        from lite.kernels.fast import crew

        crew.warm(plan.loop.crew_job())
    return plan


def _depthwise_taps(kernel, w: np.ndarray) -> np.ndarray:
    """The weight minus its zero points as float32 taps, (O, taps) (exact: 8-bit offsets)."""
    zero_point = _per_channel(kernel.inputs[1].quant_params.zero_point, w.shape[0])
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).astype(np.int64) - zero_point[:, None], np.float32)


class DepthwiseInt8Plan:
    """A quantized depthwise convolution on ``int8_blocked_depthwise`` where it ``fits`` (16
    channels at once), else on ``int8_depthwise`` (``Int8Depthwise``, plane by plane), its output
    shared out among the model's threads (the crew's jobs on idle cores)."""

    def __init__(self, kernel, x_shape: tuple[int, ...], w: np.ndarray):
        from lite.kernels.fast import int8_blocked_depthwise
        from lite.kernels.fast.int8_depthwise import Int8Depthwise
        from lite.kernels.window import Geometry

        inner = kernel.inner
        begins, ends, out = inner.geometry(x_shape, w.shape)
        geometry = Geometry(tuple(x_shape), w.shape[2:], inner.strides, inner.dilations, begins, ends, out)
        blocked = int8_blocked_depthwise.fits(geometry, w.shape[0])
        self.loop = int8_blocked_depthwise.BlockedInt8Depthwise(geometry) if blocked else Int8Depthwise(geometry)
        weight = _once(kernel, "depthwise_taps", lambda: _depthwise_taps(kernel, w))
        bias, multiplier, zp, lo, hi = requantization_terms(kernel)
        bias = bias.astype(np.float32)  # NOTE: exact: checked below FLOAT32_EXACT
        self.arrays = self.loop.arranged(weight, bias, multiplier)
        self.floats = (float(kernel.layout.x_zero_point), float(zp), float(lo), float(hi))
        self.kernel, self.items = kernel, self.loop.count(x_shape[0], w.shape[0])
        self.loop.warm(np.dtype(kernel.inputs[0].dtype))
        self.x: np.ndarray | None = None
        self.out: np.ndarray | None = None
        self.steps: Callable[[], None] | None = None

    @property
    def blocked(self) -> bool:
        """Whether the layer runs on 16-channel blocks."""
        from lite.kernels.fast.int8_blocked_depthwise import BlockedInt8Depthwise

        return isinstance(self.loop, BlockedInt8Depthwise)

    def _steps(self, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        # NOTE: the scratch 64-byte aligned: the blocked kernel's vectors are whole cache lines
        # (misaligned, a 56 x 56 stride-2 layer took a third longer)
        loop, view = self.loop, out.view(np.uint8)
        scratch = [[_zeros(shape, kind) for shape, kind in zip(loop.scratch, loop.scratch_kinds(x.dtype), strict=True)]
                   for _ in range(self.kernel.threads.loop_pieces(self.items))]
        call = loop.call(x, self.floats, self.arrays, view)

        def piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(call, *scratch[index], first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return loop.crew_jobs(x, self.floats, self.arrays, view, scratch, bounds)

        return self.kernel.threads.crew_loop(self.items, piece, jobs)

    def __call__(self) -> None:
        x, out = _compiled_array(self.kernel.inputs[0].data), self.kernel.outputs[0].data
        if x is not self.x or out is not self.out:
            self.x, self.out, self.steps = x, out, self._steps(x, out)
        self.steps()
