"""Runs of convolutions on the channel-blocked layout (NCHW16c) as one kernel: ``BlockedChain``.

onnxruntime's CPU provider rewrites the convolutions of a CNN into its NCHWc layout (channels in
blocks of a vector's width, the innermost dimension). With that rewrite turned off
(``ORT_ENABLE_EXTENDED``) it is slower than Delite's NCHW kernels on some CNNs and close on the
others: the layout is where the difference lies (docs/performance.md, channel blocks). In NCHW a
1x1 convolution is a matrix product on BLAS (its operands repacked on every call, the epilogue a
second pass) and a depthwise convolution works plane by plane; in blocks, the 1x1 convolution's
output at one position is a run of vectors of output channels (``lite.kernels.fast.blocks``) and a
depthwise convolution multiplies vectors of channels tap by tap
(``lite.kernels.fast.blocked_depthwise``).

A run of consecutive native kernels that are each one of these becomes one ``BlockedChain``:

- a float32 2-D convolution with a constant weight and bias, 1x1 (one group, stride 1, no pads),
  depthwise (one input channel per group, as many outputs), dense (one group, any window,
  strides and pads: ``lite.kernels.fast.blocked_direct``; a 3x3 stride-1 layer of 16 channels or
  more in and out ``lite.kernels.fast.blocked_winograd``) or grouped
  (as many channels a group in as out, a divisor or a multiple of a block: the same kernel, each
  output block from its groups' input blocks), alone or fused with its residual Add
  (``ConvResidual``, not depthwise) or its Activation (``ProducerActivation``);
- a squeeze-and-excitation gate (``SqueezeExcite``: the channel means from the blocks, then its
  two small products as in NCHW);
- a gate's Mul, alone or fused with the 1x1 convolution reading it (``ScaledInput``: each run
  scales the packed weight's rows by the gate);
- a Concat of channels whose inputs but the last are whole blocks; a 2-D max or average pool (a
  global one ends a run); a BatchNorm with constant statistics, or an Activation a compiled
  epilogue applies (a BatchNorm applies the Activation that alone reads it: DenseNet's
  pre-activations in one pass).

A run does not start with a pool (its larger input would go into blocks). A dense convolution
whose input would not fill its blocks (a stem's 3 channels in 16 lanes) is ``narrow``: it reads its
NCHW input as it is (``BlockedDirectPlan``'s narrow form), so it only starts a run.

The run must keep at least MIN_INSIDE results in blocks. Its inputs go into blocks as it first
reads them, the tensors only its members read stay in blocks (in buffers reused once read), and
those read after it, or returned, come back to NCHW as they are written. Images run one after
the other (the buffers hold one). Each member keeps its place in ``partition_report()``, and a
profile charges each member its own time. Where the shapes of a resize do not suit the blocks
(a 1x1 convolution on fewer than ``ROWS`` positions, a gate that broadcasts otherwise), the
members run as the NCHW kernels they are.

The mobile networks and the ResNets, SqueezeNet, GoogLeNet, Inception-v3 and DenseNet run faster
in chains than on the NCHW kernels (paired measurements: docs/performance.md, channel blocks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from lite.aligned import aligned_array
from lite.errors import MemoryLimitError
from lite.fusion_kernels import ConvResidual, ProducerActivation, ScaledInput, SqueezeExcite
from lite.kernel import Kernel, charge
from lite.kernels.fused import activation_code, compiled_terms
from lite.kernels.window import Geometry
from lite.ops.activation import FUSED_CLIPS
from lite.tensor import Tensor

MIN_MEMBERS = 2
"""The fewest members a chain takes: a lone one would pay for both layout changes."""
CHAIN_SLOT = 1 << 20
"""The workspace slot of the chains' buffers (a model's chains run one at a time and share it)."""
DENSE_SLOT = CHAIN_SLOT + 1
"""The workspace slot of the dense members' padded inputs and last tiles (shared the same way)."""
MAX_PADDED_SHARE = 2.0
"""A dense member's padded input lanes over its channels, at most, for it to read blocks; past that
it is narrow (its terms would be mostly padding), and a narrow member only starts a chain. At 1.25,
GoogLeNet's 3x3 convolutions of 24 channels (32 lanes) were narrow and ended a chain each: 0.43 ms
with the layout changes around them, against onnxruntime's 0.10."""
WINOGRAD_CHANNELS = 16
"""The fewest channels in and out for a chain's 3x3 stride-1 member to run Winograd
(``lite.kernels.fast.blocked_winograd``) rather than the blocked direct kernel."""
SHARED_WEIGHTS = 1 << 15
"""The fewest weights a gate's product, or a gated 1x1 convolution's packed weight to scale, has
for the chain to share it out among the threads: EfficientNet-B0's small gates (16 to 144 channels)
took 1.3-1.6x their one-thread time shared out, its 1152 x 48 products and MobileNetV3-Large's
480 x 120 and larger ran faster (docs/performance.md, channel blocks)."""
MIN_INSIDE = 2
"""The fewest results a chain keeps in blocks (read by its members alone): EfficientNet-B0's chains
of an expansion and its depthwise convolution, whose result the squeeze-and-excitation gate reads
in NCHW, ran slower than the NCHW kernels (both layout changes for one result kept inside)."""


