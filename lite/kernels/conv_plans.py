"""The ways Conv2DFusion runs, as a ranked table (``ALGORITHMS``, best first; ``lite.kernels.plans``).

Each entry fits a ``ConvLayer`` (shapes, dtype, group, whether the weight is constant, whether
compiled kernels run and the register-width rules of ``lite.kernels.fast``) and makes a plan
whose ``steps`` run the convolution with the ``Epilogue`` it is handed:

- small_plane: ``fast.small_plane``, 2-D float32 with a constant weight on output planes of 7 to
  49 positions (ResNet's last stage).
- blocked_pointwise: ``fast.blocked_direct`` on 1x1 layers of small planes where BLAS runs AVX2 kernels on a
  core whose compiled kernels use 512-bit registers.
- gemm_direct: a 1x1 stride-1 unpadded convolution is one matmul on the input view.
- flat_depthwise, compiled_depthwise: compiled direct depthwise kernels (one input channel per
  group, 1-D as 2-D of height 1): ``fast.flat`` where stride 1 keeps the row width, else
  ``fast.depthwise``; the only plans that take the producer's epilogue as a prologue.
- depthwise: numpy; each tap is copied as OH full rows of its plane (long contiguous runs), a chunk
  of channels at a time; the matmul (C, O/C, KH*KW) by (N, C, KH*KW, OH * plane width) fills a
  buffer whose valid columns, plus the bias, are the output.
- winograd: F(4x4, 3x3) (``fast.winograd``) on constant 3x3 stride-1 weights where it beats the
  others (with 512-bit registers, not where ``compiled_direct`` fits: ``winograd.DIRECT_FIRST``).
- compiled_direct: ``fast.direct``, float32 with few input terms (C * KH * KW up to
  ``fast.direct.MAX_TERMS``: stems, 3x3 on up to 128 channels).
- blocked_direct: ``fast.blocked_direct``, other undilated float32 ones (on channel blocks, no im2col).
- im2col: the input is padded (and, for overlapping strided windows, split into stride phases:
  ``Planes``) in a workspace buffer; the taps reading one plane are copied through one strided
  view into columns laid out (N, C, kernel..., out...), and one matmul of weight (group, O/group,
  K) by columns (N, group, K, out elements) writes the output. Every layer fits it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel, Step, copy_step
from lite.kernels.fused import (
    activation_code,
    activation_epilogue_step,
    activation_step,
    compilable,
    compiled_terms,
    epilogue_steps,
)
from lite.kernels.parallel import KernelThreads
from lite.kernels.plans import Algorithm, Derived, Epilogue, Plan, Scratch
from lite.kernels.window import Geometry, Planes, strided_view
from lite.threads import AVX2_BLAS_KERNELS, blas_architectures

DEPTHWISE_CHUNK_BYTES = 1 << 20
BAND_FROM_BYTES = 4 << 20  # im2col columns larger than this are gathered and multiplied in bands of rows
BAND_BYTES = 1 << 20  # the columns of one band: they stay in the core's cache between gather and product


@dataclass(frozen=True)
class ConvLayer:
    """What the table reads of one convolution at one input shape: input ``x`` and weight ``w``
    shapes, the window's attributes, its pads and output sizes, the input's dtype and whether the
    weight is constant."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    group: int
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    out: tuple[int, ...]
    dtype: np.dtype
    const_weight: bool

    @property
    def rank(self) -> int:
        return len(self.strides)

    def geometry(self) -> Geometry:
        """The 2-D window's geometry (2-D layers only)."""
        return Geometry(self.x, tuple(self.w[2:]), self.strides, self.dilations, self.begins, self.ends, self.out)

    def lifted(self) -> Geometry:
        """The geometry of a 1-D or 2-D layer, 1-D as 2-D of height 1."""
        lift = (1,) * (2 - self.rank)
        no_pads = (0,) * len(lift)
        return Geometry((*self.x[:2], *lift, *self.x[2:]), (*lift, *self.w[2:]), (*lift, *self.strides),
                        (*lift, *self.dilations), (*no_pads, *self.begins), (*no_pads, *self.ends), (*lift, *self.out))

    def compiled_dtype(self) -> bool:
        """Whether compiled kernels run for this dtype (the compiled depthwise kernel then always
        does: it beats numpy on every geometry measured)."""
        return fast.enabled() and self.dtype.name in fast.FAST_DTYPES


