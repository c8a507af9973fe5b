"""Convolution kernels: Conv2DFusion (im2col + one GEMM) and Conv2dTransposeFusion (GEMM + col2im).

Both work on (N, C, spatial...) with the weight layouts of ONNX Conv / ConvTranspose, for any
number of spatial axes (the length of the per-axis attributes, else the input's rank - 2); a
group axis turns grouped and depthwise convolutions into one batched matmul.
"""

from __future__ import annotations

import itertools
import math
import operator
from functools import partial

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel, Step, Workspace, copy_step
from lite.kernels.elementwise import check_io
from lite.kernels.fused import (
    activation_code,
    activation_epilogue_step,
    activation_step,
    compilable,
    compiled_terms,
    epilogue_steps,
    fused_activation,
)
from lite.kernels.parallel import product_shapes
from lite.kernels.registry import register
from lite.kernels.window import (
    Geometry,
    Planes,
    check_input_rank,
    check_pads,
    check_window_taps,
    strided_view,
    window_list,
    window_rank,
)
from lite.ops.dtypes import FLOATS
from lite.ops.geometry import output_size, transposed_extent, transposed_pads, window_pads
from lite.tensor import Tensor

DEPTHWISE_CHUNK_BYTES = 1 << 20
BAND_FROM_BYTES = 4 << 20  # im2col columns larger than this are gathered and multiplied in bands of rows
BAND_BYTES = 1 << 20  # the columns of one band: they stay in the core's cache between gather and product


