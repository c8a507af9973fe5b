"""Native kernel fusion at build: a convolution takes over the kernel that alone reads its output.

- ResNet-style blocks end in ``Add(conv(x), shortcut)`` and an activation. Where the
  convolution's output is read by that Add alone, the two run as one ``ConvResidual`` kernel:
  the convolution's epilogue adds its bias and the shortcut and applies the Add's activation in
  one pass, writing straight into the Add's output.
- EfficientNet's and MobileNetV3's convolutions are followed by a SiLU (Activation SWISH) or a
  hard swish, a transformer's first feed-forward layer by a GELU, which ``activation_type``
  cannot express. Where the Activation alone reads the convolution's or the linear layer's
  (MatMulFusion's) output, the two run as one ``ProducerActivation`` kernel: the epilogue (or
  the depthwise kernel as it writes each plane, the packed product as it writes each panel)
  applies the activation while the output is in cache, instead of a second pass over it.
- A squeeze-and-excitation block (EfficientNet's, MobileNetV3's) scales every channel of x by a
  gate, ``Mul(x, gate)``, and a 1x1 convolution alone reads the product. The two run as one
  ``ScaledInput`` kernel: the gate scales the convolution's weight columns (O x C multiplies)
  and the convolution reads x itself, where that is less work than scaling x (C x H x W).

- An inverted residual block (MobileNetV2's, V3's, EfficientNet's) expands x with a 1x1
  convolution whose output only a depthwise convolution reads. The expansion then leaves its
  epilogue (bias, clip, activation) to the depthwise kernel, which applies it to each input
  plane as it copies the plane in (``Conv2DFusion.hand_epilogue``): one pass less over the largest
  tensors of the network. Both stay kernels of their own.
- A quantized model leaves element-wise float ops between a DequantizeLinear and a
  QuantizeLinear where its quantizer quantized none (a GELU's ``Div`` and ``Erf``, an attention's
  scaling). Where the input is 8-bit and each kernel alone reads the one before, the run is one
  ``TableChain``: a table of the 256 results, one lookup a value.
- A dynamically quantized linear layer is a MatMulInteger of the DynamicQuantizeLinear'd input,
  a Cast of its int32 sums to float32, a Mul by the two scales' product and the Add of the bias;
  a dynamically quantized convolution the same with a ConvInteger. Where each alone reads the one
  before, they run as one ``ScaledIntegerProduct``: the sums, then one pass for the Cast, Mul and
  Add, not three.
- timm's LayerNorm2d is a Transpose to channels last, a LayerNormFusion over the last axis and
  the Transpose back. Where each alone reads the one before, they run as one ``ChannelNorm``: the
  statistics over each position's channels, read in place, no transposed copies.
- The gate itself is five kernels: a global average pool, a 1x1 convolution of the pooled
  vector, its activation, a second 1x1 convolution and a sigmoid. Where each alone reads the
  one before, they run as one ``SqueezeExcite`` kernel, one compiled call
  (``lite.kernels.fast.gate``).

The epilogues are compiled (``lite.kernels.fast``); scaling the weight is one numpy multiply.
Delegates never see this: it runs after they built, on the native kernels they left, and
``partition_report()`` still lists every node. ``fuse`` returns a ``FusionPlan``, applied: what
runs, the fused kernels it made and the epilogues it handed over; ``FusionPlan.revert`` undoes it
all (measured placement times the fused kernels, then reverts; the build fuses again).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from lite.blocking import chains
from lite.fusion_kernels import (
    ChannelNorm,
    ConvResidual,
    ProducerActivation,
    ScaledInput,
    ScaledIntegerProduct,
    SqueezeExcite,
    TableChain,
)
from lite.kernel import Kernel
from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.ops.activation import FUSED_CLIPS
from lite.tensor import Tensor


@dataclass
class FusionPlan:
    """What one ``fuse`` did, applied: what runs in place of the kernels given (``running``), the
    fused kernels it made (``made``: each holds its parts) and the expansions that left their
    epilogue to a depthwise reader (``handed``). ``revert`` gives every part its own state back,
    so a build that fuses again (or does not fuse at all) starts from the kernels as they were."""

    running: list[Kernel]
    made: list[Kernel] = field(default_factory=list)
    handed: list[NativeKernel] = field(default_factory=list)

    def revert(self) -> None:
        """Undoes the plan: each fused kernel gives its parts back, each handed epilogue returns."""
        for kernel in self.made:
            kernel.unfuse()
        for expansion in self.handed:
            expansion.hand_epilogue(None)
        self.made, self.handed = [], []


def fuse(kernels: list[Kernel], shape_kernels: list[NativeKernel], outputs: list[Tensor],
         native: set[Kernel]) -> FusionPlan:
    """The plan running ``kernels`` with each squeeze-and-excitation gate's kernels replaced by a SqueezeExcite, each
    fusable convolution + residual Add pair by a ConvResidual, each convolution or linear layer +
    Activation pair by a ProducerActivation and each gate's Mul + the 1x1 convolution reading its
    product by a ScaledInput, at the place of the last part (the first parts' inputs are still
    alive there: the later parts read their outputs).

    Args:
        kernels: what runs, in order.
        shape_kernels: every native kernel (to count every reader of a tensor, delegated or not).
        outputs: the model's outputs (a convolution's output that is one is never fused away).
        native: the kernels of ``kernels`` that run natively, with static output shapes.
    """
    native = {k for k in native if not k.quantized}  # NOTE: the epilogues compute in float
    if not native or not fast.enabled():  # NOTE: nothing native (a whole delegated model): numba stays unloaded
        return FusionPlan(list(kernels))
    readers = Counter(t for k in shape_kernels for t in k.inputs if t is not None)
    producer = {t: k for k in kernels if k in native for t in k.outputs}
    reader = {t: k for k in kernels if k in native for t in k.inputs if t is not None and readers[t] == 1}
    fused: dict[Kernel, Kernel] = {}
    for first in kernels:
        if (parts := _table_chain(first, reader, outputs, native)) is not None:
            fused.update(dict.fromkeys(parts, TableChain(parts)))
        elif (scaled := _scaled_integer_product(first, reader, outputs, native)) is not None:
            fused.update(dict.fromkeys(scaled[0], ScaledIntegerProduct(*scaled)))
    for before in kernels:
        if before not in fused and (parts := _channel_norm(before, reader, outputs, native)) is not None:
            fused.update(dict.fromkeys(parts, ChannelNorm(parts)))
    for pool in kernels:
        if (parts := _squeeze_excite(pool, reader, outputs, native)) is not None:
            gate = SqueezeExcite(parts)
            fused.update(dict.fromkeys(parts, gate))
    for later in kernels:
        if later not in native or later in fused:
            continue
        if (pair := _residual_pair(later, producer, readers, outputs, native)) is not None:
            if pair[0] not in fused:
                fused[pair[0]] = fused[later] = ConvResidual(*pair)
        elif (first := _activation_producer(later, producer, readers, outputs)) is not None and first not in fused:
            fused[first] = fused[later] = ProducerActivation(first, later)
    for mul in kernels:
        if (gated := _gated_convolution(mul, reader, outputs, native)) is not None and mul not in fused:
            consumer = fused.get(gated[0], gated[0])
            scaled = ScaledInput(mul, consumer, *gated[1:])
            for part in (mul, *getattr(consumer, "parts", (consumer,))):
                fused[part] = scaled
    last = {fused.get(k, k): i for i, k in enumerate(kernels)}  # NOTE: each runs where its last part did
    running = [kernel for i, k in enumerate(kernels) if last[kernel := fused.get(k, k)] == i]
    running, chained = _chain(running, shape_kernels, outputs)
    plan = FusionPlan(running, list(dict.fromkeys(fused.values())))
    for expansion in kernels:
        if (expansion not in chained
                and (depthwise := _epilogue_reader(expansion, fused, reader, outputs, native)) is not None
                and depthwise not in chained):
            expansion.hand_epilogue(depthwise)
            plan.handed.append(expansion)
    return plan


def _chain(running: list[Kernel], shape_kernels: list[NativeKernel],
           outputs: list[Tensor]) -> tuple[list[Kernel], set[Kernel]]:
    """``running`` with each run of convolutions the blocked layout takes replaced by its
    ``BlockedChain`` (at the place of its last member), and the native kernels chained."""

    readers: dict[Tensor, set[Kernel]] = {}
    for kernel in shape_kernels:
        for tensor in kernel.inputs:
            if tensor is not None:
                readers.setdefault(tensor, set()).add(kernel)
    found = chains(running, readers, outputs)
    owner = {kernel: chain for chain in found for m in chain.members for kernel in m.kernels}
    last = {owner.get(k, k): i for i, k in enumerate(running)}
    return ([kernel for i, k in enumerate(running) if last[kernel := owner.get(k, k)] == i],
            {part for chain in found for part in chain.parts})


def _epilogue_reader(expansion: Kernel, fused: dict[Kernel, Kernel], reader: dict[Tensor, Kernel],
                     outputs: list[Tensor], native: set[Kernel]) -> NativeKernel | None:
    """The depthwise convolution that alone reads the output of ``expansion`` (a float32 1x1
    convolution with a constant bias or none, alone or with the Activation it took over, not
    adding a residual), when the compiled depthwise kernel runs it: one input channel per group,
    2-D, more than one tap."""
    if expansion not in native or not _pointwise_convolution(expansion, expansion.inputs[0]):
        return None
    bias, owner = expansion.bias(), fused.get(expansion, expansion)
    if (bias is not None and not bias.is_const) or isinstance(owner, ConvResidual | SqueezeExcite):
        return None
    depthwise = _sole_reader(owner.outputs[0], reader, outputs, native)
    if depthwise is None or depthwise.type != "Conv2DFusion" or depthwise.inputs[0] is not owner.outputs[0]:
        return None
    weight = depthwise.inputs[1]
    if (depthwise.rank != 2 or depthwise.group < 2 or len(weight.shape) != 4 or weight.shape[1] != 1
            or math.prod(weight.shape[2:]) < 2):
        return None
    if isinstance(owner, ProducerActivation) and depthwise.strides != (1, 1):
        return None  # NOTE: the activation run by run over the stride phases' short runs measured slower
    return depthwise


def _activation_producer(activation: Kernel, producer: dict[Tensor, Kernel], readers: Counter,
                         outputs: list[Tensor]) -> NativeKernel | None:
    """The convolution or linear layer whose float32 output only ``activation`` reads, when its
    epilogue can apply it."""
    from lite.kernels.fast.activation import EPILOGUE_CODES  # NOTE: imports the compiler: only when used

    if activation.type != "Activation" or activation.attrs["activation_type"] not in EPILOGUE_CODES:
        return None
    inner = activation.inputs[0]
    first = producer.get(inner)
    if (first is None or first.type not in ("Conv2DFusion", "MatMulFusion") or first.activation != "NO_ACTIVATION"
            or readers[inner] != 1 or inner in outputs or np.dtype(inner.dtype).name != "float32"):
        return None
    return first


def _residual_pair(add: Kernel, producer: dict[Tensor, Kernel], readers: Counter, outputs: list[Tensor],
                   native: set[Kernel]) -> tuple[NativeKernel, NativeKernel, Tensor] | None:
    """(convolution, add, residual) when ``add`` adds a residual to a convolution that only it reads."""
    if add.type != "AddFusion" or add not in native or len(add.inputs) != 2 or None in add.inputs:
        return None
    for side in (0, 1):
        inner, residual = add.inputs[side], add.inputs[1 - side]
        conv = producer.get(inner)
        if (conv is not None and conv.type == "Conv2DFusion" and conv.activation == "NO_ACTIVATION"
                and readers[inner] == 1 and inner not in outputs and inner is not residual
                and not (residual.is_const or residual.value_known)
                and np.dtype(inner.dtype).name in fast.FAST_DTYPES and residual.dtype == inner.dtype):
            return conv, add, residual
    return None


def _squeeze_excite(pool: Kernel, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                     native: set[Kernel]) -> list[NativeKernel] | None:
    """The parts of a squeeze-and-excitation gate that starts at ``pool``: a float32 global
    average pool of (N, C, H, W), then two 1x1 convolutions of the pooled vector, each optionally
    followed by an Activation that ``lite.kernels.fast.gate`` applies; each part alone reads the
    one before, and none of their outputs but the last is the model's."""
    if (pool.type != "AvgPoolFusion" or pool not in native or not pool.is_global or len(pool.outputs) != 1
            or len(pool.inputs[0].shape) != 4 or np.dtype(pool.inputs[0].dtype).name != "float32"):
        return None
    parts, tensor = [pool], pool.outputs[0]
    for _ in range(2):
        conv = _sole_reader(tensor, reader, outputs, native)
        if conv is None or not _gate_convolution(conv, tensor):
            return None
        parts.append(conv)
        tensor = conv.outputs[0]
        activation = _sole_reader(tensor, reader, outputs, native)
        if activation is not None and _gate_activation(activation, conv):
            parts.append(activation)
            tensor = activation.outputs[0]
    return parts