# ---- whether each algorithm fits (``fast`` modules imported only where compiled kernels run) -----

def fits_small_plane(layer: ConvLayer) -> bool:
    """2-D float32 convolutions with a constant weight whose groups, output plane (7 to 49
    positions) and output channels ``small_plane.fits`` takes."""
    if layer.rank != 2 or layer.dtype != np.float32 or not layer.const_weight or not fast.enabled():
        return False
    from lite.kernels.fast import small_plane  # NOTE: imports the compiler: only when used

    return small_plane.fits(layer.geometry(), layer.group, layer.w[0])


def fits_gemm_direct(layer: ConvLayer) -> bool:
    """1x1, stride 1, no pads: the input is the columns."""
    return max(*layer.w[2:], *layer.strides) == 1 and not any(layer.begins) and not any(layer.ends)


def fits_depthwise(layer: ConvLayer) -> bool:
    """One input channel per group, several groups, 1-D or 2-D."""
    return layer.w[1] == 1 and layer.group > 1 and layer.rank <= 2


def fits_compiled_depthwise(layer: ConvLayer) -> bool:
    return fits_depthwise(layer) and layer.compiled_dtype()


def fits_flat_depthwise(layer: ConvLayer) -> bool:
    """A compiled depthwise layer of stride 1 whose output rows are as wide as the input's."""
    if not fits_compiled_depthwise(layer):
        return False
    from lite.kernels.fast import flat  # NOTE: imports the compiler: only when used

    return flat.fits(layer.lifted())


def fits_compiled_direct(layer: ConvLayer) -> bool:
    """2-D float32 convolutions of one group with several taps and at most ``MAX_TERMS`` terms."""
    if layer.rank != 2 or layer.dtype != np.float32 or not fast.enabled():
        return False
    from lite.kernels.fast import direct  # NOTE: imports the compiler: only when used

    return direct.fits(layer.geometry(), layer.x[1], layer.group)


POINTWISE_MAX_POSITIONS = 28 * 28
POINTWISE_MIN_CHANNELS = 128
"""The most output positions, and the fewest input and output channels, of a 1x1 layer that runs
``blocked_direct`` where BLAS runs AVX2 kernels on a core whose compiled kernels compute in 512-bit
registers: there it measured 0.59-0.81 of BLAS's time (ResNet-50's 1x1 layers on 28 x 28 and 14 x 14,
SqueezeNet's 512 -> 1000 layer); on 56 x 56 planes 0.83-1.35, and with 32-64 channels on either side
(SqueezeNet's others) 1.0-1.5."""


def fits_blocked_pointwise(layer: ConvLayer) -> bool:
    """2-D float32 1x1 convolutions of one group on at most POINTWISE_MAX_POSITIONS output positions, with
    POINTWISE_MIN_CHANNELS input and output channels or more, where numpy's BLAS runs AVX2 kernels
    (``AVX2_BLAS_KERNELS``: ``OPENBLAS_CORETYPE``, or an OpenBLAS that does not know the CPU) and the compiled
    kernels 512-bit ones: ``fast.blocked_direct`` then beats BLAS there (with BLAS's AVX-512 kernels, BLAS
    wins: docs/performance.md, BLAS kernels)."""
    if (layer.rank != 2 or layer.dtype != np.float32 or layer.group != 1 or tuple(layer.w[2:]) != (1, 1)
            or layer.dilations != (1, 1) or math.prod(layer.out) > POINTWISE_MAX_POSITIONS
            or min(layer.x[1], layer.w[0]) < POINTWISE_MIN_CHANNELS or not fast.enabled()
            or not fast.wide_registers()):
        return False
    return bool(blas_architectures() & AVX2_BLAS_KERNELS)


def fits_blocked_direct(layer: ConvLayer) -> bool:
    """2-D float32 undilated convolutions of one group with several taps (ResNet's 3x3 layers on 256
    and 512 channels, past ``fast.direct``'s terms)."""
    if layer.rank != 2 or layer.dtype != np.float32 or not fast.enabled():
        return False
    from lite.kernels.fast import blocked_direct  # NOTE: imports the compiler: only when used

    return blocked_direct.fits(layer.geometry(), layer.group)


