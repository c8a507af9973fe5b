"""MatMulFusion: numpy matmul (ONNX MatMul broadcasting, 1-D operands) with transposes, bias, activation;
Attention: scaled dot-product attention."""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel, Step
from lite.kernels.elementwise import check_io
from lite.kernels.fused import activation_code, apply_fused_activation, clip_bounds, fused_activation
from lite.kernels.plans import Algorithm, Derived, Epilogue, Plan, choose
from lite.kernels.registry import register
from lite.ops.attention import attention_shapes
from lite.ops.broadcast import broadcast_shapes
from lite.ops.dtypes import FLOATS
from lite.tensor import Tensor


def transposed(shape: tuple[int, ...], flag: bool) -> tuple[int, ...]:
    """``shape`` with its last two axes swapped when ``flag`` is set and it has two or more."""
    return (*shape[:-2], shape[-1], shape[-2]) if flag and len(shape) >= 2 else shape


@dataclass(frozen=True)
class ProductLayer:
    """What MatMulFusion's table reads at one input shape: a's and b's shapes (before the transposes),
    their dtypes, whether b is constant, transpose_a, and the bias tensor (or None)."""

    a: tuple[int, ...]
    b: tuple[int, ...]
    dtypes: tuple[np.dtype, np.dtype]
    const_b: bool
    transpose_a: bool
    bias: Tensor | None
    codes: WeightCodes | None = None