CHANNELS_LAST, CHANNELS_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


def _channel_norm(before: Kernel, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                  native: set[Kernel]) -> list[NativeKernel] | None:
    """[the Transpose, the LayerNormFusion, the Transpose back] of a layer norm over the channels of
    a float32 (N, C, H, W) image that starts at ``before``: the norm over the last axis only, one
    output, a constant scale and bias (or none); each part alone reads the one before, and neither
    of the first two outputs is the model's."""
    if (before.type != "Transpose" or before not in native or tuple(before.attrs["perm"]) != CHANNELS_LAST
            or np.dtype(before.inputs[0].dtype).name != "float32" or before.inputs[0].shape[1] < 1):
        return None
    norm = _sole_reader(before.outputs[0], reader, outputs, native)
    if (norm is None or norm.type != "LayerNormFusion" or len(norm.outputs) != 1
            or int(norm.attrs["begin_norm_axis"]) % 4 != 3 or norm.inputs[0] is not before.outputs[0]
            or not all(t is None or (t.is_const and _broadcasts(t.shape, before.inputs[0].shape[1]))
                       for t in norm.inputs[1:])):
        return None
    after = _sole_reader(norm.outputs[0], reader, outputs, native)
    if after is None or after.type != "Transpose" or tuple(after.attrs["perm"]) != CHANNELS_FIRST:
        return None
    return [before, norm, after]