def fits_winograd(layer: ConvLayer) -> bool:
    """A constant 3x3 stride-1 weight, one group, a compiled dtype, a shape where it beats the other
    kernels (``fast.winograd.worth_it``), and no direct kernel that keeps it (``winograd.DIRECT_FIRST``)."""
    if (layer.rank != 2 or tuple(layer.w[2:]) != (3, 3) or layer.strides != (1, 1) or layer.dilations != (1, 1)
            or layer.group != 1 or not layer.const_weight or not layer.compiled_dtype()):
        return False
    from lite.kernels.fast import winograd  # NOTE: imports the compiler: only when used

    if winograd.DIRECT_FIRST and fits_compiled_direct(layer):
        return False
    return winograd.worth_it(layer.x[1], layer.w[0], layer.out)


# ---- the epilogue, as the plans' steps apply it --------------------------------------------------

def finish_steps(threads: KernelThreads, out: np.ndarray, epilogue: Epilogue) -> list[Step]:
    """The epilogue's calls on ``out``: bias, the residual (when it has one) and the activation, one
    compiled pass where it runs; or bias and the absorbed Activation's function, one compiled pass."""
    shift = None if epilogue.bias is None else epilogue.bias.data
    if epilogue.absorbed is not None:
        steps = [activation_epilogue_step(out, shift, *epilogue.absorbed)]
    elif epilogue.residual is None:
        steps = epilogue_steps(out, shift, None, epilogue.activation)
    else:
        steps = epilogue_steps(out, shift, epilogue.residual.data, epilogue.residual_activation)
    return on_crew(threads, steps)


def on_crew(threads: KernelThreads, steps: list[Step]) -> list[Step]:
    """The steps, compiled epilogues among them on the model's crew where it runs (float32)."""
    if threads.crew() is None:
        return steps
    from lite.kernels.fast import epilogue

    return [epilogue.on_crew(threads, step) for step in steps]


def warm_crew(threads: KernelThreads, dtype: np.dtype, *jobs) -> None:
    """Compiles the crew, the epilogue's job and these job functions now, at build, where float32
    runs on the model's crew (else in the first predict)."""
    if dtype != np.float32 or threads.crew() is None:
        return
    from lite.kernels.fast import crew, epilogue

    crew.warm(epilogue.epilogue_job, *jobs)


def warm_epilogues(dtype: np.dtype) -> None:
    """Compiles (or loads) the compiled bias-and-clip epilogues of a float ``dtype`` now, at build, not
    in the first predict (``lite.kernels.fused.epilogue_steps`` uses them)."""
    if np.dtype(dtype) not in (np.float32, np.float64) or not fast.enabled():
        return
    from lite.kernels.fast import epilogue

    epilogue.warm(np.dtype(dtype).name)


def epilogue_terms(epilogue: Epilogue, channels: int, dtype: np.dtype) -> tuple:
    """(shift per output channel, lo, hi, code, alpha): the bias and clip, then the absorbed
    Activation, as the compiled depthwise kernels take an epilogue (or a prologue)."""
    bias = None if epilogue.bias is None else epilogue.bias.data
    return (*compiled_terms(bias, channels, epilogue.activation, dtype), *activation_code(epilogue.absorbed, dtype))


def compiled_residual(out: np.ndarray, epilogue: Epilogue) -> tuple[np.ndarray | None, str, list[Step]]:
    """(residual, activation, later steps) for a compiled kernel's own epilogue: the residual and the
    activation after it; where compiled code cannot take the residual, none, no activation, and the
    epilogue steps that add both afterwards."""
    residual = None if epilogue.residual is None else epilogue.residual.data
    activation = epilogue.activation if residual is None else epilogue.residual_activation
    if residual is not None and not compilable(out, residual):
        return None, "NO_ACTIVATION", epilogue_steps(out, None, residual, activation)
    return residual, activation, []