@dataclass
class Member:
    """One kernel of a chain, as the fused list has it (``kernel``): a convolution (``conv``) with
    its epilogue; or, ``conv`` None, a squeeze-and-excitation gate of x, or the product of x by a
    gate (``gate`` set: a MulFusion)."""

    kernel: Kernel
    conv: Kernel | None
    x: Tensor
    residual: Tensor | None = None
    clip: str = "NO_ACTIVATION"  # the activation_type giving the clip bounds
    activation: tuple[str, float] | None = None  # an epilogue activation (``EPILOGUE_CODES``), or None
    gate: Tensor | None = None  # the gate (N, C, 1, 1) scaling x's channels before a 1x1 convolution
    joined: list[Tensor] | None = None  # a Concat's inputs, joined along the channels
    pooled: bool = False  # a 2-D max or average pool of x (a global one: ``closing``)
    mapped: tuple[np.ndarray, np.ndarray] | None = None  # an element-wise x * multiplier + offset (C,) each,
    # then the clip and activation: a BatchNorm (with the Activation it absorbed) or an Activation (ones, zeros)
    absorbed: Kernel | None = None  # the Activation a BatchNorm member applies too (it writes that one's output)

    @property
    def out(self) -> Tensor:
        return (self.absorbed or self.kernel).outputs[0]

    @property
    def kernels(self) -> list[Kernel]:
        """The fused list's kernels the member runs: its own, then the Activation it absorbed."""
        return [self.kernel] if self.absorbed is None else [self.kernel, self.absorbed]

    @property
    def depthwise(self) -> bool:
        return self.conv is not None and self.conv.group > 1 and self.conv.inputs[1].shape[1] == 1

    @property
    def grouped(self) -> bool:
        """A convolution of several groups of more than one channel (ResNeXt's, RegNet's)."""
        return self.conv is not None and self.conv.group > 1 and self.conv.inputs[1].shape[1] > 1

    @property
    def direct(self) -> bool:
        """A dense or grouped member: ``lite.kernels.fast.blocked_direct`` runs it on padded blocks."""
        return self.dense or self.grouped

    @property
    def dense(self) -> bool:
        """A convolution of one group other than a 1x1 stride-1 unpadded one (its taps or strides
        read other positions: ``lite.kernels.fast.blocked_direct`` on the blocks)."""
        return self.conv is not None and self.conv.group == 1 and not _pointwise(self.conv)

    @property
    def closing(self) -> bool:
        """A global pool: it ends a run (what reads its one position, a 1x1 convolution on a 1 x 1
        plane, would not suit the blocks)."""
        return self.pooled and self.kernel.is_global

    @property
    def narrow(self) -> bool:
        """A dense convolution whose input would not fill its channel blocks: it reads x in NCHW
        (a chain's input), each position's channels alone."""
        return self.dense and not _fills_blocks(self.conv.inputs[1].shape[1])

    @property
    def reads(self) -> list[Tensor]:
        if self.joined is not None:
            return list(dict.fromkeys(self.joined))
        return [t for t in (self.x, self.residual, self.gate) if t is not None]


def member(kernel: Kernel) -> Member | None:
    """``kernel`` as a chain member, or None where a chain cannot run it."""
    if kernel.quantized:
        return None
    if isinstance(kernel, SqueezeExcite):
        return Member(kernel, None, kernel.inputs[0])
    if kernel.type == "MulFusion":
        return _gated(kernel)
    if kernel.type == "Concat":
        return _joined(kernel)
    if kernel.type in ("MaxPoolFusion", "AvgPoolFusion"):
        return _pool(kernel)
    if kernel.type in ("BatchNorm", "Activation"):
        return _mapped(kernel)
    if isinstance(kernel, ScaledInput):
        inner = _convolution(kernel.consumer)
        if inner is None or inner.depthwise:
            return None
        inner.kernel, inner.x, inner.gate = kernel, kernel.x, kernel.gate
        return inner
    return _convolution(kernel)


def _gated(mul: Kernel) -> Member | None:
    """A float32 MulFusion of x (N, C, H, W) by a gate (N, C, 1, 1) with no activation, as a member
    (the gate told by its 1 x 1 plane)."""
    if len(mul.inputs) != 2 or None in mul.inputs or mul.activation != "NO_ACTIVATION":
        return None
    for x, gate in (mul.inputs, mul.inputs[::-1]):
        if (len(x.shape) == len(gate.shape) == 4 and tuple(gate.shape[2:]) == (1, 1) and tuple(x.shape[2:]) != (1, 1)
                and np.dtype(x.dtype) == np.dtype(gate.dtype) == np.float32):
            return Member(mul, None, x, gate=gate)
    return None


def _joined(concat: Kernel) -> Member | None:
    """A float32 Concat of 4-D tensors along the channels, each input but the last a whole number of
    channel blocks (so the blocks of the inputs, one after the other, are the output's), as a member."""
    from lite.kernels.fast.blocks import LANES

    inputs = concat.inputs
    if (len(inputs) < 2 or None in inputs or any(t.is_const or len(t.shape) != 4 for t in inputs)
            or concat.attrs["axis"] % 4 != 1 or any(np.dtype(t.dtype) != np.float32 for t in inputs)
            or any(not isinstance(t.shape[1], int) or t.shape[1] % LANES for t in inputs[:-1])):
        return None
    return Member(concat, None, inputs[0], joined=list(inputs))


def _pool(pool: Kernel) -> Member | None:
    """A float32 2-D max or average pool (one output, no dilation; or global over a 4-D input) as a
    member."""
    x = pool.inputs[0]
    if np.dtype(x.dtype) != np.float32 or len(pool.outputs) != 1:
        return None
    if pool.is_global:
        return Member(pool, None, x, pooled=True) if len(x.shape) == 4 else None
    if pool.rank != 2 or tuple(pool.dilations) != (1, 1):
        return None
    return Member(pool, None, pool.inputs[0], pooled=True)


def _mapped(kernel: Kernel) -> Member | None:
    """A float32 BatchNorm with constant statistics, or an Activation a compiled epilogue applies
    (a clip or ``EPILOGUE_CODES``), of a 4-D tensor, as a member."""
    from lite.kernels.fast.activation import EPILOGUE_CODES

    x = kernel.inputs[0]
    if len(x.shape) != 4 or np.dtype(x.dtype) != np.float32 or len(kernel.outputs) != 1:
        return None
    channels = x.shape[1]
    if kernel.type == "BatchNorm":
        if kernel.folded is None:
            return None
        return Member(kernel, None, x, mapped=tuple(np.asarray(a, np.float32) for a in kernel.folded))
    kind = kernel.attrs["activation_type"]
    if kind not in FUSED_CLIPS and kind not in EPILOGUE_CODES or not isinstance(channels, int):
        return None
    identity = (np.ones(channels, np.float32), np.zeros(channels, np.float32))
    if kind in FUSED_CLIPS:
        return Member(kernel, None, x, clip=kind, mapped=identity)
    return Member(kernel, None, x, activation=(kind, float(kernel.alpha)), mapped=identity)