def _broadcasts(shape: tuple[int, ...], size: int) -> bool:
    """Whether an array of ``shape`` broadcasts to (size,)."""
    return len(shape) <= 1 and (not shape or shape[0] in (1, size))


TABLE_UNARY_OPS = ("Activation", "Erf", "ExpFusion", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Sin", "Cos",
                   "Floor", "Ceil", "Round", "Sign")
"""Float ops a ``TableChain`` takes: element-wise, one input."""
TABLE_BINARY_OPS = ("AddFusion", "SubFusion", "MulFusion", "DivFusion")
"""Float ops a ``TableChain`` takes where the other operand is a constant of one value."""


def _table_chain(dequantize: Kernel, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                 native: set[Kernel]) -> list[Kernel] | None:
    """The parts of a ``TableChain`` that starts at ``dequantize``: a per-tensor DequantizeLinear of
    an 8-bit tensor into float32, element-wise float32 kernels (``_table_step``), a per-tensor
    QuantizeLinear into 8 bits; each part alone reads the one before, and the model returns none
    of their outputs but the last."""
    if dequantize.type != "DequantizeLinear" or dequantize not in native or not dequantize.per_tensor_constants() \
            or np.dtype(dequantize.inputs[0].dtype).name not in ("int8", "uint8"):
        return None
    parts, tensor = [dequantize], dequantize.outputs[0]
    while (kernel := _sole_reader(tensor, reader, outputs, native)) is not None:
        if np.dtype(tensor.dtype).name != "float32" or len(kernel.outputs) != 1:
            return None
        parts.append(kernel)
        if kernel.type == "QuantizeLinear":
            quantized = np.dtype(kernel.outputs[0].dtype).name in ("int8", "uint8")
            return parts if kernel.inputs[0] is tensor and kernel.per_tensor_constants() and quantized else None
        if not _table_step(kernel, tensor):
            return None
        tensor = kernel.outputs[0]
    return None