def direct_operands(plan: ConvPlan, out: np.ndarray, weights: np.ndarray, epilogue: Epilogue
                    ) -> tuple[np.ndarray, np.ndarray | None, tuple, int, np.generic, list[Step]]:
    """(packed weight, residual, (shift, lo, hi), code, alpha, later steps) as the compiled direct
    kernels (``fast.direct``, ``fast.blocked_direct``, ``fast.small_plane``) take them: the weight
    as the plan packs it (``ConvPlan.packed_weight``), the residual, and the epilogue's terms."""
    packed = plan.packed_weight(weights)
    residual, activation, later = compiled_residual(out, epilogue)
    bias = None if epilogue.bias is None else epilogue.bias.data
    terms = compiled_terms(bias, out.shape[1], activation, out.dtype)
    return (packed, residual, terms, *activation_code(epilogue.absorbed, out.dtype), later)


# ---- the plans -----------------------------------------------------------------------------------

class ConvPlan(Plan):
    """A convolution's plan: ``steps`` runs it on these arrays, ``weights`` arranged as
    ``Conv2DFusion.arrange`` makes them. ``epilogue`` is None where a reader applies it
    (``leaves_epilogue``); ``prologue`` is the producer's epilogue to apply to the input
    (``takes_prologue``), or None."""

    def steps(self, threads: KernelThreads, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray],
              weights: np.ndarray, epilogue: Epilogue | None, prologue: Epilogue | None) -> list[Step]:
        raise NotImplementedError

    derived: Derived | None = None  # the convolution's (``NativeKernel.derived``), for the compiled plans

    def packed_weight(self, weights: np.ndarray) -> np.ndarray:
        """``weights`` (shaped ``self.w``) as ``self.compiled.arrange`` packs it: C-contiguous and writable
        (a read-only array is another type to the compiler), kept in the convolution's ``derived`` while the
        weight array stays, so a resize or new activation arrays do not pack it again."""
        def arranged(source: np.ndarray) -> np.ndarray:
            return np.require(self.compiled.arrange(source.reshape(self.w)), requirements=["C", "W"])

        return self.derived.get(f"arranged for {type(self.compiled).__name__}", weights, arranged)

    def pack_now(self, conv: NativeKernel) -> None:
        """Packs a constant weight at build (``conv.weight_matrix()``), so the first predict does not."""
        self.derived = conv.derived
        if conv.inputs[1].is_const:
            self.packed_weight(conv.weight_matrix())

    def keep_compiled(self, plan, layer: ConvLayer, conv: NativeKernel, count: int, *jobs) -> None:
        """Keeps a compiled kernel's ``plan`` (its first scratch shared, the others one set for each
        piece of a loop of ``count``), compiles it and its crew ``jobs`` and packs a constant weight now."""
        self.compiled, self.w = plan, layer.w
        self.scratch = Scratch(plan.scratch[0], *plan.scratch[1:] * conv.threads.loop_pieces(count))
        plan.warm()
        warm_crew(conv.threads, layer.dtype, *jobs)
        self.pack_now(conv)


class SmallPlane(ConvPlan):
    """The compiled small-plane kernel: the input padded (where the geometry pads), then panels of
    output channels shared out among the model's threads (a buffer of sums for each piece), written
    out with bias, residual and activation."""

    packs = True
    takes_residual = True

    def __init__(self, layer: ConvLayer, conv: NativeKernel):
        from lite.kernels.fast.small_plane import SmallPlanePlan, panels_job

        plan = SmallPlanePlan(layer.geometry(), layer.w[0])
        self.keep_compiled(plan, layer, conv, plan.panels, panels_job)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        from lite.kernels.fast.small_plane import crew_jobs

        plan, (padded, *sums) = self.compiled, buffers
        packed, residual, terms, code, alpha, later = direct_operands(self, out, weights, epilogue)
        x, steps = fast.compiled_input(x)
        for image in range(x.shape[0]):
            source = plan.source(x, image, padded)

            def piece(index: int, first: int, last: int, source: np.ndarray = source, image: int = image) -> Step:
                return partial(plan.run, source, packed, sums[index], out, image, *terms, code, alpha, first, last,
                               residual)

            def jobs(bounds: list[tuple[int, int]], source: np.ndarray = source, image: int = image) -> Step:
                return crew_jobs(plan, source, packed, sums, out, image, *terms, code, alpha, bounds, residual)

            if plan.padded:
                steps.append(partial(plan.fill, x, image, padded))
            steps.append(threads.crew_loop(plan.panels, piece, jobs))
        return steps + on_crew(threads, later)