def _convolution(kernel: Kernel) -> Member | None:
    """A convolution, alone or fused with its residual Add or its Activation, as a member."""
    if isinstance(kernel, ConvResidual):
        found = Member(kernel, kernel.conv, kernel.conv.inputs[0], kernel.residual, kernel.add.activation)
    elif isinstance(kernel, ProducerActivation):
        if kernel.producer.type != "Conv2DFusion":
            return None
        activation = kernel.activation
        found = Member(kernel, kernel.producer, kernel.producer.inputs[0], None, kernel.producer.activation,
                       (activation.attrs["activation_type"], float(activation.alpha)))
    elif kernel.type == "Conv2DFusion" and len(kernel.outputs) == 1:
        found = Member(kernel, kernel, kernel.inputs[0], None, kernel.activation)
    else:
        return None
    return found if _fits(found) else None


def _fits(found: Member) -> bool:
    """Whether the convolution is one a chain runs, by its attributes and weight: float32, 2-D, a
    constant weight and bias, 1x1 (one group, stride 1, no pads), dense or grouped (no dilation)
    or depthwise (one input channel per group, as many outputs, no residual). Dense and grouped
    members join chains whatever the registers: with AVX2's, where the chain once ran ResNet-18
    slower than the NCHW kernels (Winograd there), it now runs Winograd on blocks too, and the
    ResNets, GoogLeNet, DenseNet-121 and RegNetY ran 1.2-1.5x faster in chains
    (docs/performance.md, Winograd on channel blocks)."""
    conv = found.conv
    weight, bias = conv.inputs[1], conv.bias()
    if (conv.rank != 2 or np.dtype(conv.inputs[0].dtype) != np.float32 or not weight.is_const
            or (bias is not None and not bias.is_const)):
        return False
    if conv.group == 1:
        return tuple(conv.dilations) == (1, 1)
    if weight.shape[1] > 1:
        return tuple(conv.dilations) == (1, 1) and _grouped_fits(weight.shape[0], weight.shape[1], conv.group)
    return tuple(weight.shape[:2]) == (conv.group, 1) and found.residual is None


def _grouped_fits(out_channels: int, width: int, group: int) -> bool:
    """Whether a chain runs a grouped convolution of ``group`` groups of ``width`` input channels:
    as many output channels a group, and no group straddling a block (``width`` a divisor or a
    multiple of LANES)."""
    from lite.kernels.fast.blocks import LANES

    return out_channels == group * width and (LANES % width == 0 or width % LANES == 0)


def _fills_blocks(channels: int) -> bool:
    """Whether ``channels`` fill their channel blocks enough for a dense member to read them there
    (its terms run over whole blocks)."""
    from lite.kernels.fast.blocks import LANES, blocks

    return blocks(channels) * LANES <= MAX_PADDED_SHARE * channels


def _pointwise(conv: Kernel) -> bool:
    """Whether a convolution of one group is 1x1, stride 1, unpadded (``blocks.pointwise`` runs it)."""
    return (tuple(conv.inputs[1].shape[2:]) == (1, 1) and tuple(conv.strides) == (1, 1)
            and not any(conv.attrs.get("pad_list") or ()))


def _fits_shapes(found: Member) -> bool:
    """Whether the chain runs the member at its current shapes: 4-D, the residual of the output's
    shape, a gate of one value per channel of x (for each image, or one for all), and a 1x1
    convolution's plane at least ``ROWS`` positions."""
    from lite.kernels.fast.tile import LANES, ROWS

    x, out = tuple(found.x.shape), tuple(found.out.shape)
    if len(x) != 4 or (found.residual is not None and tuple(found.residual.shape) != out):
        return False
    if found.joined is not None:  # NOTE: the channels seen at build may differ now
        return all(t.shape[1] % LANES == 0 for t in found.joined[:-1])
    if found.pooled:
        return True
    if found.mapped is not None:
        return found.mapped[0].size == x[1]
    if found.gate is not None and tuple(found.gate.shape) not in ((x[0], x[1], 1, 1), (1, x[1], 1, 1)):
        return False
    if found.conv is None:  # NOTE: a gate scales its input's channels: one value each
        return out == ((x[0], x[1], 1, 1) if found.gate is None else x)
    return found.depthwise or found.direct or x[2] * x[3] >= ROWS


def chains(kernels: list[Kernel], readers: dict[Tensor, set[Kernel]], outputs: list[Tensor]) -> list[BlockedChain]:
    """The chains in ``kernels`` (the fused list, in order): maximal runs of members with at least
    MIN_MEMBERS members, MIN_INSIDE results at least read by the run alone; ``readers`` maps each
    tensor to every kernel reading it (delegated or not); ``outputs`` are the model's."""
    found, run = [], []
    for kernel in [*kernels, None]:
        current = None if kernel is None else member(kernel)
        if current is not None and run and _absorbs(run[-1], current, readers, outputs):
            run[-1].clip, run[-1].activation, run[-1].absorbed = current.clip, current.activation, current.kernel
            continue
        if current is not None and not (current.narrow and run):  # NOTE: a narrow member reads NCHW
            run.append(current)
            if not current.closing:
                continue
            current = None
        while run and run[0].pooled:  # NOTE: a pool first would take its larger input into blocks
            run.pop(0)
        chain = BlockedChain(run, readers, outputs) if len(run) >= MIN_MEMBERS else None
        if chain is not None and len(run) - len(chain.outputs) >= MIN_INSIDE:
            found.append(chain)
        run = [] if current is None else [current]
    return found