def _table_step(kernel: Kernel, tensor: Tensor) -> bool:
    """Whether ``kernel`` computes each value of its output from the same value of ``tensor`` alone
    (a one-input element-wise op, or arithmetic with a one-value constant of no higher rank)."""
    present = [t for t in kernel.inputs if t is not None]
    if kernel.type in TABLE_UNARY_OPS:
        return present == [tensor]
    if kernel.type not in TABLE_BINARY_OPS or len(present) != 2 or tensor not in present:
        return False
    other = present[1] if present[0] is tensor else present[0]
    return (other is not tensor and other.is_const and other.data is not None and other.data.size == 1
            and len(other.shape) <= len(tensor.shape))


def _scaled_integer_product(integer: Kernel, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                            native: set[Kernel]) -> tuple[list[Kernel], Tensor, Tensor | None] | None:
    """(parts, scale, bias) of a ``ScaledIntegerProduct`` that starts at ``integer``: a MatMulInteger
    or a ConvInteger, the Cast of its sums to float32, a MulFusion by a float32 ``scale`` and,
    where one follows, an AddFusion of a constant float32 ``bias`` (one value, or one a column of
    the product, ``_column_operand``, or a channel of the convolution, ``_channel_operand``; no
    fused activation); each alone reads the one before, and the model returns none of their
    outputs but the last."""
    if integer.type not in ("MatMulInteger", "ConvInteger") or integer not in native or len(integer.outputs) != 1:
        return None
    operand = _column_operand if integer.type == "MatMulInteger" else _channel_operand
    cast = _sole_reader(integer.outputs[0], reader, outputs, native)
    if cast is None or cast.type != "Cast" or np.dtype(cast.outputs[0].dtype).name != "float32":
        return None
    mul = _sole_reader(cast.outputs[0], reader, outputs, native)
    scale = None if mul is None else operand(mul, "MulFusion", cast.outputs[0])
    if scale is None:
        return None
    add = _sole_reader(mul.outputs[0], reader, outputs, native)
    bias = None if add is None else operand(add, "AddFusion", mul.outputs[0], clipped=integer.type == "ConvInteger")
    if bias is None or not bias.is_const or bias.data is None:
        return [integer, cast, mul], scale, None
    return [integer, cast, mul, add], scale, bias