class ConvBase(NativeKernel):
    """Attribute and shape checks, weight arrangement, bias and activation of both convolutions.

    Subclasses define ``arrange`` (the weight as the GEMM operand; run once in prepare when the
    weight is constant) and ``run(x, out)``, a method or the plan that resize picked.
    """

    residual: Tensor | None = None  # added to the output before ``residual_activation`` (set by lite.fusion)
    residual_activation = "NO_ACTIVATION"
    # (activation_type, alpha) of the Activation kernel whose work the epilogue does last (set by lite.fusion)
    epilogue_activation: tuple[str, float] | None = None
    # the depthwise convolution that applies this one's epilogue as it reads its output, and the
    # convolution whose epilogue this one applies so (``hand_epilogue``, set by lite.fusion)
    epilogue_reader: ConvBase | None = None
    prologue_source: ConvBase | None = None

    def check_attrs(self) -> None:
        check_io(self, 2, 1)
        names = ("kernel_size", "stride", "dilation", "pad_list", "output_paddings")
        self.rank = window_rank(self, tuple(n for n in names if n in self.attrs))
        self.kernel_size = window_list(self, "kernel_size", self.rank, empty_means=None)
        self.strides = window_list(self, "stride", self.rank)
        self.dilations = window_list(self, "dilation", self.rank)
        check_pads(self, self.rank)
        self.group = int(self.attrs["group"])
        if self.group < 1:
            self.fail(f"group must be a positive integer, got {self.group}")
        self.activation = fused_activation(self)
        self.weights: np.ndarray | None = None
        self.planned: tuple[int, ...] | None = None
        self.steps_key: tuple | None = None
        self.steps: list[Step] = []
        self.winograd_weights: np.ndarray | None = None  # the transformed weight, made at the first Winograd plan

    def check_weight(self, x: tuple[int, ...], w: tuple[int, ...], out_channels: int) -> None:
        """Fails unless x and weight have the window's rank and agree on groups, kernel size and bias length."""
        check_input_rank(self, x, self.rank)
        if len(w) != self.rank + 2:
            self.fail(f"expects a {self.rank + 2}-D weight for its {self.rank}-D window, got shape {list(w)}")
        if min(w) < 1:
            self.fail(f"weight shape {list(w)} has an empty dim")
        if self.kernel_size and self.kernel_size != tuple(w[2:]):
            self.fail(f"kernel_size {list(self.kernel_size)} does not match the weight shape {list(w)}")
        check_window_taps(self, tuple(w[2:]))
        if out_channels % self.group or x[1] % self.group:
            self.fail(f"group {self.group} must divide the input ({x[1]}) and output ({out_channels}) channels")
        bias = self.bias()
        if bias is not None and bias.shape != (out_channels,):
            self.fail(f"bias must have shape ({out_channels},), got {list(bias.shape)}")

    def bias(self) -> Tensor | None:
        """The bias tensor, or None."""
        return self.inputs[2] if len(self.inputs) > 2 else None

    def hand_epilogue(self, reader: ConvBase | None) -> None:
        """Leaves this convolution's epilogue (bias, clip, activation) to ``reader``, a depthwise
        convolution that alone reads the output and applies it to each input plane as it copies
        it in (``lite.fusion``); None takes a handed epilogue back. Both plan their steps again."""
        if self.epilogue_reader is not None:
            self.epilogue_reader.prologue_source, self.epilogue_reader.steps_key = None, None
        self.epilogue_reader, self.steps_key = reader, None
        if reader is not None:
            reader.prologue_source, reader.steps_key = self, None

    def epilogue_terms(self, dtype: np.dtype) -> tuple[np.ndarray, np.generic, np.generic, int, np.generic]:
        """(shift per output channel, lo, hi, code, alpha): the bias and clip ``activation_type``
        gives, then the activation an Activation kernel handed over (``epilogue_activation``, only
        where the convolution fuses none), as the compiled depthwise kernels take an epilogue."""
        bias = self.bias()
        return (*compiled_terms(None if bias is None else bias.data, self.outputs[0].shape[1], self.activation, dtype),
                *activation_code(self.epilogue_activation, dtype))

    def finish(self, out: np.ndarray) -> None:
        """Adds the bias (if any) and applies the fused activation, in place."""
        for step in self.finish_steps(out, self.bias()):
            step()

    def finish_steps(self, out: np.ndarray, bias: Tensor | None) -> list[Step]:
        """The calls of ``finish`` with their arrays bound: bias, the residual (when the runtime
        gave one, ``lite.fusion``) and the activation, one compiled pass where it runs; or bias
        and the fused Activation's function (``epilogue_activation``), one compiled pass."""
        shift = None if bias is None else bias.data
        if self.epilogue_activation is not None:
            steps = [activation_epilogue_step(out, shift, *self.epilogue_activation)]
        elif self.residual is None:
            steps = epilogue_steps(out, shift, None, self.activation)
        else:
            steps = epilogue_steps(out, shift, self.residual.data, self.residual_activation)
        return self.on_crew(steps)

    def warm_crew(self, *jobs) -> None:
        """Compiles the crew, the epilogue's job and these job functions now, at build, where
        float32 runs on the model's crew (else in the first predict)."""
        if self.inputs[0].dtype != np.float32 or self.threads.crew() is None:
            return
        from lite.kernels.fast import crew, epilogue

        crew.warm(epilogue.epilogue_job, *jobs)

    def on_crew(self, steps: list[Step]) -> list[Step]:
        """The steps, compiled epilogues among them on the model's crew where it runs (float32)."""
        if self.threads.crew() is None:
            return steps
        from lite.kernels.fast import epilogue

        return [epilogue.on_crew(self.threads, step) for step in steps]

    def prepare(self) -> None:
        if self.inputs[1].is_const:
            self.weights = self.arrange(self.inputs[1].data)

    def weight_matrix(self) -> np.ndarray:
        """The arranged weight: prepared for a constant, arranged now for a computed one."""
        return self.weights if self.weights is not None else self.arrange(self.inputs[1].data)

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def execute(self) -> None:
        x = self.inputs[0].data
        if x.shape != self.planned:
            self.resize()
        self.run(x, self.outputs[0].data)

    def run(self, x: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError


@register("Conv2DFusion", dtypes=FLOATS)
class Conv2DFusion(ConvBase):
    """Convolution (ONNX Conv): x (N, C, spatial...), weight (O, C/group, kernel...), bias (O,) optional.

    resize picks one of three plans:

    - direct: a 1x1 stride-1 unpadded conv is one matmul on the input view.
    - im2col: the input is padded (and, for overlapping strided windows, split into stride
      phases: ``Planes``) in a workspace buffer; the taps reading one plane are copied through
      one strided view into columns laid out (N, C, kernel..., out...), and one matmul of weight
      (group, O/group, K) by columns (N, group, K, out elements) writes the output.
    - depthwise (one input channel per group; 1-D runs as 2-D of height 1): the same, except
      each tap is copied as OH full rows of its plane (long contiguous runs), a chunk of
      channels at a time; the matmul (C, O/C, KH*KW) by (N, C, KH*KW, OH * plane width) fills
      a buffer whose valid columns, plus the bias, are the output.

    Where compiled kernels run (``lite.kernels.fast``), three more take the shapes they measure
    faster on: depthwise 2-D convolutions run ``fast.depthwise`` (stride-1 ones that keep the
    row width: ``fast.flat``); float32 2-D convolutions of
    one group with few input terms (C * KH * KW up to ``fast.direct.MAX_TERMS``: stems, 3x3
    on up to 128 channels) run ``fast.direct``; constant 3x3 stride-1 ones run Winograd
    (``fast.winograd``) where it beats the other kernels (with 512-bit registers, only those with
    more terms), and other undilated ones ``fast.blocked_direct`` (on channel blocks, no im2col).
    """

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x, w = self.input_shape(0), self.input_shape(1)
        self.check_weight(x, w, w[0] if len(w) == self.rank + 2 else 0)
        if w[1] * self.group != x[1]:
            self.fail(f"input has {x[1]} channels, but weight {list(w)} with group {self.group} "
                      f"expects {w[1] * self.group}")
        out_sizes = self.geometry(x, w)[2]
        if min(out_sizes) < 1:
            self.fail(f"input {list(x)} is smaller than the padded kernel {list(w[2:])}")
        return [(x[0], w[0], *out_sizes)]

    def geometry(self, x: tuple[int, ...], w: tuple[int, ...]):
        """(begins, ends, output sizes) for input shape x and weight shape w."""
        begins, ends = window_pads(self.attrs["pad_mode"], self.attrs["pad_list"], x[2:], w[2:],
                                   self.strides, self.dilations)
        sizes = tuple(output_size(*args) for args in zip(x[2:], w[2:], self.strides, self.dilations,
                                                          begins, ends, strict=True))
        return begins, ends, sizes

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        return weight.reshape(self.group, weight.shape[0] // self.group, -1)

    def resize(self) -> None:
        x, w = self.input_shape(0), self.input_shape(1)
        self.planned = x
        n, (out_c, per_group, *kernel) = x[0], w
        begins, ends, out_sizes = self.geometry(x, w)
        g = self.group
        self.gemm_out = (n, g, out_c // g, math.prod(out_sizes))
        self.steps_key, self.steps, self.scratch = None, [], None
        if (geometry := self.small_plane_geometry(x, w, begins, ends, out_sizes)) is not None:
            self.plan_small_plane(geometry, out_c)
        elif max(*kernel, *self.strides) == 1 and not any(begins) and not any(ends):
            self.plan_steps, self.gemm_cols = self.direct_steps, (n, g, per_group, math.prod(out_sizes))
        elif per_group == 1 and g > 1 and self.rank <= 2:
            lift = (1,) * (2 - self.rank)  # NOTE: 1-D as 2-D of height 1, so it gets this plan too
            no_pads = (0,) * len(lift)
            geometry = Geometry((*x[:2], *lift, *x[2:]), (*lift, *kernel), (*lift, *self.strides),
                                (*lift, *self.dilations), (*no_pads, *begins), (*no_pads, *ends), (*lift, *out_sizes))
            if self.compiled_dtype():
                self.plan_fast_depthwise(geometry, out_c)
            else:
                self.plan_depthwise(geometry, out_c)
        elif self.winograd(x, w, begins, ends, out_sizes):
            self.plan_winograd(x, out_c, begins, out_sizes)
        elif (geometry := self.direct_geometry(x, w, begins, ends, out_sizes)) is not None:
            self.plan_fast_direct(geometry, out_c)
        elif (geometry := self.blocked_geometry(x, w, begins, ends, out_sizes)) is not None:
            self.plan_blocked_direct(geometry, out_c)
        else:
            self.plan_im2col(x, w, begins, out_sizes)
        self.warm_crew()

    @property
    def takes_prologue(self) -> bool:
        """Whether the plan resize picked applies the epilogue handed over by the convolution
        producing the input (``prologue_source``): the compiled depthwise kernels do."""
        return self.plan_steps == self.fast_depthwise_steps

    @property
    def takes_residual(self) -> bool:
        """Whether the plan resize picked adds a residual in its epilogue (``residual``)."""
        return self.plan_steps in (self.direct_steps, self.im2col_steps, self.winograd_steps,
                                   self.fast_direct_steps, self.blocked_direct_steps, self.small_plane_steps)

    def small_plane_geometry(self, x: tuple[int, ...], w: tuple[int, ...], begins: tuple[int, ...],
                             ends: tuple[int, ...], out_sizes: tuple[int, ...]) -> Geometry | None:
        """The geometry the compiled small-plane kernel runs (``lite.kernels.fast.small_plane``), or
        None: 2-D float32 convolutions with a constant weight whose groups, output plane (7 to 49
        positions) and output channels ``small_plane.fits`` takes (ResNet's last stage)."""
        if (self.rank != 2 or self.inputs[0].dtype != np.float32 or not self.inputs[1].is_const
                or not fast.enabled()):
            return None
        from lite.kernels.fast import small_plane  # NOTE: imports the compiler: only when used

        geometry = Geometry(x, tuple(w[2:]), self.strides, self.dilations, begins, ends, out_sizes)
        return geometry if small_plane.fits(geometry, self.group, w[0]) else None

    def direct_geometry(self, x: tuple[int, ...], w: tuple[int, ...], begins: tuple[int, ...],
                        ends: tuple[int, ...], out_sizes: tuple[int, ...]) -> Geometry | None:
        """The geometry the compiled direct kernel runs (``lite.kernels.fast.direct``), or None where
        it does not: it takes 2-D float32 convolutions of one group with several taps and at most
        ``MAX_TERMS`` terms (stems, 3x3 on up to 128 channels)."""
        if self.rank != 2 or self.inputs[0].dtype != np.float32 or not fast.enabled():
            return None
        from lite.kernels.fast import direct  # NOTE: imports the compiler: only when used

        geometry = Geometry(x, tuple(w[2:]), self.strides, self.dilations, begins, ends, out_sizes)
        return geometry if direct.fits(geometry, x[1], self.group) else None

    def blocked_geometry(self, x: tuple[int, ...], w: tuple[int, ...], begins: tuple[int, ...],
                         ends: tuple[int, ...], out_sizes: tuple[int, ...]) -> Geometry | None:
        """The geometry the compiled blocked direct kernel runs (``lite.kernels.fast.blocked_direct``),
        or None: 2-D float32 undilated convolutions of one group with several taps and more terms
        than ``fast.direct`` takes (ResNet's 3x3 layers on 256 and 512 channels)."""
        if self.rank != 2 or self.inputs[0].dtype != np.float32 or not fast.enabled():
            return None
        from lite.kernels.fast import blocked_direct  # NOTE: imports the compiler: only when used

        geometry = Geometry(x, tuple(w[2:]), self.strides, self.dilations, begins, ends, out_sizes)
        return geometry if blocked_direct.fits(geometry, self.group) else None

    def winograd(self, x: tuple[int, ...], w: tuple[int, ...], begins: tuple[int, ...], ends: tuple[int, ...],
                 out_sizes: tuple[int, ...]) -> bool:
        """Whether Winograd F(4x4, 3x3) runs: a constant 3x3 stride-1 weight, one group, a compiled
        dtype, a shape where it beats the other kernels (``lite.kernels.fast.winograd.worth_it``), and
        no direct kernel that keeps it (``winograd.DIRECT_FIRST``)."""
        if (self.rank != 2 or tuple(w[2:]) != (3, 3) or self.strides != (1, 1) or self.dilations != (1, 1)
                or self.group != 1 or not self.inputs[1].is_const or not self.compiled_dtype()):
            return False
        from lite.kernels.fast import winograd  # NOTE: imports the compiler: only when used

        if winograd.DIRECT_FIRST and self.direct_geometry(x, w, begins, ends, out_sizes) is not None:
            return False
        return winograd.worth_it(x[1], w[0], out_sizes)

    def plan_winograd(self, x: tuple[int, ...], out_c: int, begins: tuple[int, ...],
                      out_sizes: tuple[int, ...]) -> None:
        from lite.kernels.fast import winograd

        self.winograd_plan = plan = winograd.WinogradPlan(x, out_c, begins, out_sizes)
        pieces = max(self.threads.loop_pieces(x[0] * x[1]), self.threads.loop_pieces(x[0] * out_c))
        self.scratch = Scratch(*plan.scratch, *plan.scratch[-1:] * (pieces - 1))  # NOTE: a padded plane a piece
        self.plan_steps = self.winograd_steps
        if self.winograd_weights is None:
            self.winograd_weights = winograd.transform_weights(self.inputs[1].data)
        winograd.warm(self.inputs[0].dtype.name)
        self.warm_crew(winograd.input_job, winograd.output_job)

    def winograd_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], _weights: np.ndarray,
                       bias: Tensor | None) -> list[Step]:
        """Input transform, 36 products, output transform with bias, residual and activation."""
        x, steps = fast.compiled_input(x)
        residual, activation, later = self.compiled_residual(out)
        if self.epilogue_activation is not None:
            later.append(activation_epilogue_step(out, None, *self.epilogue_activation))
        terms = compiled_terms(None if bias is None else bias.data, out.shape[1], activation, out.dtype)
        winograd = self.winograd_plan.steps(x, self.winograd_weights, *terms, residual, out, buffers,
                                            self.threads.matmul_step)
        return [*steps, *self.transforms_on_crew(winograd, x, out, buffers), *self.on_crew(later)]

    def compiled_residual(self, out: np.ndarray) -> tuple[np.ndarray | None, str, list[Step]]:
        """(residual, activation, later steps) for a compiled kernel's own epilogue: the fused
        residual (``lite.fusion``) and the activation after it; where compiled code cannot take
        the residual, none, no activation, and the epilogue steps that add both afterwards."""
        residual = None if self.residual is None else self.residual.data
        activation = self.activation if residual is None else self.residual_activation
        if residual is not None and not compilable(out, residual):
            return None, "NO_ACTIVATION", epilogue_steps(out, None, residual, activation)
        return residual, activation, []

    def transforms_on_crew(self, steps: list[Step], x: np.ndarray, out: np.ndarray,
                           buffers: list[np.ndarray]) -> list[Step]:
        """Winograd's steps, the float32 transforms on the model's crew where it runs."""
        bounds_in = self.threads.loop_bounds(x.shape[0] * x.shape[1])
        bounds_out = self.threads.loop_bounds(out.shape[0] * out.shape[1])
        if out.dtype != np.float32 or len(bounds_in) < 2 or self.threads.crew() is None:
            return steps
        from lite.kernels.fast import winograd

        jobs_in, jobs_out = winograd.crew_transforms(steps, bounds_in, bounds_out, buffers[2:])
        return [self.threads.crew_step(jobs_in, steps[0]), steps[1], self.threads.crew_step(jobs_out, steps[2])]

    def plan_im2col(self, x: tuple[int, ...], w: tuple[int, ...], begins: tuple[int, ...],
                    out_sizes: tuple[int, ...]) -> None:
        (n, c, *_), (_, per_group, *kernel) = x, w
        self.plan_steps = self.im2col_steps
        self.gemm_cols = (n, self.group, per_group * math.prod(kernel), math.prod(out_sizes))
        self.planes = planes = Planes(x, begins, tuple(kernel), self.strides, self.dilations, out_sizes)
        self.bands = row_bands(n * c * math.prod(kernel), out_sizes, self.inputs[0].dtype.itemsize)
        self.scratch = Scratch(planes.shape, (n, c, *kernel, self.bands[0][1], *out_sizes[1:]))
        item, plane = self.inputs[0].dtype.itemsize, math.prod(planes.dims)
        window = tuple(step * e for step, e in zip(planes.steps, planes.elements, strict=True))
        self.gathers = [(phase, (slice(None), slice(None), *taps), (n, c, *map(count, taps), *out_sizes),
                         tuple(item * s for s in (c * plane, plane, *steps, *window)), item * first)
                        for phase, taps, first, steps in planes.tap_groups()]

    def compiled_dtype(self) -> bool:
        """Whether compiled kernels run for this input's dtype (the compiled depthwise kernel then
        always does: it beats numpy on every geometry measured)."""
        return fast.enabled() and self.inputs[0].dtype.name in fast.FAST_DTYPES

    def plan_fast_depthwise(self, geometry: Geometry, out_c: int) -> None:
        """The compiled direct depthwise kernel of a 2-D geometry (``lite.kernels.fast.flat`` where
        it fits, else ``lite.kernels.fast.depthwise``), its output planes shared out among the
        model's threads (scratch for each piece)."""
        from lite.kernels.fast import depthwise, flat

        is_flat = flat.fits(geometry)
        self.fast_depthwise = flat if is_flat else depthwise
        kind, job = (flat.FlatPlan, flat.flat_job) if is_flat else (depthwise.DepthwisePlan, depthwise.depthwise_job)
        self.fast_plan = plan = kind(geometry)
        self.x_shape, self.out_shape = geometry.x, (geometry.x[0], out_c, *geometry.out)
        self.scratch = Scratch(*plan.scratch * self.threads.loop_pieces(self.out_shape[0] * out_c))
        self.plan_steps = self.fast_depthwise_steps
        plan.warm(self.inputs[0].dtype)
        self.warm_crew(job)

    def fast_depthwise_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                             bias: Tensor | None) -> list[Step]:
        """The compiled kernel with bias and activation fused, on the model's threads."""
        from lite.kernels.fast.depthwise import no_prologue

        crew_jobs = self.fast_depthwise.crew_jobs
        out_c = self.out_shape[1]
        *terms, code, alpha = self.epilogue_terms(out.dtype)
        source = self.prologue_source  # NOTE: the prologue's tuple made here, not on every run
        prologue = no_prologue(out.dtype) if source is None else source.epilogue_terms(out.dtype)
        # NOTE: a copy of the weight: a read-only one from the model file would be another type to the compiler
        kernel = np.array(self.fast_plan.arrange(weights.reshape(out_c, 1, *self.fast_plan.geometry.kernel)), copy=True)
        (x, steps), out = fast.compiled_input(x.reshape(self.x_shape)), out.reshape(self.out_shape)
        count, per = out.shape[0] * out_c, len(self.fast_plan.scratch)
        # NOTE: each piece its own scratch
        scratch = [buffers[i * per:(i + 1) * per] for i in range(self.threads.loop_pieces(count))]

        def piece(index: int, first: int, last: int) -> Step:
            return partial(self.fast_plan.run, x, kernel, *terms, out, scratch[index], first, last, code, alpha,
                           prologue)

        def jobs(bounds: list[tuple[int, int]]) -> Step:
            return crew_jobs(self.fast_plan, x, kernel, *terms, out, scratch, bounds, code, alpha, prologue)

        return [*steps, self.threads.crew_loop(count, piece, jobs if out.dtype == np.float32 else None)]

    def plan_fast_direct(self, geometry: Geometry, out_c: int) -> None:
        """The compiled direct kernel (``lite.kernels.fast.direct``): the input's phases, then bands
        of output rows shared out among the model's threads (a wide plane for each piece)."""
        from lite.kernels.fast.direct import DirectPlan, rows_job

        self.direct_plan = plan = DirectPlan(geometry, out_c)
        self.scratch = Scratch(plan.scratch[0], *plan.scratch[1:] * self.threads.loop_pieces(plan.oh))
        self.plan_steps = self.fast_direct_steps
        plan.warm()
        self.warm_crew(rows_job)

    def fast_direct_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                          bias: Tensor | None) -> list[Step]:
        """Per image: its phases, then bands of output rows (on the model's threads, each piece
        with its own wide plane), written out with bias, residual and activation."""
        from lite.kernels.fast.direct import CREW_PER_THREAD, crew_jobs

        plan, (phases, *wides) = self.direct_plan, buffers
        packed, residual, terms, code, alpha, later = self.direct_operands(plan, out, weights, bias)
        x, steps = fast.compiled_input(x)
        for image in range(x.shape[0]):
            def piece(index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.rows, packed, phases, wides[index], out, image, *terms, code, alpha, first, last,
                               residual)

            def jobs(bounds: list[tuple[int, int]], image: int = image) -> Step:
                return crew_jobs(plan, packed, phases, wides, out, image, *terms, code, alpha, bounds, residual)

            rows = self.threads.crew_loop(plan.oh, piece, jobs, CREW_PER_THREAD)
            steps += [partial(plan.fill, x, image, phases), rows]
        return steps + self.on_crew(later)

    def direct_operands(self, plan, out: np.ndarray, weights: np.ndarray, bias: Tensor | None
                        ) -> tuple[np.ndarray, np.ndarray | None, tuple, int, np.generic, list[Step]]:
        """(packed weight, residual, (shift, lo, hi), code, alpha, later steps) as the compiled direct
        kernels (``fast.direct``, ``fast.blocked_direct``, ``fast.small_plane``) take them: the weight
        as ``plan.arrange`` packs it, the fused residual, and the epilogue's terms."""
        packed = plan.arrange(weights.reshape(out.shape[1], *self.inputs[1].shape[1:]))
        residual, activation, later = self.compiled_residual(out)
        terms = compiled_terms(None if bias is None else bias.data, out.shape[1], activation, out.dtype)
        return (packed, residual, terms, *activation_code(self.epilogue_activation, out.dtype), later)

    def plan_small_plane(self, geometry: Geometry, out_c: int) -> None:
        """The compiled small-plane kernel (``lite.kernels.fast.small_plane``): the input padded
        (where the geometry pads), then panels of output channels shared out among the model's
        threads (a buffer of sums for each piece)."""
        from lite.kernels.fast.small_plane import SmallPlanePlan, panels_job

        self.small_plan = plan = SmallPlanePlan(geometry, out_c)
        self.scratch = Scratch(plan.scratch[0], *plan.scratch[1:] * self.threads.loop_pieces(plan.panels))
        self.plan_steps = self.small_plane_steps
        plan.warm()
        self.warm_crew(panels_job)

    def small_plane_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                          bias: Tensor | None) -> list[Step]:
        """Per image: its padded copy (where the geometry pads), then the panels of output channels
        (on the model's threads, each piece with its buffer of sums), written out with bias,
        residual and activation."""
        from lite.kernels.fast.small_plane import crew_jobs

        plan, (padded, *sums) = self.small_plan, buffers
        packed, residual, terms, code, alpha, later = self.direct_operands(plan, out, weights, bias)
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
            steps.append(self.threads.crew_loop(plan.panels, piece, jobs))
        return steps + self.on_crew(later)

    def plan_blocked_direct(self, geometry: Geometry, out_c: int) -> None:
        """The compiled blocked direct kernel (``lite.kernels.fast.blocked_direct``): the input into
        padded channel blocks, the products' units shared out among the model's threads, then
        the output written out."""
        from lite.kernels.fast.blocked_direct import BlockedDirectPlan, fill_job, products_job, write_job

        self.blocked_plan = plan = BlockedDirectPlan(geometry, out_c)
        self.scratch = Scratch(*plan.scratch)
        self.plan_steps = self.blocked_direct_steps
        plan.warm()
        self.warm_crew(fill_job, products_job, write_job)

    def blocked_direct_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                             bias: Tensor | None) -> list[Step]:
        """Per image: its padded blocks, the products, the output with bias, residual and
        activation; each on the model's threads."""
        from lite.kernels.fast.blocked_direct import fill_jobs, products_jobs, write_jobs

        plan, (padded, wide), out_c = self.blocked_plan, buffers, out.shape[1]
        packed, residual, terms, code, alpha, later = self.direct_operands(plan, out, weights, bias)
        x, steps = fast.compiled_input(x)

        def products(_index: int, first: int, last: int) -> Step:
            return partial(plan.products, packed, padded, wide, first, last)

        steps_of_products = self.threads.crew_loop(plan.units, products,
                                                   lambda bounds: products_jobs(plan, packed, padded, wide, bounds))
        for image in range(x.shape[0]):
            def fill(_index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.fill, x, image, padded, first, last)

            def write(_index: int, first: int, last: int, image: int = image) -> Step:
                return partial(plan.write_out, wide, out, image, *terms, code, alpha, first, last, residual)

            steps += [
                self.threads.crew_loop(padded.shape[0], fill,
                                       lambda bounds, image=image: fill_jobs(plan, x, image, padded, bounds)),
                steps_of_products,
                self.threads.crew_loop(out_c, write, lambda bounds, image=image: write_jobs(
                    plan, wide, out, image, *terms, code, alpha, bounds, residual)),
            ]
        return steps + self.on_crew(later)

    def plan_depthwise(self, g: Geometry, out_c: int) -> None:
        """The numpy depthwise plan of a 2-D geometry (1-D arrives lifted to height 1)."""
        (n, c, h, wd), (kh, kw), (out_h, out_w) = g.x, g.kernel, g.out
        item, geometry = self.inputs[0].dtype.itemsize, (g.begins, g.kernel, g.strides, g.dilations, g.out)
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
        self.plan_steps = self.depthwise_steps

    def run(self, x: np.ndarray, out: np.ndarray) -> None:
        """Runs the plan's numpy calls, their array views bound once and rebound when a buffer changes."""
        # NOTE: slicing a dozen views per depthwise chunk on every run held the GIL long enough
        # to slow models that predict in parallel threads (pipelines, runners).
        buffers = self.scratch.arrays(self.workspace, x.dtype) if self.scratch else []
        weights, bias = self.weight_matrix(), self.bias()
        key = (x, out, buffers[0].base if buffers else None, weights, None if bias is None else bias.data,
               None if self.residual is None else self.residual.data,
               self.prologue_source and self.prologue_source.epilogue_activation)
        if self.steps_key is None or not all(map(operator.is_, key, self.steps_key)):
            self.steps_key, self.steps = key, self.plan_steps(x, out, buffers, weights, bias)
        for step in self.steps:
            step()

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return [shapes for step in self.steps for shapes in product_shapes(step)]

    def direct_steps(self, x: np.ndarray, out: np.ndarray, _buffers: list[np.ndarray], weights: np.ndarray,
                     bias: Tensor | None) -> list[Step]:
        """One matmul of the weight by the input itself, then bias and activation (unless the
        depthwise convolution reading the output applies them: ``hand_epilogue``)."""
        product = self.threads.matmul_step(weights, x.reshape(self.gemm_cols), out.reshape(self.gemm_out))
        handed = self.epilogue_reader is not None and self.epilogue_reader.takes_prologue
        return [product] if handed else [product, *self.finish_steps(out, bias)]

    def im2col_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                     bias: Tensor | None) -> list[Step]:
        """Pad into the planes (unless x is the plane), gather the taps into columns, one matmul; or,
        for large columns, gather and multiply a band of output rows at a time (``row_bands``)."""
        planes, steps = self.planes.fill_steps(x, buffers[0], 0)
        (n, g, per_group, _), (_, *rest) = self.gemm_cols, out.shape[2:]
        products, flat, width = out.reshape(self.gemm_out), buffers[1].reshape(-1), math.prod(rest)
        taps = buffers[1].shape[:2 - out.ndim]  # (N, C, kernel...): the columns' shape before the rows
        for first, last in self.bands:  # NOTE: one band (all the rows) unless the columns are large
            rows, band = last - first, (Ellipsis, slice(first, last), *(slice(None),) * len(rest))
            cols = flat[:math.prod(taps) * rows * width].reshape(*taps, rows, *rest)
            steps += [copy_step(cols[into], strided_view(planes[phase], shape, strides, start)[band])
                      for phase, into, shape, strides, start in self.gathers]
            steps.append(self.threads.matmul_step(weights, cols.reshape(n, g, per_group, rows * width),
                                                  products[..., first * width:last * width]))
        return steps + self.finish_steps(out, bias)

    def depthwise_steps(self, x: np.ndarray, out: np.ndarray, buffers: list[np.ndarray], weights: np.ndarray,
                        bias: Tensor | None) -> list[Step]:
        """Per chunk: copy its channels into the padded planes, gather the taps into columns, one
        matmul whose last column of weights is the bias (against a row of ones under the taps),
        then the valid columns into the output, clipped there by the activation. The pad border
        and the row of ones are written once per run: the chunks only write inside them."""
        (planes, cols, wide), x, out = buffers, x.reshape(self.x_shape), out.reshape(self.out_shape)
        (n, channels, out_per_channel, _, out_w), (*_, taps, length) = self.out_shape, cols.shape
        (kh, kw), ones = self.planes.kernel_size, cols[:, :, taps - 1]
        grid = cols[:, :, :taps - 1].reshape(n, cols.shape[1], kh, kw, length)
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
            steps.append(activation_step(target, self.activation, chunk_wide[..., :out_w]))
        return steps