class GemmDirect(ConvPlan):
    """One matmul of the weight by the input itself, then bias and activation (unless the depthwise
    convolution reading the output applies them: ``Conv2DFusion.hand_epilogue``)."""

    takes_residual = True
    leaves_epilogue = True

    def __init__(self, layer: ConvLayer, _conv: NativeKernel):
        (n, *_), g, positions = layer.x, layer.group, math.prod(layer.out)
        self.cols, self.products = (n, g, layer.w[1], positions), (n, g, layer.w[0] // g, positions)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        product = threads.matmul_step(weights, x.reshape(self.cols), out.reshape(self.products))
        return [product] if epilogue is None else [product, *finish_steps(threads, out, epilogue)]


class CompiledDepthwise(ConvPlan):
    """The compiled direct depthwise kernel of a 2-D geometry (``fast.flat`` or ``fast.depthwise``),
    bias and activation fused, its output planes shared out among the model's threads (scratch for
    each piece); it applies the producer's handed epilogue to each input plane as it copies it in."""

    packs = True
    takes_prologue = True

    def __init__(self, layer: ConvLayer, conv: NativeKernel, flat: bool):
        from lite.kernels.fast import depthwise
        from lite.kernels.fast import flat as flat_module

        geometry, out_c = layer.lifted(), layer.w[0]
        self.module = flat_module if flat else depthwise
        kind, job = (flat_module.FlatPlan, flat_module.flat_job) if flat else (depthwise.DepthwisePlan,
                                                                                depthwise.depthwise_job)
        self.compiled = plan = kind(geometry)
        self.x_shape, self.out_shape = geometry.x, (geometry.x[0], out_c, *geometry.out)
        self.scratch = Scratch(*plan.scratch * conv.threads.loop_pieces(self.out_shape[0] * out_c))
        self.w = (out_c, 1, *plan.geometry.kernel)
        plan.warm(layer.dtype)
        warm_crew(conv.threads, layer.dtype, job)
        self.pack_now(conv)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        from lite.kernels.fast.depthwise import no_prologue

        crew_jobs, plan, out_c = self.module.crew_jobs, self.compiled, self.out_shape[1]
        *terms, code, alpha = epilogue_terms(epilogue, out_c, out.dtype)
        before = no_prologue(out.dtype) if prologue is None else epilogue_terms(prologue, self.x_shape[1], out.dtype)
        kernel = self.packed_weight(weights)
        (x, steps), out = fast.compiled_input(x.reshape(self.x_shape)), out.reshape(self.out_shape)
        count, per = out.shape[0] * out_c, len(plan.scratch)
        # NOTE: each piece its own scratch
        scratch = [buffers[i * per:(i + 1) * per] for i in range(threads.loop_pieces(count))]

        def piece(index: int, first: int, last: int) -> Step:
            return partial(plan.run, x, kernel, *terms, out, scratch[index], first, last, code, alpha, before)

        def jobs(bounds: list[tuple[int, int]]) -> Step:
            return crew_jobs(plan, x, kernel, *terms, out, scratch, bounds, code, alpha, before)

        return [*steps, threads.crew_loop(count, piece, jobs if out.dtype == np.float32 else None)]


class Depthwise(ConvPlan):
    """The numpy depthwise plan of a 2-D geometry (1-D arrives lifted to height 1)."""

    def __init__(self, layer: ConvLayer, _conv: NativeKernel):
        g, out_c = layer.lifted(), layer.w[0]
        (n, c, h, wd), (kh, kw), (out_h, out_w) = g.x, g.kernel, g.out
        item, geometry = layer.dtype.itemsize, (g.begins, g.kernel, g.strides, g.dilations, g.out)
        width = Planes((n, 1, h, wd), *geometry, spare_row=True, split=True).dims[1]
        length = out_h * width
        # NOTE: channels go in chunks whose columns stay in cache between the copies and the matmul.
        per = max(1, min(c, DEPTHWISE_CHUNK_BYTES // max(1, n * kh * kw * length * item)))
        self.chunks = [slice(start, min(c, start + per)) for start in range(0, c, per)]
        self.planes = planes = Planes((n, per, h, wd), *geometry, spare_row=True, split=True)
        self.scratch = Scratch(planes.shape, (n, per, kh * kw + 1, length), (n, per, out_c // c, out_h, width))
        plane = math.prod(planes.dims)
        self.gathers = [(phase, (slice(None), slice(None), *taps), tuple(map(count, taps)),
                         tuple(item * s for s in (per * plane, plane, *steps, 1)), item * first)
                        for phase, taps, first, steps in planes.tap_groups()]
        self.x_shape, self.out_shape = g.x, (n, c, out_c // c, out_h, out_w)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        """Per chunk: copy its channels into the padded planes, gather the taps into columns, one
        matmul whose last column of weights is the bias (against a row of ones under the taps),
        then the valid columns into the output, clipped there by the activation. The pad border
        and the row of ones are written once per run: the chunks only write inside them."""
        (planes, cols, wide), x, out = buffers, x.reshape(self.x_shape), out.reshape(self.out_shape)
        (n, channels, out_per_channel, _, out_w), (*_, taps, length) = self.out_shape, cols.shape
        (kh, kw), ones = self.planes.kernel_size, cols[:, :, taps - 1]
        grid = cols[:, :, :taps - 1].reshape(n, cols.shape[1], kh, kw, length)
        bias = epilogue.bias
        column = np.zeros((channels, out_per_channel, 1), weights.dtype) if bias is None else \
            bias.data.reshape(channels, out_per_channel, 1)
        weights = np.concatenate([weights, column], axis=2)
        steps: list[Step] = [partial(planes.fill, 0), partial(ones.fill, 1)]
        for chunk in self.chunks:
            count, target = chunk.stop - chunk.start, out[:, chunk]
            steps += [copy_step(planes[:, :, :, :count][into], x[:, chunk][source])
                      for into, source in self.planes.copies]
            steps += [copy_step(grid[:, :count][into],
                                strided_view(planes[phase], (n, count, *tap_grid, length), strides, first))
                      for phase, into, tap_grid, strides, first in self.gathers]
            chunk_wide = wide[:, :count]
            steps.append(partial(np.matmul, weights[chunk], cols[:, :count],
                                 out=chunk_wide.reshape(n, count, out_per_channel, length)))
            steps.append(activation_step(target, epilogue.activation, chunk_wide[..., :out_w]))
        return steps


class Winograd(ConvPlan):
    """Winograd F(4x4, 3x3): input transform, 36 products, output transform with bias, residual and
    activation; the float32 transforms on the model's crew where it runs. The transformed weight is
    made at the layer's first Winograd plan and kept."""

    packs = True
    takes_residual = True

    def __init__(self, layer: ConvLayer, conv: NativeKernel):
        from lite.kernels.fast import winograd

        x, out_c, threads = layer.x, layer.w[0], conv.threads
        self.compiled = plan = winograd.WinogradPlan(x, out_c, layer.begins, layer.out)
        pieces = max(threads.loop_pieces(x[0] * x[1]), threads.loop_pieces(x[0] * out_c))
        self.scratch = Scratch(*plan.scratch, *plan.scratch[-1:] * (pieces - 1))  # NOTE: a padded plane a piece
        self.weights = conv.derived.get("winograd", conv.inputs[1].data, winograd.transform_weights)
        winograd.warm(layer.dtype.name)
        warm_crew(threads, layer.dtype, winograd.input_job, winograd.output_job)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        x, steps = fast.compiled_input(x)
        residual, activation, later = compiled_residual(out, epilogue)
        if epilogue.absorbed is not None:
            later.append(activation_epilogue_step(out, None, *epilogue.absorbed))
        bias = None if epilogue.bias is None else epilogue.bias.data
        terms = compiled_terms(bias, out.shape[1], activation, out.dtype)
        transforms = self.compiled.steps(x, self.weights, *terms, residual, out, buffers, threads.matmul_step)
        return [*steps, *self.on_crew(threads, transforms, x, out, buffers), *on_crew(threads, later)]

    @staticmethod
    def on_crew(threads: KernelThreads, steps: list[Step], x: np.ndarray, out: np.ndarray,
                buffers: list[np.ndarray]) -> list[Step]:
        """Winograd's steps, the float32 transforms on the model's crew where it runs."""
        bounds_in = threads.loop_bounds(x.shape[0] * x.shape[1])
        bounds_out = threads.loop_bounds(out.shape[0] * out.shape[1])
        if out.dtype != np.float32 or len(bounds_in) < 2 or threads.crew() is None:
            return steps
        from lite.kernels.fast import winograd

        jobs_in, jobs_out = winograd.crew_transforms(steps, bounds_in, bounds_out, buffers[2:])
        return [threads.crew_step(jobs_in, steps[0]), steps[1], threads.crew_step(jobs_out, steps[2])]


class CompiledDirect(ConvPlan):
    """The compiled direct kernel: per image its phases, then bands of output rows shared out among
    the model's threads (each piece with its own wide plane), written out with bias, residual and
    activation."""

    packs = True
    takes_residual = True

    def __init__(self, layer: ConvLayer, conv: NativeKernel):
        from lite.kernels.fast.direct import DirectPlan, rows_job

        plan = DirectPlan(layer.geometry(), layer.w[0])
        self.keep_compiled(plan, layer, conv, plan.oh, rows_job)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        from lite.kernels.fast.direct import CREW_PER_THREAD, crew_jobs

        plan, (phases, *wides) = self.compiled, buffers
        packed, residual, terms, code, alpha, later = direct_operands(self, out, weights, epilogue)
        x, steps = fast.compiled_input(x)
        for image in range(x.shape[0]):
            def piece(index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.rows, packed, phases, wides[index], out, image, *terms, code, alpha, first, last,
                               residual)

            def jobs(bounds: list[tuple[int, int]], image: int = image) -> Step:
                return crew_jobs(plan, packed, phases, wides, out, image, *terms, code, alpha, bounds, residual)

            rows = threads.crew_loop(plan.oh, piece, jobs, CREW_PER_THREAD)
            steps += [partial(plan.fill, x, image, phases), rows]
        return steps + on_crew(threads, later)


class BlockedDirect(ConvPlan):
    """The compiled blocked direct kernel: per image the input into padded channel blocks, the
    products' units, then the output with bias, residual and activation; each shared out among the
    model's threads."""

    packs = True
    takes_residual = True

    def __init__(self, layer: ConvLayer, conv: NativeKernel):
        from lite.kernels.fast.blocked_direct import BlockedDirectPlan, fill_job, products_job, write_job

        self.compiled = plan = BlockedDirectPlan(layer.geometry(), layer.w[0])
        self.w = layer.w
        self.scratch = Scratch(*plan.scratch)
        plan.warm()
        warm_crew(conv.threads, layer.dtype, fill_job, products_job, write_job)
        self.pack_now(conv)

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        from lite.kernels.fast.blocked_direct import fill_jobs, products_jobs, write_jobs

        plan, (padded, wide), out_c = self.compiled, buffers, out.shape[1]
        packed, residual, terms, code, alpha, later = direct_operands(self, out, weights, epilogue)
        x, steps = fast.compiled_input(x)

        def products(_index: int, first: int, last: int) -> Step:
            return partial(plan.products, packed, padded, wide, first, last)

        steps_of_products = threads.crew_loop(plan.units, products,
                                              lambda bounds: products_jobs(plan, packed, padded, wide, bounds))
        for image in range(x.shape[0]):
            def fill(_index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.fill, x, image, padded, first, last)

            def write(_index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.write_out, wide, out, image, *terms, code, alpha, first, last, residual)

            steps += [
                threads.crew_loop(padded.shape[0], fill,
                                  lambda bounds, image=image: fill_jobs(plan, x, image, padded, bounds)),
                steps_of_products,
                threads.crew_loop(out_c, write, lambda bounds, image=image: write_jobs(
                    plan, wide, out, image, *terms, code, alpha, bounds, residual)),
            ]
        return steps + on_crew(threads, later)


class Im2col(ConvPlan):
    """Pad into the planes (unless x is the plane), gather the taps into columns, one matmul; or, for
    large columns, gather and multiply a band of output rows at a time (``row_bands``)."""

    takes_residual = True

    def __init__(self, layer: ConvLayer, _conv: NativeKernel):
        (n, c, *_), (out_c, per_group, *kernel), g, out_sizes = layer.x, layer.w, layer.group, layer.out
        self.cols = (n, g, per_group * math.prod(kernel), math.prod(out_sizes))
        self.products = (n, g, out_c // g, math.prod(out_sizes))
        self.planes = planes = Planes(layer.x, layer.begins, tuple(kernel), layer.strides, layer.dilations, out_sizes)
        self.bands = row_bands(n * c * math.prod(kernel), out_sizes, layer.dtype.itemsize)
        self.scratch = Scratch(planes.shape, (n, c, *kernel, self.bands[0][1], *out_sizes[1:]))
        item, plane = layer.dtype.itemsize, math.prod(planes.dims)
        window = tuple(step * e for step, e in zip(planes.steps, planes.elements, strict=True))
        self.gathers = [(phase, (slice(None), slice(None), *taps), (n, c, *map(count, taps), *out_sizes),
                         tuple(item * s for s in (c * plane, plane, *steps, *window)), item * first)
                        for phase, taps, first, steps in planes.tap_groups()]

    def steps(self, threads, x, out, buffers, weights, epilogue, prologue):
        planes, steps = self.planes.fill_steps(x, buffers[0], 0)
        (n, g, per_group, _), (_, *rest) = self.cols, out.shape[2:]
        products, flat, width = out.reshape(self.products), buffers[1].reshape(-1), math.prod(rest)
        taps = buffers[1].shape[:2 - out.ndim]  # (N, C, kernel...): the columns' shape before the rows
        for first, last in self.bands:  # NOTE: one band (all the rows) unless the columns are large
            rows, band = last - first, (Ellipsis, slice(first, last), *(slice(None),) * len(rest))
            cols = flat[:math.prod(taps) * rows * width].reshape(*taps, rows, *rest)
            steps += [copy_step(cols[into], strided_view(planes[phase], shape, strides, start)[band])
                      for phase, into, shape, strides, start in self.gathers]
            steps.append(threads.matmul_step(weights, cols.reshape(n, g, per_group, rows * width),
                                             products[..., first * width:last * width]))
        return steps + finish_steps(threads, out, epilogue)


def row_bands(taps: int, out: tuple[int, ...], itemsize: int) -> list[tuple[int, int]]:
    """The output rows (first, last) of each band an im2col convolution gathers and multiplies at a
    time: all the rows at once, unless its columns (``taps`` per output position) exceed
    ``BAND_FROM_BYTES``; then bands of ``BAND_BYTES``, which stay in cache from their gather to
    their product (a 7x7 stride-2 stem on a 224 x 224 image measured faster so)."""
    per_row = taps * math.prod(out[1:]) * itemsize
    if len(out) < 2 or per_row * out[0] <= BAND_FROM_BYTES:
        return [(0, out[0])]
    rows = max(1, BAND_BYTES // per_row)
    return [(first, min(first + rows, out[0])) for first in range(0, out[0], rows)]


def count(taps: slice) -> int:
    """Number of kernel taps in a tap slice."""
    return len(range(taps.start, taps.stop, taps.step))


ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("small_plane", fits_small_plane, SmallPlane),
    Algorithm("blocked_pointwise", fits_blocked_pointwise, BlockedDirect),
    Algorithm("gemm_direct", fits_gemm_direct, GemmDirect),
    Algorithm("flat_depthwise", fits_flat_depthwise, partial(CompiledDepthwise, flat=True)),
    Algorithm("compiled_depthwise", fits_compiled_depthwise, partial(CompiledDepthwise, flat=False)),
    Algorithm("depthwise", fits_depthwise, Depthwise),
    Algorithm("winograd", fits_winograd, Winograd),
    Algorithm("compiled_direct", fits_compiled_direct, CompiledDirect),
    Algorithm("blocked_direct", fits_blocked_direct, BlockedDirect),
    Algorithm("im2col", lambda layer: True, Im2col),
)
"""Conv2DFusion's algorithms, best first: resize runs the first that fits the layer."""