def _column_operand(kernel: Kernel, op_type: str, tensor: Tensor, clipped: bool = False) -> Tensor | None:
    """The other operand of ``kernel``, an ``op_type`` of ``tensor`` (float32, columns last) with no
    fused activation (``clipped``: a fused clip allowed too), where it is float32 and holds one
    value or one a column (every dim but the last 1, no more dims than ``tensor``), so the output
    has ``tensor``'s shape; else None."""
    other = _other_operand(kernel, op_type, tensor, clipped)
    if other is None:
        return None
    shape, columns = tuple(other.shape), tensor.shape[-1] if tensor.shape else 1
    if (np.dtype(other.dtype).name != "float32" or len(shape) > len(tensor.shape) or any(d != 1 for d in shape[:-1])
            or (shape and shape[-1] not in (1, columns)) or tuple(kernel.outputs[0].shape) != tuple(tensor.shape)):
        return None
    return other


def _channel_operand(kernel: Kernel, op_type: str, tensor: Tensor, clipped: bool = False) -> Tensor | None:
    """``_column_operand`` for a convolution's output ``tensor`` (N, C, H, W): the other operand
    holds one value or one a channel (its shape, aligned to the right, 1 everywhere but C)."""
    other = _other_operand(kernel, op_type, tensor, clipped)
    if other is None or len(tensor.shape) != 4:
        return None
    shape = (1,) * (4 - len(other.shape)) + tuple(other.shape) if len(other.shape) <= 4 else None
    if (np.dtype(other.dtype).name != "float32" or shape is None or any(d != 1 for i, d in enumerate(shape) if i != 1)
            or shape[1] not in (1, tensor.shape[1]) or tuple(kernel.outputs[0].shape) != tuple(tensor.shape)):
        return None
    return other


