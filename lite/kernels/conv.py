"""Convolution kernels: Conv2DFusion (an algorithm from a ranked table) and Conv2dTransposeFusion
(GEMM + col2im).

Both work on (N, C, spatial...) with the weight layouts of ONNX Conv / ConvTranspose, for any
number of spatial axes (the length of the per-axis attributes, else the input's rank - 2); a
group axis turns grouped and depthwise convolutions into one batched matmul.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.conv_plans import ALGORITHMS, ConvLayer, ConvPlan, finish_steps, warm_crew, warm_epilogues
from lite.kernels.elementwise import check_io
from lite.kernels.fused import fused_activation
from lite.kernels.parallel import product_shapes
from lite.kernels.plans import Derived, Epilogue, choose
from lite.kernels.registry import register
from lite.kernels.window import check_input_rank, check_pads, check_window_taps, window_list, window_rank
from lite.ops.dtypes import FLOATS
from lite.ops.geometry import output_size, transposed_extent, transposed_pads, window_pads
from lite.tensor import Tensor


class ConvBase(NativeKernel):
    """Attribute and shape checks, weight arrangement, bias and activation of both convolutions.

    Subclasses define ``arrange`` (the weight as the GEMM operand; run once in prepare when the
    weight is constant) and ``run(x, out)``.

    ``epilogue`` (bias, the fused activation, and what ``lite.fusion`` adds through
    ``set_epilogue``: a residual, an absorbed Activation) is what runs after the product.
    """

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
        self.epilogue = Epilogue(self.bias(), self.activation)
        self.weights: np.ndarray | None = None
        self.scaled_weights: np.ndarray | None = None  # read instead of ``weights`` while set (``read_weights``)
        self.planned: tuple[int, ...] | None = None

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

    def set_epilogue(self, epilogue: Epilogue) -> None:
        """Runs ``epilogue`` after the product from the next run on (``lite.fusion``: a residual, an
        absorbed Activation; ``Epilogue(kernel.bias(), kernel.activation)`` is the kernel's own)."""
        self.epilogue = epilogue

    def read_weights(self, weights: np.ndarray | None) -> None:
        """Runs on ``weights`` (arranged as ``arrange`` makes them) instead of its own from the next run
        on; None gives it its own back (``lite.fusion.ScaledInput`` scales them by a gate each run)."""
        self.scaled_weights = weights

    def finish(self, out: np.ndarray) -> None:
        """Adds the bias (if any) and applies the fused activation, in place."""
        for step in finish_steps(self.threads, out, self.epilogue):
            step()

    def prepare(self) -> None:
        if self.inputs[1].is_const:
            self.weights = self.arrange(self.inputs[1].data)

    def weight_matrix(self) -> np.ndarray:
        """The arranged weight: the scaled one while set, prepared for a constant, arranged now for
        a computed one."""
        if self.scaled_weights is not None:
            return self.scaled_weights
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

    resize runs the first algorithm of ``lite.kernels.conv_plans.ALGORITHMS`` that fits the layer
    (``algorithm`` names it, ``plan`` is its plan); the plan's steps are made at the first run and
    again when an array they read changes.

    An expansion's epilogue may be left to the depthwise convolution alone reading its output
    (``hand_epilogue``): the depthwise kernel applies it to each input plane as it copies it in.
    """

    def check_attrs(self) -> None:
        super().check_attrs()
        self.algorithm: str | None = None
        self.plan: ConvPlan | None = None
        self.derived = Derived()  # the arrays plans make from the constant weight (Winograd's transform)
        self.steps_key: tuple | None = None
        self.steps: list = []
        # the depthwise convolution that applies this one's epilogue as it reads its output, and the
        # convolution whose epilogue this one applies so (``hand_epilogue``)
        self.epilogue_reader: Conv2DFusion | None = None
        self.prologue_source: Conv2DFusion | None = None

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

    def layer(self) -> ConvLayer:
        """What the algorithm table reads of this convolution at its current input shape."""
        x, w = self.input_shape(0), self.input_shape(1)
        begins, ends, out_sizes = self.geometry(x, w)
        return ConvLayer(x, w, self.group, self.strides, self.dilations, begins, ends, out_sizes,
                         np.dtype(self.inputs[0].dtype), self.inputs[1].is_const)

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        return weight.reshape(self.group, weight.shape[0] // self.group, -1)

    def resize(self) -> None:
        layer = self.layer()
        self.planned, self.steps_key, self.steps = layer.x, None, []
        self.algorithm, self.plan = choose(ALGORITHMS, layer, self)
        warm_crew(self.threads, layer.dtype)
        warm_epilogues(layer.dtype)

    def set_epilogue(self, epilogue: Epilogue) -> None:
        super().set_epilogue(epilogue)
        self.steps_key = None

    def hand_epilogue(self, reader: Conv2DFusion | None) -> None:
        """Leaves this convolution's epilogue (bias, clip, activation) to ``reader``, a depthwise
        convolution that alone reads the output and applies it to each input plane as it copies
        it in (``lite.fusion``); None takes a handed epilogue back. Both plan their steps again."""
        if self.epilogue_reader is not None:
            self.epilogue_reader.prologue_source, self.epilogue_reader.steps_key = None, None
        self.epilogue_reader, self.steps_key = reader, None
        if reader is not None:
            reader.prologue_source, reader.steps_key = self, None

    def hands_over(self) -> bool:
        """Whether the reader applies this convolution's epilogue now: both plans do their part (this
        one leaves its epilogue, the reader's takes a prologue)."""
        reader = self.epilogue_reader
        return (reader is not None and reader.plan is not None and reader.plan.takes_prologue
                and self.plan is not None and self.plan.leaves_epilogue)

    def run(self, x: np.ndarray, out: np.ndarray) -> None:
        """Runs the plan's steps, made once for these arrays and again when one changes."""
        # NOTE: slicing a dozen views per depthwise chunk on every run held the GIL long enough
        # to slow models that predict in parallel threads (pipelines, runners).
        plan, epilogue, source, reader = self.plan, self.epilogue, self.prologue_source, self.epilogue_reader
        buffers = plan.scratch.arrays(self.workspace, x.dtype) if plan.scratch else []
        weights, bias, residual = self.weight_matrix(), epilogue.bias, epilogue.residual
        key = (x, out, buffers[0].base if buffers else None, weights, None if bias is None else bias.data,
               None if residual is None else residual.data, source and source.epilogue, source and source.plan,
               reader and reader.plan)
        if self.steps_key is None or not all(map(operator.is_, key, self.steps_key)):
            prologue = source.epilogue if source is not None and source.hands_over() else None
            self.steps_key, self.steps = key, plan.steps(self.threads, x, out, buffers, weights,
                                                         None if self.hands_over() else epilogue, prologue)
        for step in self.steps:
            step()

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return [shapes for step in self.steps for shapes in product_shapes(step)]


def tap_window(tap: int, dilation: int, size: int, stride: int) -> slice:
    """Along one axis, where a transposed convolution's tap adds the input's ``size`` positions."""
    return slice(tap * dilation, tap * dilation + (size - 1) * stride + 1, stride)


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