@dataclass(frozen=True)
class WeightCodes:
    """A constant b that is a dequantized weight (``MatMulFusion.weight_source``): b[k, n] = (q[k, n] -
    z[k // block, n]) * scale[k // block, n], q and z 4-bit codes as the file holds them (z None: 0)."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray | None
    block: int


def weight_codes(source) -> WeightCodes | None:
    """The codes of a DequantizeLinear kernel of a constant 2-D 4-bit weight in blocks along its first axis
    (as MatMulNBits and blocked QDQ weights are), else None."""
    x, scale = source.inputs[0], source.inputs[1]
    zero_point = source.inputs[2] if len(source.inputs) > 2 else None
    block = int(source.attrs["block_size"])
    if (x.data is None or x.data.ndim != 2 or x.dtype.name not in ("uint4", "int4") or block <= 0
            or int(source.attrs["axis"]) % 2 != 0 or scale.data is None or scale.dtype != np.float32
            or scale.data.shape != (-(-x.data.shape[0] // block), x.data.shape[1])):
        return None
    if zero_point is not None and (zero_point.data is None or zero_point.dtype != x.dtype
                                   or zero_point.data.shape != scale.data.shape):
        return None
    return WeightCodes(x.data, scale.data, None if zero_point is None else zero_point.data, block)


def fits_packed(layer: ProductLayer) -> bool:
    """Whether ``lite.kernels.fast.gemm`` runs this product: float32, a constant 2-D b, a of two or
    more dims with at least one row (batch axes flattened into rows; a decode step's single row
    streams the packed weight once, as a GEMV), a bias varying along the last axis only."""
    a, b, bias = layer.a, layer.b, layer.bias
    if not (fast.enabled() and layer.dtypes == (np.float32, np.float32) and layer.const_b and len(b) == 2
            and len(a) >= 2 and not layer.transpose_a and min(b) > 0):
        return False
    return math.prod(a[:-1]) >= 1 and (bias is None or (math.prod(bias.shape[:-1]) == 1 and bias.dtype == np.float32))


def fits_codes(layer: ProductLayer) -> bool:
    """Whether ``lite.kernels.fast.nbits`` runs this product: ``fits_packed``, on a b dequantized from 4-bit
    codes (``WeightCodes``), whatever its rows: a decoder's step streams the codes instead of float32's four
    times as many bytes, a prompt dequantizes each panel once into scratch for the register tile, and the
    model keeps no float32 copy of b (``Engine`` leaves such weights uncomputed)."""
    return layer.codes is not None and fits_packed(replace(layer, const_b=True))


class NumpyProduct(Plan):
    """BLAS through numpy (the model's threads split large products), then bias and the activations."""

    def __init__(self, _layer: ProductLayer, _kernel: MatMulFusion):
        pass

    def execute(self, kernel: MatMulFusion) -> None:
        a, b = kernel.inputs[0].data, kernel.inputs[1].data
        if kernel.transpose_a and a.ndim >= 2:
            a = a.swapaxes(-1, -2)
        if kernel.transpose_b and b.ndim >= 2:
            b = b.swapaxes(-1, -2)
        out, epilogue = kernel.outputs[0].data, kernel.epilogue
        if a.ndim >= 2 and b.ndim >= 2:
            kernel.threads.matmul(a, b, out)
        else:
            np.matmul(a, b, out=out)
        if epilogue.bias is not None:
            np.add(out, epilogue.bias.data, out=out)
        apply_fused_activation(out, epilogue.activation)
        if epilogue.absorbed is not None:
            from lite.kernels.fast.activation import COMPILED

            kind, alpha = epilogue.absorbed
            COMPILED[kind](out.reshape(-1), out.reshape(-1), np.float32(alpha))


class PackedProduct(NumpyProduct):
    """``lite.kernels.fast.gemm``'s product on b packed at resize, its panels on the model's threads;
    numpy's where the output is an array compiled code does not take."""

    packs = True  # NOTE: numpy's fallback for such an output reads b again (from the file, if released)

    def __init__(self, layer: ProductLayer, kernel: MatMulFusion):
        self.key: tuple | None = None
        self.steps: list[Step] = []
        job = self.pack(layer, kernel)
        if kernel.threads.crew() is not None:
            from lite.kernels.fast.crew import warm

            warm(job)

    def pack(self, layer: ProductLayer, kernel: MatMulFusion):
        """Compiles the product, packs b (kept across resizes in ``kernel.derived``); its crew job function."""
        from lite.kernels.fast import gemm  # NOTE: imports the compiler: only when used

        gemm.warm()
        transpose = kernel.transpose_b
        self.packed = kernel.derived.get("packed", kernel.inputs[1].data, lambda b: gemm.pack(b.T if transpose else b))
        return gemm.product_job

    def execute(self, kernel: MatMulFusion) -> None:
        out = kernel.outputs[0].data
        if not fast.takes(out):
            super().execute(kernel)
            return
        a, epilogue = kernel.inputs[0].data, kernel.epilogue
        key = (a, out, None if epilogue.bias is None else epilogue.bias.data, epilogue)
        if self.key is None or not all(map(operator.is_, key, self.key)):
            self.key, self.steps = key, self.product_steps(kernel.threads, a, out, epilogue)
        for step in self.steps:
            step()

    def product_steps(self, threads, a: np.ndarray, out: np.ndarray, epilogue: Epilogue) -> list[Step]:
        """The packed product of these arrays: a as (rows, K) (a contiguous copy where it is not),
        the bias as a vector over the columns, its panels on the model's threads."""
        a, steps = fast.compiled_input(a)
        rows, n = a.reshape(-1, a.shape[-1]), out.shape[-1]
        flat = out.reshape(-1, n)
        bias = epilogue.bias
        vector = np.zeros(n, np.float32)
        if bias is not None:
            steps.append(partial(np.copyto, vector, bias.data.reshape(bias.shape[-1:] or (1,))))
        lo, hi = (np.float32(bound) for bound in clip_bounds(epilogue.activation, out.dtype) or (-np.inf, np.inf))
        code, alpha = activation_code(epilogue.absorbed, out.dtype)
        piece, jobs = self.calls(rows, vector, lo, hi, flat, code, alpha)
        return [*steps, threads.crew_loop(self.panels, piece, jobs)]

    @property
    def panels(self) -> int:
        return self.packed.shape[0]

    def calls(self, rows, vector, lo, hi, flat, code, alpha):
        """(piece(index, first, last), jobs(bounds)): the compiled product of panels first..last - 1, and
        its crew jobs."""
        from lite.kernels.fast import gemm

        def piece(_: int, first: int, last: int) -> Step:
            return partial(gemm.product, rows, self.packed, vector, lo, hi, flat, first, last, code, alpha)

        def jobs(bounds: list[tuple[int, int]]) -> Step:
            return gemm.crew_jobs(rows, self.packed, vector, lo, hi, flat, bounds, code, alpha)

        return piece, jobs


class CodesProduct(PackedProduct):
    """``lite.kernels.fast.nbits``'s product on b's 4-bit codes packed at resize (a quarter of float32's
    bytes to stream per product), its panels on the model's threads; numpy's on the dequantized b where
    the output is an array compiled code does not take."""

    def pack(self, layer: ProductLayer, kernel: MatMulFusion):
        from lite.kernels.fast import nbits  # NOTE: imports the compiler: only when used

        nbits.warm()
        codes = layer.codes
        self.block = codes.block
        self.codes, self.scales = kernel.derived.get(
            "codes", codes.q, lambda q: nbits.pack(q, codes.scale, codes.zero_point, codes.block))
        return nbits.product_job

    @property
    def panels(self) -> int:
        return self.codes.shape[0]

    def execute(self, kernel: MatMulFusion) -> None:
        if not fast.takes(kernel.outputs[0].data):
            kernel.materialize_weight()  # NOTE: numpy's product reads the float32 b
        super().execute(kernel)

    def calls(self, rows, vector, lo, hi, flat, code, alpha):
        from lite.kernels.fast import nbits

        codes, scales, block = self.codes, self.scales, self.block

        def piece(_: int, first: int, last: int) -> Step:
            return partial(nbits.product, rows, codes, scales, block, vector, lo, hi, flat, first, last, code, alpha)

        def jobs(bounds: list[tuple[int, int]]) -> Step:
            return nbits.crew_jobs(rows, codes, scales, block, vector, lo, hi, flat, bounds, code, alpha)

        return piece, jobs


PLANS_KEPT = 4
"""How many shape sets' plans a MatMulFusion keeps (``lite.memory.PLANS_KEPT`` placements' arrays too)."""

ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("codes_gemm", fits_codes, CodesProduct),
    Algorithm("packed_gemm", fits_packed, PackedProduct),
    Algorithm("numpy", lambda layer: True, NumpyProduct),
)
"""MatMulFusion's algorithms, best first: resize runs the first that fits."""