def _other_operand(kernel: Kernel, op_type: str, tensor: Tensor, clipped: bool) -> Tensor | None:
    """The other operand where ``kernel`` is an ``op_type`` of ``tensor`` and another tensor, with no
    fused activation (``clipped``: or a fused clip); else None."""
    present = [t for t in kernel.inputs if t is not None]
    activation = kernel.attrs.get("activation_type", "NO_ACTIVATION")
    if (kernel.type != op_type or len(present) != 2 or tensor not in present or present[0] is present[1]
            or not (activation == "NO_ACTIVATION" or (clipped and activation in FUSED_CLIPS))):
        return None
    return present[1] if present[0] is tensor else present[0]


def _sole_reader(tensor: Tensor, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                 native: set[Kernel]) -> Kernel | None:
    """The native kernel that alone reads ``tensor``, unless the model returns it."""
    kernel = reader.get(tensor)
    return kernel if kernel in native and tensor not in outputs else None


def _pointwise_convolution(conv: Kernel, x: Tensor) -> bool:
    """Whether ``conv`` is a float32 1x1 convolution of ``x``: one group, stride 1, no pads, a
    constant weight."""
    if conv.type != "Conv2DFusion":
        return False
    weight = conv.inputs[1]
    return (conv.inputs[0] is x and conv.group == 1 and conv.rank == 2 and conv.strides == (1, 1)
            and not any(conv.attrs.get("pad_list") or ()) and weight.is_const and tuple(weight.shape[2:]) == (1, 1)
            and np.dtype(x.dtype).name == "float32")


def _gate_convolution(conv: Kernel, vector: Tensor) -> bool:
    """Whether ``conv`` is a 1x1 convolution of ``vector`` (N, C, 1, 1) that a gate runs
    (``_pointwise_convolution``, a constant bias, at most a clip fused)."""
    if not _pointwise_convolution(conv, vector):
        return False
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    return ((bias is None or bias.is_const) and tuple(vector.shape[2:]) == (1, 1)
            and conv.activation in ("NO_ACTIVATION", *FUSED_CLIPS))


def _gate_activation(activation: Kernel, conv: Kernel) -> bool:
    """Whether a gate applies ``activation`` after ``conv``: a type of ``GATE_CODES``, or a clip
    where the convolution fuses none."""
    from lite.kernels.fast.gate import GATE_CODES  # NOTE: imports the compiler: only when used

    kind = activation.type == "Activation" and activation.attrs["activation_type"]
    return kind in GATE_CODES or (kind in FUSED_CLIPS and conv.activation == "NO_ACTIVATION")


def _gated_convolution(mul: Kernel, reader: dict[Tensor, Kernel], outputs: list[Tensor],
                       native: set[Kernel]) -> tuple[NativeKernel, Tensor, Tensor] | None:
    """(convolution, x, gate) when ``mul`` scales x (N, C, H, W) by a gate (N, C, 1, 1), a float32 1x1
    convolution (one group, stride 1, no pads, constant weight) alone reads the product, and the
    convolution has fewer output channels than the plane has positions."""
    if mul.type != "MulFusion" or mul not in native or mul.activation != "NO_ACTIVATION" or len(mul.inputs) != 2:
        return None
    product = mul.outputs[0]
    conv = _sole_reader(product, reader, outputs, native)
    if conv is None or not _pointwise_convolution(conv, product):
        return None
    for x, gate in (mul.inputs, mul.inputs[::-1]):
        if (x is not None and gate is not None and len(x.shape) == 4 and x.dtype == gate.dtype == product.dtype
                and len(gate.shape) == 4 and tuple(gate.shape[1:]) == (x.shape[1], 1, 1)
                and tuple(x.shape) == tuple(product.shape)  # NOTE: one image is checked at resize
                and x.shape[2] * x.shape[3] > conv.inputs[1].shape[0] > 0):  # NOTE: else scaling x is less work
            return conv, x, gate
    return None