def row_bands(taps: int, out: tuple[int, ...], itemsize: int) -> list[tuple[int, int]]:
    """The output rows (first, last) of each band an im2col convolution gathers and multiplies at a
    time: all the rows at once, unless its columns (``taps`` per output position) exceed
    ``BAND_FROM_BYTES``; then bands of ``BAND_BYTES``, which stay in cache from their gather to
    their product (a 7x7 stride-2 stem on a 224 x 224 image: 13-18% faster, alone)."""
    per_row = taps * math.prod(out[1:]) * itemsize
    if len(out) < 2 or per_row * out[0] <= BAND_FROM_BYTES:
        return [(0, out[0])]
    rows = max(1, BAND_BYTES // per_row)
    return [(first, min(first + rows, out[0])) for first in range(0, out[0], rows)]


def tap_window(tap: int, dilation: int, size: int, stride: int) -> slice:
    """Along one axis, where a transposed convolution's tap adds the input's ``size`` positions."""
    return slice(tap * dilation, tap * dilation + (size - 1) * stride + 1, stride)


def count(taps: slice) -> int:
    """Number of kernel taps in a tap slice."""
    return len(range(taps.start, taps.stop, taps.step))


class Scratch:
    """Workspace arrays of several shapes carved from one request (each request has a fixed cost)."""

    def __init__(self, *shapes: tuple[int, ...]):
        self.parts, self.total = [], 0
        for shape in shapes:
            size = math.prod(shape)
            self.parts.append((self.total, size, shape))
            self.total += -(-size // 16) * 16  # NOTE: keeps every part 64-byte aligned for float32
        self.total = max(self.total, 1)

    def arrays(self, workspace: Workspace, dtype: np.dtype) -> list[np.ndarray]:
        buffer = workspace.array((self.total,), dtype)
        return [buffer[start:start + size].reshape(shape) for start, size, shape in self.parts]


@register("Conv2dTransposeFusion", dtypes=FLOATS)
class Conv2dTransposeFusion(ConvBase):
    """Transposed convolution (ONNX ConvTranspose): x (N, C, spatial...), weight (C, O/group, kernel...).

    One matmul computes every tap's contribution, (N, group, O/group * taps, input elements);
    col2im then adds each tap into a strided window of the output (or of a larger buffer,
    cropped by the pads), and bias and activation follow.
    """

    def check_attrs(self) -> None:
        super().check_attrs()
        self.output_paddings = tuple(int(v) for v in self.attrs["output_paddings"] or ()) or (0,) * self.rank
        if len(self.output_paddings) != self.rank or min(self.output_paddings) < 0:
            self.fail(f"output_paddings must be {self.rank} non-negative integers, got {list(self.output_paddings)}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x, w = self.input_shape(0), self.input_shape(1)
        out_c = w[1] * self.group if len(w) == self.rank + 2 else 0
        self.check_weight(x, w, out_c)
        if w[0] != x[1]:
            self.fail(f"input has {x[1]} channels, but the weight {list(w)} expects {w[0]}")
        out_sizes = self.geometry(x, w)[2]
        if min(out_sizes) < 1:
            self.fail(f"output would be {'x'.join(map(str, out_sizes))}: pads exceed the output of input {list(x)}")
        return [(x[0], out_c, *out_sizes)]

    def geometry(self, x: tuple[int, ...], w: tuple[int, ...]):
        """(begins, ends, output sizes); SAME pads make the output input * stride (ONNX)."""
        axes = (x[2:], w[2:], self.strides, self.dilations, self.output_paddings)
        begins, ends = transposed_pads(self.attrs["pad_mode"], self.attrs["pad_list"], *axes)
        sizes = tuple(transposed_extent(*args) - b - e for *args, b, e in zip(*axes, begins, ends, strict=True))
        return begins, ends, sizes

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        return weight.reshape(self.group, weight.shape[0] // self.group, -1).transpose(0, 2, 1)

    def resize(self) -> None:
        x, w = self.input_shape(0), self.input_shape(1)
        self.planned = x
        (n, c, *sizes), (_, per_group, *kernel) = x, w
        begins, _, out_sizes = self.geometry(x, w)
        elements = math.prod(sizes)
        self.gemm_in = (n, self.group, c // self.group, elements)
        self.cols_shape = (n, self.group, per_group * math.prod(kernel), elements)
        self.tap_cols = (n, self.group * per_group, *kernel, *sizes)
        self.taps = [((slice(None), slice(None), *tap), (Ellipsis, *map(tap_window, tap, self.dilations, sizes,
                                                                        self.strides)))
                     for tap in itertools.product(*map(range, kernel))]
        reach = [transposed_extent(*args, 0) for args in zip(sizes, kernel, self.strides, self.dilations, strict=True)]
        self.full_shape = (n, self.group * per_group,
                           *(max(r, b + o) for r, b, o in zip(reach, begins, out_sizes, strict=True)))
        self.crop = None if self.full_shape[2:] == out_sizes else (
            Ellipsis, *(slice(b, b + o) for b, o in zip(begins, out_sizes, strict=True)))

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return [(self.weight_matrix().shape, self.gemm_in)] if self.planned else []

    def run(self, x: np.ndarray, out: np.ndarray) -> None:
        cols = self.workspace.array(self.cols_shape, x.dtype, 1)
        self.threads.matmul(self.weight_matrix(), x.reshape(self.gemm_in), cols)
        cols = cols.reshape(self.tap_cols)
        full = out if self.crop is None else self.workspace.array(self.full_shape, x.dtype, 0)
        full.fill(0)
        for tap, index in self.taps:
            window = full[index]
            np.add(window, cols[tap], out=window)
        if self.crop is not None:
            np.copyto(out, full[self.crop])
        self.finish(out)