def _absorbs(norm: Member, activation: Member, readers: dict[Tensor, set[Kernel]], outputs: list[Tensor]) -> bool:
    """Whether BatchNorm member ``norm`` applies ``activation`` (an Activation member) too: the
    activation alone reads the norm's result, which is not a model output (DenseNet's pre-activation
    norms and Relus: one pass over the blocks, not two)."""
    return (norm.kernel.type == "BatchNorm" and norm.absorbed is None and activation.kernel.type == "Activation"
            and activation.x is norm.out and norm.out not in outputs
            and readers.get(norm.out, set()) == {activation.kernel})


class BlockedChain(Kernel):
    """Consecutive kernels (``members``: convolutions, gates, Muls) run on the channel-blocked
    layout, image by image."""

    def __init__(self, members: list[Member], readers: dict[Tensor, set[Kernel]], outputs: list[Tensor]):
        kernels = {k for m in members for k in m.kernels}
        made = {m.out for m in members}
        self.parts = tuple(part for m in members for k in m.kernels for part in getattr(k, "parts", (k,)))
        parts = set(self.parts)
        self.entering = list(dict.fromkeys(t for m in members for t in m.reads if t not in made))
        self.converted = [t for t in self.entering if any(t in _blocked_reads(m) for m in members)]
        """The inputs going into blocks (a narrow member reads its input in NCHW)."""
        self.image = 0  # the image the members run on (a narrow member's fill reads it)
        leaving = [m.out for m in members
                   if m.out in outputs or any(r not in parts and r not in kernels for r in readers.get(m.out, ()))]
        constants = dict.fromkeys(t for m in members for t in m.kernel.inputs if t is not None and t.is_const)
        super().__init__([*self.entering, *constants], leaving, name="+".join(m.kernel.name for m in members))
        self.members = members
        self.threads = self.parts[0].threads
        self.steps: list[list] = []
        self.blocked: dict[Tensor, np.ndarray] = {}
        self.dense: dict[Kernel, tuple] = {}  # a dense or grouped member's kernel: (plan, padded, tail)
        self.packed_hook: Callable[[Tensor], None] | None = None
        """Called with each member's weight once the chain has packed it (the engine releases its
        pages there: the chain's first resize packs every member, one copy at a time)."""
        self.fallback = False

    charges_parts = True  # NOTE: a profiled run passes the profile to execute, which times each member

    @property
    def type(self) -> str:
        return "BlockedChain"

    def resize(self) -> None:
        from lite.kernels.fast import blocked_depthwise, blocks, crew, gate

        blocks.warm()
        blocked_depthwise.warm()
        if self.threads.crew() is not None:
            crew.warm(blocks.pointwise_job, blocks.depthwise_job, blocks.pool_job, blocks.affine_job,
                      blocks.subsample_job, blocks.scale_panels_job, gate.product_job)
        self.fallback = not all(_fits_shapes(m) for m in self.members)
        if not self.fallback:
            try:
                self.blocked = self._buffers()
            except MemoryLimitError:  # NOTE: the NCHW arrays may fit where the padded blocks do not
                self.fallback = True
        if self.fallback:
            self._resize_members()
            return
        self.dense = self._dense_plans()
        self.steps = [self._plan(m) for m in self.members]

    def _resize_members(self) -> None:
        """Runs the members as the kernels they are, each with NCHW arrays of its own.

        Raises:
            MemoryLimitError: those arrays would need more than ``Context.memory_limit`` bytes.
        """
        leaving = set(self.outputs)
        inside = [k.outputs[0] for m in self.members for k in m.kernels if k.outputs[0] not in leaving]
        nbytes = sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize for t in inside)
        limit = self.parts[0].workspace.limit
        if limit is not None and nbytes > limit:
            raise MemoryLimitError(f"kernels {self.name!r} need {nbytes} bytes for their results, more than the "
                                   f"memory limit of {limit} bytes (Context.memory_limit)")
        for t in inside:
            t.data = aligned_array(t.shape, t.dtype)
        for m in self.members:
            for kernel in m.kernels:
                kernel.resize()

    def _buffers(self) -> dict[Tensor, np.ndarray]:
        """A blocked buffer (CB, H * W, LANES) for each tensor the members read or write, one image's
        worth, all in one scratch array of the model's workspace (so within Context.memory_limit);
        a buffer is reused once the last member reading its tensor has run. A Concat's input that
        ``_join_slots`` places in its output is that output's blocks: the Concat copies nothing."""
        from lite.kernels.fast.blocks import LANES, blocks

        last = {t: index for index, m in enumerate(self.members) for t in _blocked_reads(m)}
        slots = self._join_slots(last)
        shapes = {t: (blocks(t.shape[1]), t.shape[2] * t.shape[3], LANES)
                  for t in [*self.converted, *(m.out for m in self.members)]}
        spans: dict[Tensor, tuple[int, int]] = {}
        offsets = _Offsets()

        def place(t: Tensor) -> tuple[int, int]:
            if t not in slots:
                return offsets.take(math.prod(shapes[t]))
            joined, first = slots[t]
            if joined not in spans:
                spans[joined] = place(joined)
            return spans[joined][0] + first * math.prod(shapes[t][1:]), math.prod(shapes[t])

        for index, t in [(-1, t) for t in self.converted] + [(i, m.out) for i, m in enumerate(self.members)]:
            if t not in spans:  # NOTE: a Concat's output is placed with its first input in place
                spans[t] = place(t)
            if index >= 0:
                offsets.free += [spans[r] for r in set(_blocked_reads(self.members[index]))
                                 if last[r] == index and r not in slots]
        scratch = self.parts[0].workspace.array((offsets.total,), np.float32, CHAIN_SLOT)
        return {t: scratch[offset:offset + math.prod(shapes[t])].reshape(shapes[t]) for t, (offset, _) in spans.items()}

    def _join_slots(self, last: dict[Tensor, int]) -> dict[Tensor, tuple[Tensor, int]]:
        """{input: (Concat output, its first block there)} for the Concat inputs a member makes, that
        only the Concat reads after it is made (once), and that are not a Concat's output themselves:
        their producer writes them straight into the output's blocks."""
        from lite.kernels.fast.blocks import blocks

        made = {m.out: index for index, m in enumerate(self.members)}
        joins = {m.out for m in self.members if m.joined is not None}
        slots: dict[Tensor, tuple[Tensor, int]] = {}
        for index, m in enumerate(self.members):
            first = 0
            for t in m.joined or ():
                if made.get(t, index) < index and last[t] == index and m.joined.count(t) == 1 and t not in joins:
                    slots[t] = m.out, first
                first += blocks(t.shape[1])
        return slots

    def _dense_plans(self) -> dict[Kernel, tuple]:
        """Each dense member's plan at the current shapes (``BlockedWinogradPlan`` or
        ``BlockedDirectPlan``), with its two scratch arrays (Winograd's transformed input and
        products, or the padded input and last tile's sums): views of one scratch array that every
        dense member shares (they run one at a time), in the model's workspace. Where Winograd's
        scratch would pass ``Context.memory_limit`` and the direct kernel's would not, every dense
        member runs direct."""
        plans = self._member_plans(winograd=True)
        if not plans:
            return {}
        limit, sizes = self.parts[0].workspace.limit, _scratch_sizes(plans)
        if limit is not None and max(map(sum, sizes.values())) * 4 > limit:
            plans = self._member_plans(winograd=False)  # NOTE: Winograd's planes outweigh the padded input
            sizes = _scratch_sizes(plans)
        _warm_plans(plans.values(), self.threads.crew() is not None)
        scratch = self.parts[0].workspace.array((max(map(sum, sizes.values())),), np.float32, DENSE_SLOT)
        return {kernel: (plan, scratch[:sizes[kernel][0]].reshape(plan.block_scratch[0]),
                         scratch[sizes[kernel][0]:sum(sizes[kernel])].reshape(plan.block_scratch[1]))
                for kernel, plan in plans.items()}

    def _member_plans(self, winograd: bool) -> dict[Kernel, object]:
        """The plan of each dense member: Winograd where it runs the member (and ``winograd``), else direct."""
        from lite.kernels.fast.blocked_direct import BlockedDirectPlan

        plans = {}
        for m in self.members:
            if m.direct:
                weight = tuple(m.conv.inputs[1].shape)
                begins, ends, sizes = m.conv.geometry(tuple(m.x.shape), weight)
                plans[m.kernel] = (winograd and _winograd_plan(m, begins, sizes)) or BlockedDirectPlan(
                    Geometry(tuple(m.x.shape), weight[2:], tuple(m.conv.strides), tuple(m.conv.dilations), begins,
                             ends, sizes), weight[0], m.narrow, weight[1] if m.grouped else 0)
        return plans

    def _plan(self, m: Member) -> list:
        """The calls running member ``m`` on one image's blocks."""
        from lite.kernels.fast import blocked_winograd, blocks

        x, out = self.blocked.get(m.x), self.blocked[m.out]
        if m.joined is not None:
            copies = self._join_copies(m, out)
            return [partial(_copy_all, copies)] if copies else []
        if m.pooled:
            return [self._pool(m, x, out)]
        if m.mapped is not None:
            return [self._mapped(m, x, out)]
        if m.conv is None and m.gate is not None:
            return [partial(blocks.scale_blocks, x, self.blocked[m.gate], out)]
        if m.conv is None:
            return self._squeeze_excite(m, x, out)
        bias = m.conv.bias()
        bias = None if bias is None else bias.data
        _, lo, hi = compiled_terms(None, 1, m.clip, np.dtype(np.float32))
        code, alpha = activation_code(m.activation, np.dtype(np.float32))
        if m.depthwise:
            return [self._depthwise(m, x, out, bias, lo, hi, code, alpha)]
        if m.direct and self._strided_pointwise(m):
            return self._subsampled(m, x, out, bias, lo, hi, code, alpha)
        if m.direct and isinstance(self.dense[m.kernel][0], blocked_winograd.BlockedWinogradPlan):
            return self._winograd(m, x, out, bias, lo, hi, code, alpha)
        if m.direct:
            return self._dense(m, x, out, bias, lo, hi, code, alpha)
        return self._pointwise(m, x, out, bias, lo, hi, code, alpha)

    def _join_copies(self, m: Member, out: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(input blocks, their place in ``out``) for the inputs of Concat member ``m`` that their
        producer did not write in place (``_join_slots``): the blocks one after the other."""
        copies, first = [], 0
        for t in m.joined:
            part = self.blocked[t]
            target = out[first:first + part.shape[0]]
            if part.ctypes.data != target.ctypes.data:
                copies.append((part, target))
            first += part.shape[0]
        return copies

    def _pointwise(self, m: Member, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None, lo, hi, code: int,
                   alpha) -> list:
        """The calls running the 1x1 stride-1 member ``m`` on one image's blocks x (its gate scaling
        the packed weight's rows first), shared out among the model's threads."""
        from lite.kernels.fast import blocks

        panels = self._pack(m, "arranged for blocks.pointwise", lambda source: blocks.pack_pointwise(
            source.reshape(m.conv.inputs[1].shape), None)[0])
        shift = blocks.padded_bias(bias, out.shape[0])
        steps = []
        if m.gate is not None:
            panels = self._gated_panels(panels, self.blocked[m.gate], steps)
        residual = blocks.NO_RESIDUAL if m.residual is None else self.blocked[m.residual]
        terms = (x, panels, shift, lo, hi, code, alpha, residual, out, m.conv.inputs[1].shape[0])
        product = self.threads.crew_loop(blocks.units(x.shape[1], out.shape[0]),
                                         lambda _index, first, last: partial(blocks.pointwise, *terms, first, last),
                                         lambda bounds: blocks.crew_jobs(*terms, bounds))
        return [*steps, product]

    def _gated_panels(self, panels: np.ndarray, gate: np.ndarray, steps: list) -> np.ndarray:
        """The packed weight ``panels`` with each row scaled by its input channel's ``gate`` (the
        gated input's 1x1 convolution): the step scaling them, shared out among the model's
        threads where the weight is large, goes in ``steps``; returns the scaled copy it writes."""
        from lite.kernels.fast import blocks

        scaled = np.empty_like(panels)
        if panels.size < SHARED_WEIGHTS:
            steps.append(partial(blocks.scale_panels, panels, gate, scaled, 0, panels.shape[1]))
            return scaled
        steps.append(self.threads.crew_loop(
            panels.shape[1], lambda _index, a, b: partial(blocks.scale_panels, panels, gate, scaled, a, b),
            lambda bounds: blocks.scale_panels_jobs(panels, gate, scaled, bounds)))
        return scaled

    def _squeeze_excite(self, m: Member, x: np.ndarray, out: np.ndarray) -> list:
        """The calls running gate member ``m`` on one image's blocks: the channel means, then each of
        its two products shared out among the model's threads (their weights are read once a
        predict, from memory: two cores read them faster); one call where they are small."""
        from lite.kernels.fast import blocks, gate

        m.kernel.resize()  # NOTE: the gate's terms and scratch
        first, second = m.kernel.terms[:7], m.kernel.terms[7:]
        pooled, hidden, gated = m.kernel.pooled, m.kernel.hidden, out.reshape(-1)[:second[0].shape[1]]
        if first[0].size < SHARED_WEIGHTS:
            return [partial(blocks.squeeze_excite, x, *first, *second, pooled, hidden, out)]
        loop = self.threads.crew_loop
        return [partial(blocks.channel_means, x, pooled, out),
                loop(hidden.size, lambda _index, a, b: partial(gate.hidden_rows, pooled, *first, hidden, a, b),
                     lambda bounds: gate.product_jobs(False, *first, pooled, hidden, bounds)),
                loop(gated.size, lambda _index, a, b: partial(gate.gated_run, hidden, *second, gated, a, b),
                     lambda bounds: gate.product_jobs(True, *second, hidden, gated, bounds))]

    def _strided_pointwise(self, m: Member) -> bool:
        """Whether dense member ``m`` is an unpadded 1x1 convolution with strides (a ResNet's
        downsampling shortcut) whose output plane has at least ROWS positions."""
        from lite.kernels.fast.tile import ROWS

        weight = tuple(m.conv.inputs[1].shape)
        begins, ends, sizes = m.conv.geometry(tuple(m.x.shape), weight)
        return (weight[2:] == (1, 1) and not m.narrow and not m.grouped and not any(begins) and not any(ends)
                and tuple(m.conv.dilations) == (1, 1) and sizes[0] * sizes[1] >= ROWS)

    def _subsampled(self, m: Member, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None, lo, hi, code: int,
                    alpha) -> list:
        """The calls running strided 1x1 member ``m``: the positions it reads gathered into the
        dense members' scratch (``blocks.subsample``), then the stride-1 1x1 kernel on them (it
        reads its input in place, where the dense kernel reads each term through an offset)."""
        from lite.kernels.fast import blocks

        padded = self.dense[m.kernel][1]
        (oh, ow), (sh, sw), w = m.conv.geometry(tuple(m.x.shape), tuple(m.conv.inputs[1].shape))[2], \
            tuple(m.conv.strides), m.x.shape[3]
        compact = padded.reshape(-1)[:x.shape[0] * oh * ow * blocks.LANES].reshape(x.shape[0], oh * ow, blocks.LANES)
        gather = self.threads.crew_loop(
            x.shape[0], lambda _index, first, last: partial(blocks.subsample, x, w, sh, sw, compact, ow, first, last),
            lambda bounds: blocks.subsample_jobs(x, w, sh, sw, compact, ow, bounds))
        return [gather, *self._pointwise(m, compact, out, bias, lo, hi, code, alpha)]

    def _pack(self, m: Member, name: str, make: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``_packed`` for member ``m``, then ``packed_hook`` (if set) on its weight."""
        packed = _packed(m.conv, name, make)
        if self.packed_hook is not None:
            self.packed_hook(m.conv.inputs[1])
        return packed

    def _dense(self, m: Member, x: np.ndarray | None, out: np.ndarray, bias: np.ndarray | None, lo, hi, code: int,
               alpha) -> list:
        """The calls running dense or grouped member ``m`` on one image's blocks: its input into the
        padded blocks (a narrow member's from NCHW, even where another member reads x in blocks),
        then the products into its output's blocks, each tile with bias, residual, clip and
        activation; each shared out among the model's threads."""
        from lite.kernels.fast import blocked_direct, blocks

        plan, padded, tail = self.dense[m.kernel]
        shape = tuple(m.conv.inputs[1].shape)
        form = ", narrow" if m.narrow else ", grouped" if m.grouped else ""
        panels = self._pack(m, f"arranged for {type(plan).__name__}{form}",
                            lambda source: np.require(plan.arrange(source.reshape(shape)), requirements=["C", "W"]))
        residual = blocks.NO_RESIDUAL if m.residual is None else self.blocked[m.residual]
        terms = (panels, padded, out, tail, blocks.padded_bias(bias, out.shape[0]), lo, hi, code, alpha)
        loop = self.threads.crew_loop
        return [
            self._narrow_fill(plan, m.x, padded) if m.narrow else
            loop(x.shape[0], lambda _index, first, last: partial(plan.refill, x, padded, first, last),
                 lambda bounds: blocked_direct.refill_jobs(plan, x, padded, bounds)),
            loop(plan.block_units, lambda _index, first, last: partial(plan.block_products, *terms, first, last,
                                                                       residual),
                 lambda bounds: blocked_direct.block_products_jobs(plan, *terms, residual, bounds)),
        ]

    def _winograd(self, m: Member, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None, lo, hi, code: int,
                  alpha) -> list:
        """The calls running 3x3 stride-1 member ``m`` by Winograd on one image's blocks
        (``lite.kernels.fast.blocked_winograd``): the input transform, the 36 products, the
        output transform with bias, residual, clip and activation; each shared out among the
        model's threads."""
        from lite.kernels.fast import blocked_winograd, blocks

        plan, v, products = self.dense[m.kernel]
        shape = tuple(m.conv.inputs[1].shape)
        size = plan.window - 2
        panels = self._pack(m, f"arranged for BlockedWinogradPlan, F({size}x{size}, 3x3)",
                            lambda source: blocked_winograd.arrange(source.reshape(shape), plan.window))
        residual = blocks.NO_RESIDUAL if m.residual is None else self.blocked[m.residual]
        shift = blocks.padded_bias(bias, out.shape[0])
        loop, counts = self.threads.crew_loop, (plan.input_units, plan.product_units, plan.output_units)
        jobs = partial(blocked_winograd.crew_jobs, plan, x, v, panels, shift, products, residual, lo, hi, code, alpha,
                       out)
        calls = (partial(blocked_winograd.input_transform, *plan.input_terms(x, v)),
                 partial(blocked_winograd.products, *plan.product_terms(v, panels, products)),
                 partial(blocked_winograd.output_transform, *plan.output_terms(products, shift, residual, lo, hi, code,
                                                                               alpha, out)))
        return [loop(count, lambda _index, first, last, call=call: partial(call, first, last),
                     lambda bounds, step=step: jobs(step, bounds))
                for step, (count, call) in enumerate(zip(counts, calls, strict=True))]

    def _narrow_fill(self, plan, x: Tensor, padded: np.ndarray) -> Callable[[], None]:
        """The call filling a narrow member's padded input from the current image of x (NCHW), by
        rows shared out among the model's threads; x's array is read at each call (a graph input's
        may be the caller's own, a new one each predict)."""
        from lite.kernels.fast import blocked_direct

        crew_jobs: list = []

        def jobs(bounds: list[tuple[int, int]]):
            crew_jobs.append(blocked_direct.fill_rows_jobs(plan, padded, bounds))
            return crew_jobs[-1]

        def piece(_index: int, first: int, last: int) -> Callable[[], None]:
            return lambda: plan.fill_rows(np.ascontiguousarray(x.data), self._image_of(x), padded, first, last)

        step = self.threads.crew_loop(plan.padded_rows, piece, jobs)

        def fill() -> None:
            for made in crew_jobs:
                blocked_direct.aim_fill_rows(made, np.ascontiguousarray(x.data), self._image_of(x))
            step()
        return fill

    def _image_of(self, x: Tensor) -> int:
        """The image of x the members run on (one image may serve all)."""
        return min(self.image, x.shape[0] - 1)

    def _mapped(self, m: Member, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        """The call running the element-wise member ``m`` on one image's blocks, its blocks shared
        out among the model's threads."""
        from lite.kernels.fast import blocks

        multiplier, offset = (blocks.padded_bias(a, x.shape[0]) for a in m.mapped)
        _, lo, hi = compiled_terms(None, 1, m.clip, np.dtype(np.float32))
        terms = (x, multiplier, offset, lo, hi, *activation_code(m.activation, np.dtype(np.float32)))
        return self.threads.crew_loop(x.shape[0], lambda _index, first, last: partial(blocks.affine, *terms, out,
                                                                                      first, last),
                                      lambda bounds: blocks.affine_jobs(*terms, out, bounds))

    def _pool(self, m: Member, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        """The call running the pool of member ``m`` on one image's blocks, its output rows shared
        out among the model's threads."""
        from lite.kernels.fast import blocks

        (h, w), (oh, ow) = m.x.shape[2:], m.out.shape[2:]
        scale = blocks.NO_SCALE
        if m.kernel.is_global:  # NOTE: one window, the whole plane
            window = (h, w, 1, 1, 0, 0)
            if m.kernel.type == "AvgPoolFusion":
                scale = np.full(1, 1 / (h * w), np.float32)
        else:
            begins, _, _ = m.kernel.geometry(tuple(m.x.shape))
            window = (*m.kernel.kernel_size, *m.kernel.strides, *begins)
            if m.kernel.type == "AvgPoolFusion":
                m.kernel.resize()  # NOTE: its divisors
                scale = np.broadcast_to(np.asarray(m.kernel.scale, np.float32), (oh, ow)).ravel().copy()
        return self.threads.crew_loop(oh, lambda _index, first, last: partial(blocks.pool, x, out, h, w, *window, ow,
                                                                              scale, first, last),
                                      lambda bounds: blocks.pool_jobs(x, out, h, w, oh, ow, window, scale, bounds))

    def _depthwise(self, m: Member, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None, lo, hi, code: int,
                   alpha) -> Callable[[], None]:
        """The call running the depthwise convolution of member ``m`` on one image's blocks."""
        from lite.kernels.fast import blocked_depthwise, blocks

        weight = m.conv.inputs[1].data
        w, shift = blocked_depthwise.arrange(weight, bias, out.shape[0])
        (_, _, h, wd), (oh, ow) = m.x.shape, m.out.shape[2:]
        begins, _, _ = m.conv.geometry(tuple(m.x.shape), tuple(weight.shape))
        geometry = (*weight.shape[2:], *m.conv.strides, *begins, *m.conv.dilations)
        planes = (x.reshape(x.shape[0], h, wd, -1), w, shift, out.reshape(out.shape[0], oh, ow, -1))
        count = out.shape[0]
        by_rows = self.threads.loop_pieces(count) < self.threads.loop_pieces(oh)  # NOTE: few blocks: split the rows

        def piece(_index: int, first: int, last: int) -> Callable[[], None]:
            ranges = (0, count, first, last) if by_rows else (first, last, 0, oh)
            return partial(blocked_depthwise.depthwise, *planes, *geometry, lo, hi, code, alpha, *ranges)

        return self.threads.crew_loop(oh if by_rows else count, piece,
                                      lambda bounds: blocks.depthwise_jobs(*planes, geometry, lo, hi, code, alpha,
                                                                           bounds, by_rows))

    def packed_constants(self) -> list[Tensor]:
        """The members' constant weights: the chain reads them only as it packed them (where the
        members run as their own kernels, as those do)."""
        if self.fallback:
            return [t for m in self.members for t in m.kernel.packed_constants()]
        return [w for m in self.members if m.conv is not None and (w := m.conv.inputs[1]).is_const]

    def unfuse(self) -> None:
        """Gives each member its own state back (the build may not fuse after all)."""
        for m in self.members:
            unfuse = getattr(m.kernel, "unfuse", None)
            if unfuse is not None:
                unfuse()

    def execute(self, profile: dict[Kernel, float] | None = None) -> None:
        """Runs the members; with ``profile``, adds each member's seconds there (its layout changes
        included), as ``lite.kernel.charge`` adds a kernel's."""
        clock = _Clock(profile)
        if self.fallback:
            for m in self.members:
                for kernel in m.kernels:
                    kernel.execute()
                clock.charge(m.kernel)
            return
        from lite.kernels.fast.blocks import from_blocks, to_blocks

        leaving = self.outputs
        for image in range(self.members[0].x.shape[0]):
            self.image = image
            for t in self.converted:
                to_blocks(t.data, min(image, t.shape[0] - 1), self.blocked[t])  # NOTE: one image may serve all
            for m, steps in zip(self.members, self.steps, strict=True):
                for step in steps:
                    step()
                if m.out in leaving:
                    from_blocks(self.blocked[m.out], image, m.out.data)
                clock.charge(m.kernel)


def _winograd_plan(m: Member, begins: tuple[int, ...], sizes: tuple[int, ...]):
    """A ``BlockedWinogradPlan`` for dense member ``m`` where Winograd runs it (``blocked_winograd.fits``
    and ``worth_winograd``), else None."""
    from lite.kernels.fast import blocked_winograd

    weight = tuple(m.conv.inputs[1].shape)
    if m.narrow or m.grouped or not worth_winograd(weight[1], weight[0]) or not blocked_winograd.fits(
            weight[2:], tuple(m.conv.strides), tuple(m.conv.dilations), tuple(begins), tuple(sizes)):
        return None
    return blocked_winograd.BlockedWinogradPlan(weight[1], tuple(m.x.shape[2:]), weight[0], tuple(begins),
                                                tuple(sizes))


def worth_winograd(channels: int, out_channels: int) -> bool:
    """Whether a 3x3 stride-1 layer Winograd can run has channels enough in and out for it to beat
    the blocked direct kernel (the transforms cost as much per channel as a few terms)."""
    return min(channels, out_channels) >= WINOGRAD_CHANNELS


def _scratch_sizes(plans: dict[Kernel, object]) -> dict[Kernel, list[int]]:
    """The floats of each dense member plan's two scratch arrays (they share the largest plan's sum)."""
    return {kernel: [math.prod(shape) for shape in plan.block_scratch] for kernel, plan in plans.items()}


def _warm_plans(plans, crew: bool) -> None:
    """Compiles the kernels the dense members' plans run (and their crew jobs)."""
    from lite.kernels.fast import blocked_winograd
    from lite.kernels.fast.blocked_direct import BlockedDirectPlan, block_products_job, refill_job
    from lite.kernels.fast.crew import warm

    direct = [plan for plan in plans if isinstance(plan, BlockedDirectPlan)]
    if direct:
        direct[0].warm_blocks()
        if crew:
            warm(refill_job, block_products_job)
    if len(direct) < len(plans):
        blocked_winograd.warm()
        if crew:
            warm(blocked_winograd.input_job, blocked_winograd.products_job, blocked_winograd.output_job)


def _blocked_reads(m: Member) -> list[Tensor]:
    """The tensors member ``m`` reads in channel blocks (a narrow member reads its input in NCHW)."""
    return [] if m.narrow else m.reads


def _copy_all(copies: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Copies each source into its target (a Concat's inputs into their blocks of its output)."""
    for source, target in copies:
        target[...] = source


def _packed(conv: Kernel, name: str, make: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The chain's packed weight of ``conv``, kept in its ``derived`` (across resizes, and shared
    with its own plan where that packs the same way); the other packed forms of the weight that the
    convolution's own plans made go (the chain reads only this one)."""
    derived = conv.derived
    derived.made = {key: made for key, made in derived.made.items() if key == name}  # NOTE: before packing: one copy
    conv.steps, conv.steps_key = [], None  # NOTE: the kernel's own steps held its plan's packed weight
    return derived.get(name, conv.inputs[1].data if conv.weights is None else conv.weights, make)


class _Offsets:
    """Offsets in one scratch array: ``take`` reuses the smallest free span that fits, else grows it."""

    def __init__(self):
        self.free: list[tuple[int, int]] = []  # (offset, floats) of the buffers free again
        self.total = 0

    def take(self, size: int) -> tuple[int, int]:
        fitting = [i for i, (_, floats) in enumerate(self.free) if floats >= size]
        if fitting:
            return self.free.pop(min(fitting, key=lambda i: self.free[i][1]))
        self.total += size
        return self.total - size, size


class _Clock:
    """Charges each member's seconds, since the last charge, to a profile (nothing without one)."""

    def __init__(self, profile: dict[Kernel, float] | None):
        self.profile, self.last = profile, time.perf_counter()

    def charge(self, kernel: Kernel) -> None:
        if self.profile is not None:
            now = time.perf_counter()
            charge(self.profile, kernel, now - self.last)
            self.last = now