@register("MatMulFusion", dtypes=FLOATS)
class MatMulFusion(NativeKernel):
    """y = op(a) @ op(b) + bias, then the fused activation.

    op swaps the last two axes of a (transpose_a) or b (transpose_b) as a view, which BLAS
    reads transposed without a copy. A 1-D a is a row vector and a 1-D b a column vector
    whose unit axis is dropped from the result, as in numpy and ONNX MatMul; batch axes
    broadcast. bias (optional third input) must broadcast to the result's shape.

    resize runs the first of ``ALGORITHMS`` that fits (``algorithm`` names it): a linear layer (a
    constant 2-D float32 b) runs ``lite.kernels.fast.gemm``'s product on b packed at resize, where
    compiled kernels run; other products numpy's. ``epilogue`` (bias, the fused activation, an
    Activation ``lite.fusion`` has it absorb through ``set_epilogue``) runs after the product.
    """

    def check_attrs(self) -> None:
        check_io(self, 2, 1)
        self.transpose_a = bool(self.attrs["transpose_a"])
        self.transpose_b = bool(self.attrs["transpose_b"])
        self.activation = fused_activation(self)
        bias = self.inputs[2] if len(self.inputs) > 2 else None
        self.epilogue = Epilogue(bias, self.activation)
        self.algorithm: str | None = None
        self.plan: NumpyProduct | None = None
        self.derived = Derived()  # b packed, kept across resizes
        self.plans: OrderedDict[tuple, tuple[str, NumpyProduct]] = OrderedDict()  # the last PLANS_KEPT shapes' plans
        self.weight_source: NativeKernel | None = None  # the folded DequantizeLinear of a constant b (the engine's)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        a = transposed(self.input_shape(0), self.transpose_a)
        b = transposed(self.input_shape(1), self.transpose_b)
        if not a or not b:
            self.fail(f"operands must have at least one dim, got shapes {list(a)} and {list(b)}")
        a2, b2 = (1, *a) if len(a) == 1 else a, (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            self.fail(f"inner dims differ: op(a) has shape {list(a)}, op(b) {list(b)}")
        try:
            batch = broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
        except ValueError:
            self.fail(f"batch dims of {list(a)} and {list(b)} do not broadcast")
        rows = () if len(a) == 1 else (a[-2],)
        cols = () if len(b) == 1 else (b[-1],)
        shape = (*batch, *rows, *cols)
        if len(self.inputs) > 2 and self.inputs[2] is not None:
            self.check_bias(self.input_shape(2), shape)
        return [shape]

    def check_bias(self, bias: tuple[int, ...], shape: tuple[int, ...]) -> None:
        try:
            fits = np.broadcast_shapes(bias, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            self.fail(f"bias of shape {list(bias)} does not broadcast to the result shape {list(shape)}")

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return [(transposed(self.input_shape(0), self.transpose_a), transposed(self.input_shape(1), self.transpose_b))]

    def layer(self) -> ProductLayer:
        """What the algorithm table reads of this product at its current input shapes."""
        codes = None
        if self.weight_source is not None and not self.transpose_b:
            codes = weight_codes(self.weight_source)
        return ProductLayer(self.input_shape(0), self.input_shape(1), (self.inputs[0].dtype, self.inputs[1].dtype),
                            self.inputs[1].is_const, self.transpose_a, self.epilogue.bias, codes)

    def resize(self) -> None:
        """Chooses the plan for the current shapes; one made for the same shapes before comes back, with the
        steps it made for its arrays (a generator alternates between prompt and step shapes)."""
        layer = self.layer()
        bias = layer.bias
        key = (layer.a, layer.b, layer.dtypes, layer.const_b, layer.transpose_a, None if bias is None else
               (id(bias), bias.shape), None if layer.codes is None else id(layer.codes.q), id(self.epilogue))
        if key not in self.plans:
            self.plans[key] = choose(ALGORITHMS, layer, self)
            while len(self.plans) > PLANS_KEPT:
                self.plans.popitem(last=False)
        self.plans.move_to_end(key)
        self.algorithm, self.plan = self.plans[key]
        if not isinstance(self.plan, CodesProduct):
            self.materialize_weight()

    def materialize_weight(self) -> None:
        """Computes b from its DequantizeLinear (``weight_source``) where the engine left it uncomputed (a 4-bit
        weight that products read as codes) and this product reads the float32 values."""
        b, source = self.inputs[1], self.weight_source
        if b.data is not None or source is None:
            return
        for tensor in source.outputs:
            tensor.data = np.empty(tensor.shape, tensor.dtype)
        source.resize()
        source.execute()

    def set_epilogue(self, epilogue: Epilogue) -> None:
        """Runs ``epilogue`` after the product from the next run on (``lite.fusion``: an absorbed
        Activation; ``Epilogue(bias, kernel.activation)`` is the kernel's own). The same epilogue again
        changes nothing (``ProducerActivation`` sets it at every resize): the plans made for it stay."""
        if epilogue == self.epilogue:
            return
        self.epilogue = epilogue
        self.plans.clear()

    def execute(self) -> None:
        if self.plan is None:
            self.resize()
        self.plan.execute(self)


@register("Attention", dtypes=FLOATS)
class Attention(NativeKernel):
    """y = softmax(q @ k * scale + mask) @ v, the softmax over the last axis (k is transposed:
    (..., D, Sk)); with ``nan_to_zero`` the softmax's NaN weights are 0. The scores live in the
    workspace: one matmul, an in-place scale, mask add and softmax, one matmul into the output."""

    def check_attrs(self) -> None:
        check_io(self, 3, 1)
        self.scale = float(self.attrs["scale"])
        self.nan_to_zero = bool(self.attrs.get("nan_to_zero", False))
        self.softmax_jobs = (None, None)  # (the arrays they were made for, the softmax's jobs for the crew)
        self.heads_step = (None, None)  # (the arrays it was made for, the compiled heads' step)
        if not np.isfinite(self.scale):
            self.fail(f"scale must be finite, got {self.scale}")

    def prepare(self) -> None:
        super().prepare()
        if fast.enabled() and self.inputs[0].dtype == np.float32:
            from lite.kernels.fast import attention, crew, softmax  # NOTE: imports the compiler: only when used

            softmax.warm()
            attention.warm()
            if self.threads.crew() is not None:
                crew.warm(softmax.softmax_job, attention.heads_job)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        mask = self.input_shape(3) if len(self.inputs) > 3 and self.inputs[3] is not None else None
        try:
            self.scores_shape, out = attention_shapes(*(self.input_shape(i) for i in range(3)), mask)
        except ValueError as exc:
            self.fail(str(exc))
        return [out]

    def execute(self) -> None:
        q, k, v = (self.inputs[i].data for i in range(3))
        scores = self.workspace.array(self.scores_shape, q.dtype)
        mask = self.inputs[3].data if len(self.inputs) > 3 and self.inputs[3] is not None else None
        compiled = fast.enabled() and compiled_softmax_takes(scores, mask)
        if compiled and self.heads_on_crew(q, k, v):
            self.compiled_heads(q, k, v, scores, mask)
            return
        self.threads.matmul(q, k, scores)
        if compiled:
            self.compiled_softmax(scores, mask)
        else:
            self.numpy_softmax(scores, mask)
        self.threads.matmul(scores, v, self.outputs[0].data)

    def numpy_softmax(self, scores: np.ndarray, mask: np.ndarray | None) -> None:
        """The reference: scale, mask, then softmax over the last axis, in place."""
        if self.scale != 1.0:
            np.multiply(scores, scores.dtype.type(self.scale), out=scores)
        if mask is not None:
            np.add(scores, mask, out=scores)
        np.subtract(scores, scores.max(axis=-1, keepdims=True), out=scores)
        np.exp(scores, out=scores)
        np.divide(scores, scores.sum(axis=-1, keepdims=True), out=scores)
        if self.nan_to_zero:
            np.copyto(scores, 0, where=np.isnan(scores))

    def compiled_softmax(self, scores: np.ndarray, mask: np.ndarray | None) -> None:
        """``lite.kernels.fast.softmax``: one pass per row, the rows on the model's crew where it
        runs (its jobs made once for these arrays, and again only when one changes)."""
        from lite.kernels.fast import softmax  # NOTE: imports the compiler: only when used

        shape4 = (1,) * (4 - scores.ndim) + scores.shape
        flat_mask, strides = softmax.mask_layout(mask, shape4)
        shape, rows, scale = np.array(shape4, np.int64), scores.size // scores.shape[-1], np.float32(self.scale)
        bounds = self.threads.loop_bounds(rows)
        if len(bounds) < 2 or self.threads.dynamic or self.threads.crew() is None:
            softmax.softmax_rows(scores.reshape(-1), shape, scale, flat_mask, strides, 0, rows, self.nan_to_zero)
            return
        key = (scores.ctypes.data, shape4, None if mask is None else (mask.ctypes.data, mask.shape))
        if self.softmax_jobs[0] != key:
            self.softmax_jobs = key, softmax.crew_jobs(scores.reshape(-1), shape, scale, flat_mask, strides, bounds,
                                                       self.nan_to_zero)
        self.softmax_jobs[1]()

    def heads_on_crew(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> bool:
        """Whether the compiled heads (``lite.kernels.fast.attention``) run: operands they take, and
        heads that run as crew jobs (two or more threads on idle cores). At one thread BLAS's two
        batched products measured faster (BERT's heads of 64 columns: a 64-column v fills 96 of
        the tile's columns); on two threads the heads as crew jobs were faster."""
        from lite.kernels.fast import attention  # NOTE: imports the compiler: only when used

        heads = math.prod(self.scores_shape[:-2])
        return (attention.takes(q, k, v, self.scores_shape) and not self.threads.dynamic
                and self.threads.crew() is not None and len(self.threads.loop_bounds(heads)) > 1)

    def compiled_heads(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, scores: np.ndarray,
                       mask: np.ndarray | None) -> None:
        """``lite.kernels.fast.attention``: head by head, both products and the softmax compiled, the
        heads on the model's threads (the step made once for these arrays, again when one changes)."""
        from lite.kernels.fast import attention, softmax

        out = self.outputs[0].data
        key = tuple((a.ctypes.data, a.shape) for a in (q, k, v, scores, out, *(() if mask is None else (mask,))))
        if self.heads_step[0] != key:
            shape4 = (1,) * (4 - scores.ndim) + scores.shape
            flat_mask, strides = softmax.mask_layout(mask, shape4)
            operands, shape, scale = attention.layout(q, k, v, scores, out), np.array(shape4, np.int64), \
                np.float32(self.scale)

            def piece(_: int, first: int, last: int) -> Step:
                return partial(attention.heads, *operands, shape, scale, flat_mask, strides, first, last,
                               self.nan_to_zero)

            def jobs(bounds: list[tuple[int, int]]) -> Step:
                return attention.crew_jobs(*operands, shape, scale, flat_mask, strides, bounds, self.nan_to_zero)

            self.heads_step = key, self.threads.crew_loop(operands[0].shape[0], piece, jobs)
        self.heads_step[1]()


def compiled_softmax_takes(scores: np.ndarray, mask: np.ndarray | None) -> bool:
    """Whether ``lite.kernels.fast.softmax`` runs on these: float32, C-contiguous, 4 dims or fewer."""
    arrays = [scores] if mask is None else [scores, mask]
    return scores.ndim <= 4 and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
