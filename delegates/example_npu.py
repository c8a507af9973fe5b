"""An example custom-hardware delegate: a simulated NPU, written the way a vendor would write one.

Read this file as a tutorial. It uses nothing but the public API (``import lite``) and numpy,
so it is exactly what a hardware vendor can write outside the Delite source tree. Where a
real delegate would call its driver, this one runs numpy code that behaves like a typical
mobile NPU:

- it works in **NHWC** layout (channels last), while Delite models are NCHW;
- it stores every activation in **float16** and accumulates products in float32, so its
  results match float32 references to about 1e-3 (relative), not bit for bit;
- it runs a **subset of ops**: convolutions (regular, grouped, depthwise, with a fused
  RELU/RELU6), additions, a few activations, pools and channel concatenation. Everything
  else (fully connected layers, reshapes, softmax, ...) stays on Delite's native CPU
  kernels, so a whole network runs *partly* delegated.

``ExampleNPUDelegate(precision="int8")`` is the same NPU in integers, as int8 NPUs (Arm
Ethos-U, Edge TPU, Hexagon HTP) run quantized models: it takes quantized ops only (int8 NHWC
activations with one scale per tensor, symmetric int8 weights per output channel, int32
biases), accumulates in int32 and requantizes per channel; every float op stays native. The
section "int8 mode" below reads each op's scales and zero points (``tensor.quant_params``).

Usage::

    import lite
    from lite.delegates.example_npu import ExampleNPUDelegate

    model = lite.Model()
    model.build_from_file("mobilenet_v2.lite", context=lite.Context(delegates=[ExampleNPUDelegate()]))
    for row in model.partition_report():      # which node runs where, and why not on the NPU
        print(row.node, row.op_type, row.runs_on, row.reason)

The steps, in the order Delite calls them
-----------------------------------------

1. ``ExampleNPUDelegate.init()`` -- open the device. Runs once per ``Model.build``, before
   anything else. Raise ``lite.NotSupportedError`` to decline (no device, driver too old,
   switched off): the model then builds and runs without this delegate. Here the
   environment variable ``DELITE_EXAMPLE_NPU=off`` plays the missing device.
2. ``ExampleNPUDelegate.is_supported(kernel, primitive)`` -- for every native kernel, in
   topological order: can the NPU run this op, with these attributes and these tensors?
   Say ``True``, or return a reason string: it is shown in ``Model.partition_report()``,
   which is the first thing a user reads when a model is slower than expected.
3. ``ExampleNPUDelegate.create_graph_kernel(kernels, inputs, outputs)`` -- ``SimpleDelegate``
   groups supported kernels into partitions (runs of at least ``min_nodes_per_partition``
   kernels) and asks for one ``lite.Kernel`` per partition. This is the place to build the
   device graph; here it compiles each kernel into an ``NPUOp``. Nothing heavy happens
   yet: a graph kernel may still be dropped (per-partition fallback).
4. ``NPUGraphKernel.prepare()`` -- once, at the end of ``Model.build``: convert and upload
   the weights. After every ``prepare()`` the model frees constant data that no kernel
   lists among its inputs, so this is the last chance to copy them.
5. ``NPUGraphKernel.resize()`` -- after ``Model.resize`` (or a predict with new input
   shapes): the runtime has already set the new shapes on every tensor; re-plan buffers.
6. ``NPUGraphKernel.execute()`` -- in every ``Model.predict``: convert each input from NCHW
   float32 to NHWC float16, run the ops on the device, convert each output back into the
   array the runtime preallocated.

Ahead of time (optional): ``save_graph_kernel`` and ``load_graph_kernel`` let ``lite-convert
model.onnx -o model.lite --delegate example_npu`` store each partition's converted weights (step 4's
work) in the ``.lite`` file, in ``lite.blob``'s layout; a build on the device then loads them
instead of converting. A real NPU delegate would store its compiled device program there too.

See docs/delegates/example_npu.md for what to replace with real device calls.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import lite
from lite.blob import pack, unpack
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS
from lite.ops.geometry import output_size, per_axis, window_counts, window_pads
from lite.ops.quant import activation_bounds, requantize_multiplier

ENV_SWITCH = "DELITE_EXAMPLE_NPU"
OFF_VALUES = ("off", "0", "false", "no")
BLOB_TARGET = "example-npu/fp16-nhwc/1"  # what saved partitions are built for (bump when their layout changes)
NPU_DTYPE = np.float16  # how the NPU stores activations and weights
ACC_DTYPE = np.float32  # how its multiply-accumulate units add up products

Read = Callable[[lite.Tensor], np.ndarray]  # a tensor of the partition -> its NHWC float16 buffer


# ---- layouts: Delite tensors are NCHW float32, the NPU's are NHWC float16 -----------------

def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The NHWC shape of an NCHW shape."""
    n, c, h, w = shape
    return (n, h, w, c)


def to_device(x: np.ndarray, buffer: np.ndarray) -> None:
    """NCHW float32 -> NHWC float16, into ``buffer`` (a real NPU: a DMA with a layout transform)."""
    np.copyto(buffer, x.transpose(0, 2, 3, 1), casting="same_kind")


def to_host(buffer: np.ndarray, tensor: lite.Tensor) -> None:
    """NHWC float16 -> NCHW float32, into the tensor's preallocated array."""
    nchw = buffer.transpose(0, 3, 1, 2)
    data = tensor.data
    if data is not None and data.shape == nchw.shape and data.flags.writeable:
        np.copyto(data, nchw)
    else:  # NOTE: the runtime preallocates outputs; this keeps a graph kernel correct if it did not.
        tensor.set_data_from_numpy(nchw.astype(np.float32))


def device_constant(data: np.ndarray) -> np.ndarray:
    """A 4-D NCHW float32 constant as the NPU keeps it: NHWC float16, our own copy."""
    return np.ascontiguousarray(data.transpose(0, 2, 3, 1), dtype=NPU_DTYPE)


# ---- the NPU's activation unit (in place, on float32 accumulators) ---------------------------

def _hard_swish(x: np.ndarray, attrs: Mapping[str, Any]) -> None:
    np.multiply(x, np.clip(x / 6 + 0.5, 0, 1), out=x)


def _sigmoid(x: np.ndarray, attrs: Mapping[str, Any]) -> None:
    np.multiply(x, 0.5, out=x)  # sigmoid(x) = (1 + tanh(x / 2)) / 2: no overflow for any x
    np.tanh(x, out=x)
    np.add(x, 1, out=x)
    np.multiply(x, 0.5, out=x)


Activate = Callable[[np.ndarray, Mapping[str, Any]], None]


def _fused(low: float, high: float) -> Activate:
    """A fused activation: a clip (its bounds are ``lite.ops.activation.FUSED_CLIPS``)."""
    return lambda x, attrs: np.clip(x, low, high, out=x)


ACTIVATIONS: dict[str, Activate] = {
    "NO_ACTIVATION": lambda x, attrs: None,
    **{kind: _fused(*bounds) for kind, bounds in FUSED_CLIPS.items()},
    "CLIP": lambda x, attrs: np.clip(x, attrs["min_val"], attrs["max_val"], out=x),
    "HARD_SWISH": _hard_swish,
    "SIGMOID": _sigmoid,
}


# ---- sliding windows (convolutions and pools) --------------------------------------------

@dataclass(frozen=True)
class Window:
    """Where a convolution or pool reads for one input size: kernel, strides, pads, output size.

    ``pads`` is (top, left, bottom, right), the order of ``pad_list`` in schema/ops.fbs.
    """

    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    out: tuple[int, int]

    @classmethod
    def plan(cls, attrs: Mapping[str, Any], size: tuple[int, int], kernel: tuple[int, int],
             strides: tuple[int, int]) -> Window:
        """The window for input (H, W) ``size``; output sizes round down (FLOOR), no dilation."""
        begins, ends = window_pads(attrs.get("pad_mode", "PAD"), attrs.get("pad_list"), size, kernel, strides, (1, 1))
        out = tuple(output_size(n, k, s, 1, b, e) for n, k, s, b, e in zip(size, kernel, strides, begins, ends,
                                                                          strict=True))
        return cls(kernel, strides, (*begins, *ends), out)

    def buffer(self, shape: tuple[int, ...], fill: float, dtype: type = ACC_DTYPE) -> np.ndarray:
        """A float32 (or ``dtype``) buffer for the padded NHWC input; the pads keep ``fill`` for good."""
        n, h, w, c = shape
        top, left, bottom, right = self.pads
        return np.full((n, h + top + bottom, w + left + right, c), fill, dtype)

    def inside(self, buffer: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """The part of a padded ``buffer`` that holds an input of (H, W) ``size``."""
        top, left = self.pads[:2]
        return buffer[:, top:top + size[0], left:left + size[1]]

    def load(self, x: np.ndarray, buffer: np.ndarray) -> np.ndarray:
        """Copies ``x`` inside the pads of ``buffer`` (widening float16 to float32)."""
        top, left = self.pads[:2]
        buffer[:, top:top + x.shape[1], left:left + x.shape[2]] = x
        return buffer

    def taps(self, padded: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """(i, j, view): for each kernel tap, the (N, OH, OW, C) inputs it meets, as a strided view."""
        (kh, kw), (sh, sw), (oh, ow) = self.kernel, self.strides, self.out
        for i in range(kh):
            for j in range(kw):
                yield i, j, padded[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]

    @property
    def pointwise(self) -> bool:
        """A 1x1 window, stride 1, no pads: the input itself is the im2col matrix."""
        return self.kernel == (1, 1) and self.strides == (1, 1) and not any(self.pads)


# ---- the NPU's ops: one class per op type, each checks, loads, plans and runs itself ----------

class NPUOp:
    """One op of a partition, compiled for the NPU.

    ``check`` says why the NPU cannot run an op (None when it can); ``load`` takes the op's
    constants (in prepare); ``plan`` sizes buffers for the current shapes (in resize);
    ``run`` reads NHWC float16 inputs and writes the NHWC float16 ``out`` buffer.
    """

    operand_count: int | None = None  # inputs that are activations (None: all of them)
    fixed_point = False  # int8 mode: requantize with FixedPoint multipliers (else in float32, as Delite)

    def __init__(self, kernel: lite.Kernel, primitive: lite.Primitive):
        self.name = kernel.name
        self.attrs = primitive.attrs
        self.operands = [t for t in kernel.inputs[:self.operand_count] if t is not None]
        self.output = kernel.outputs[0]
        self.consts: dict[lite.Tensor, np.ndarray] = {}

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        return None

    def load(self) -> None:
        for tensor in self.operands:
            if tensor.is_const:
                self.consts[tensor] = device_constant(tensor.data)

    def saved(self) -> dict[str, np.ndarray]:
        """What ``load`` made, by name, for a blob (ahead of time)."""
        return {f"const{i}": self.consts[t] for i, t in enumerate(self.operands) if t in self.consts}

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        """``load`` from a blob's arrays, each checked against the shape ``load`` would make."""
        for i, tensor in enumerate(self.operands):
            if tensor.is_const:
                self.consts[tensor] = expect(arrays, f"const{i}", nhwc(tensor.shape))

    def plan(self) -> None:
        pass

    def run(self, read: Read, out: np.ndarray) -> None:
        raise NotImplementedError

    def operand(self, index: int, read: Read) -> np.ndarray:
        tensor = self.operands[index]
        return self.consts[tensor] if tensor in self.consts else read(tensor)

    def finish(self, acc: np.ndarray, out: np.ndarray, activation: str) -> None:
        """Applies the activation to the float32 accumulators and stores them as float16."""
        ACTIVATIONS[activation](acc, self.attrs)
        out[...] = acc.reshape(out.shape)  # NOTE: the store rounds to float16, as the NPU's does


class Conv(NPUOp):
    """Conv2DFusion: im2col + one GEMM per group in NHWC; depthwise as a sum over kernel taps.

    Weights become float16 in prepare: HWIO per group, (G, KH*KW*C/G, O/G), for the GEMM, and
    (KH, KW, C, multiplier) for depthwise, so each tap is one broadcast multiply over channels.
    """

    operand_count = 1
    mac_dtype: type = ACC_DTYPE  # what the MAC array adds up in

    def __init__(self, kernel: lite.Kernel, primitive: lite.Primitive):
        super().__init__(kernel, primitive)
        self.weight, self.bias_tensor = kernel.inputs[1], (kernel.inputs[2:] or [None])[0]

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        dilation = max(per_axis(attrs.get("dilation")))
        if dilation != 1:
            return f"Conv2DFusion with dilation {dilation}: not supported"
        if any(t is not None and not t.is_const for t in kernel.inputs[1:]):
            return "Conv2DFusion with computed weights: this NPU converts weights once, at prepare"
        if attrs["activation_type"] not in FUSED_ACTIVATIONS:
            return f"Conv2DFusion with fused {attrs['activation_type']}: not supported"
        return None

    def load(self) -> None:
        super().load()
        w = self.weight.data  # (O, C/G, KH, KW), the model's float32 copy: freed after prepare
        out_c, per_group, kh, kw = w.shape
        groups = int(self.attrs["group"])
        self.depthwise = per_group == 1 and groups > 1
        if self.depthwise:
            hwio = w.reshape(groups, out_c // groups, kh, kw).transpose(2, 3, 0, 1)
        else:
            hwio = w.reshape(groups, out_c // groups, per_group, kh, kw).transpose(0, 3, 4, 2, 1)
            hwio = hwio.reshape(groups, kh * kw * per_group, out_c // groups)
        self.weights16 = np.ascontiguousarray(hwio, dtype=NPU_DTYPE)  # what a real NPU would upload
        # NOTE: numpy has no float16 GEMM with float32 accumulation (its float16 matmul is slow and
        # rounds as it goes), so the MAC array is simulated in float32 on the float16 values.
        self.mac_weights = self.weights16.astype(ACC_DTYPE)
        bias = self.bias_tensor.data if self.bias_tensor is not None else np.zeros(out_c, np.float32)
        self.bias = bias.astype(NPU_DTYPE).astype(ACC_DTYPE)
        self.groups, self.kernel = groups, (kh, kw)

    def saved(self) -> dict[str, np.ndarray]:
        return {"weights16": self.weights16, "bias16": self.bias.astype(NPU_DTYPE)}

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        out_c, per_group, kh, kw = self.weight.shape
        groups = int(self.attrs["group"])
        self.depthwise = per_group == 1 and groups > 1
        layout = (kh, kw, groups, out_c // groups) if self.depthwise else (groups, kh * kw * per_group, out_c // groups)
        self.weights16 = expect(arrays, "weights16", layout)
        self.mac_weights = self.weights16.astype(ACC_DTYPE)
        self.bias = expect(arrays, "bias16", (out_c,)).astype(ACC_DTYPE)
        self.groups, self.kernel = groups, (kh, kw)

    def plan(self) -> None:
        shape = nhwc(self.operands[0].shape)
        self.window = Window.plan(self.attrs, shape[1:3], self.kernel, per_axis(self.attrs.get("stride")))
        self.padded = self.window.buffer(shape, 0.0, self.mac_dtype)
        (n, oh, ow), c = (shape[0], *self.window.out), shape[3]
        if not self.depthwise and not self.window.pointwise:
            self.cols = np.empty((n, oh, ow, self.groups, *self.kernel, c // self.groups), self.mac_dtype)

    def run(self, read: Read, out: np.ndarray) -> None:
        x = self.window.load(self.operand(0, read), self.padded)
        acc = self.depthwise_taps(x) if self.depthwise else self.gemm(x)
        acc = acc.reshape(-1, self.bias.size)
        acc += self.bias
        self.finish(acc, out, self.attrs["activation_type"])

    def gemm(self, x: np.ndarray) -> np.ndarray:
        """im2col in NHWC: columns (N*OH*OW, G, KH*KW*C/G), then (G, M, K) @ (G, K, O/G)."""
        cols = x if self.window.pointwise else self.cols
        if not self.window.pointwise:
            for i, j, tap in self.window.taps(x):
                cols[:, :, :, :, i, j] = tap.reshape(*tap.shape[:3], self.groups, -1)
        m = cols.shape[0] * cols.shape[1] * cols.shape[2]
        return self.multiply(cols.reshape(m, self.groups, -1).transpose(1, 0, 2), self.mac_weights).transpose(1, 0, 2)

    @staticmethod
    def multiply(columns: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(G, M, K) @ (G, K, O/G)."""
        return np.matmul(columns, weights)

    def depthwise_taps(self, x: np.ndarray) -> np.ndarray:
        """Sum over the KH*KW taps of tap (N, OH, OW, C, 1) * weight (C, multiplier): no channel loop."""
        acc = product = None
        for i, j, tap in self.window.taps(x):
            if acc is None:
                acc = tap[..., None] * self.mac_weights[i, j]
                product = np.empty_like(acc)
            else:
                np.multiply(tap[..., None], self.mac_weights[i, j], out=product)
                acc += product
        return acc


def expect(arrays: Mapping[str, np.ndarray], name: str, shape: tuple[int, ...],
           dtype: type = NPU_DTYPE) -> np.ndarray:
    """The blob's float16 (or ``dtype``) array ``name``, which must have ``shape`` (a blob is untrusted input)."""
    array = arrays.get(name)
    if array is None or array.dtype != dtype or array.shape != tuple(shape):
        got = "nothing" if array is None else f"{array.dtype.name}{list(array.shape)}"
        raise lite.ModelFormatError(f"example NPU blob: {name} is {got}, expected {np.dtype(dtype).name}{list(shape)}")
    return array


def _per_channel(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] == out[1] and shape[2:] == (1, 1) and shape[0] in (1, out[0])


class Add(NPUOp):
    """AddFusion of two same-shape tensors, or of a tensor and a per-channel (N or 1, C, 1, 1) one."""

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        shapes, out = [t.shape for t in kernel.inputs], kernel.outputs[0].shape
        if len(shapes) != 2 or any(s != out and not _per_channel(s, out) for s in shapes):
            return f"AddFusion of shapes {shapes}: this NPU adds same-shape or per-channel tensors only"
        if attrs["activation_type"] not in FUSED_ACTIVATIONS:
            return f"AddFusion with fused {attrs['activation_type']}: not supported"
        return None

    def run(self, read: Read, out: np.ndarray) -> None:
        acc = np.add(self.operand(0, read), self.operand(1, read), dtype=ACC_DTYPE)
        self.finish(acc, out, self.attrs["activation_type"])


class Activation(NPUOp):
    """Activation: RELU, RELU6, CLIP, HARD_SWISH and SIGMOID."""

    supported = ("RELU", "RELU6", "CLIP", "HARD_SWISH", "SIGMOID")

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        kind = attrs["activation_type"]
        if kind not in cls.supported:
            return f"Activation {kind}: this NPU's activation unit has {', '.join(cls.supported)}"
        return None

    def run(self, read: Read, out: np.ndarray) -> None:
        self.finish(self.operand(0, read).astype(ACC_DTYPE), out, self.attrs["activation_type"])


class Pool(NPUOp):
    """MaxPoolFusion and AvgPoolFusion: windowed (FLOOR rounding) or global."""

    fill = 0.0
    mac_dtype: type = ACC_DTYPE  # what the pooling unit combines in

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        name = kernel.type
        if attrs["is_global"]:
            return None
        if attrs["round_mode"] != "FLOOR":
            return f"{name} with {attrs['round_mode']} rounding: this NPU's pooling unit rounds down only"
        if max(per_axis(attrs.get("dilation"))) != 1:
            return f"{name} with dilation: not supported"
        if not attrs.get("kernel_size"):
            return f"{name} without kernel_size: not supported"
        return None

    def plan(self) -> None:
        if self.attrs["is_global"]:
            return
        shape = nhwc(self.operands[0].shape)
        self.window = Window.plan(self.attrs, shape[1:3], per_axis(self.attrs["kernel_size"]),
                                  per_axis(self.attrs.get("strides")))
        self.padded = self.window.buffer(shape, self.fill, self.mac_dtype)

    def run(self, read: Read, out: np.ndarray) -> None:
        x = self.operand(0, read)
        if self.attrs["is_global"]:
            out[...] = self.global_pool(x)
            return
        taps = (tap for _, _, tap in self.window.taps(self.window.load(x, self.padded)))
        acc = next(taps).copy()
        for tap in taps:
            self.combine(acc, tap)
        self.finish(acc, out, "NO_ACTIVATION")


class MaxPool(Pool):
    """MaxPoolFusion; the pads hold -inf, so they never win."""

    fill = -np.inf

    def combine(self, acc: np.ndarray, tap: np.ndarray) -> None:
        np.maximum(acc, tap, out=acc)

    def global_pool(self, x: np.ndarray) -> np.ndarray:
        return x.max(axis=(1, 2), keepdims=True)


class AvgPool(Pool):
    """AvgPoolFusion; the divisor counts the pads only when count_include_pad is set (ONNX)."""

    def plan(self) -> None:
        super().plan()
        if not self.attrs["is_global"]:
            size = self.operands[0].shape[2:]
            counts = np.multiply.outer(*(self.counts(axis, size[axis]) for axis in (0, 1)))
            self.scale = (1.0 / counts).astype(ACC_DTYPE)[..., None]

    def counts(self, axis: int, size: int) -> np.ndarray:
        """How many positions each output's window averages, along one axis."""
        w = self.window
        return window_counts(size, w.out[axis], w.kernel[axis], w.strides[axis], w.pads[axis], w.pads[axis + 2],
                             bool(self.attrs["count_include_pad"]))

    def combine(self, acc: np.ndarray, tap: np.ndarray) -> None:
        np.add(acc, tap, out=acc)

    def finish(self, acc: np.ndarray, out: np.ndarray, activation: str) -> None:
        super().finish(np.multiply(acc, self.scale, out=acc), out, activation)

    def global_pool(self, x: np.ndarray) -> np.ndarray:
        return x.mean(axis=(1, 2), keepdims=True, dtype=ACC_DTYPE)


class Concat(NPUOp):
    """Concat on the channel axis: axis 1 in NCHW is axis 3 in NHWC."""

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        if any(len(t.shape) != 4 for t in kernel.inputs):
            return "Concat of tensors that are not 4-D: not supported"
        if int(attrs["axis"]) % 4 != 1:
            return f"Concat on axis {attrs['axis']}: this NPU concatenates channels (axis 1) only"
        return None

    def run(self, read: Read, out: np.ndarray) -> None:
        np.concatenate([self.operand(i, read) for i in range(len(self.operands))], axis=3, out=out)


NPU_OPS: dict[str, type[NPUOp]] = {
    "Conv2DFusion": Conv, "AddFusion": Add, "Activation": Activation,
    "MaxPoolFusion": MaxPool, "AvgPoolFusion": AvgPool, "Concat": Concat,
}

WHY_NOT = {  # reasons users see in the partition report for op types the NPU has no kernel for
    "MatMulFusion": "this NPU has no matrix unit",
    "FullConnection": "this NPU has no matrix unit",
    "Reshape": "its result depends on NCHW element order; layout ops stay on the CPU",
    "Flatten": "its result depends on NCHW element order; layout ops stay on the CPU",
    "Softmax": "this NPU has no exponent/sum unit",
}


# ---- the graph kernel: one per partition ----------------------------------------------------

class NPUGraphKernel(lite.Kernel):
    """Runs one partition on the NPU: NCHW float32 at its boundary, NHWC float16 inside.

    Tensors produced inside the partition never reach the runtime: they live in the
    kernel's own NHWC float16 ``buffers`` (keyed by tensor), as they would in NPU memory.

    Args:
        ops: the partition's kernels compiled to ``NPUOp`` s, in topological order.
        inputs: tensors the partition reads from outside it (``DelegateModel.subgraph_inputs``).
        outputs: tensors read after it (``DelegateModel.subgraph_outputs``).
        name: shown in reports and errors.
    """

    device_dtype: type = NPU_DTYPE  # how its buffers hold tensors
    device_shape = staticmethod(nhwc)  # a tensor's shape in those buffers
    upload = staticmethod(to_device)  # model array -> buffer
    download = staticmethod(to_host)  # buffer -> the tensor's array

    def __init__(self, ops: list[NPUOp], inputs: list[lite.Tensor], outputs: list[lite.Tensor], name: str,
                 saved: Mapping[str, np.ndarray] | None = None):
        # NOTE: weights are deliberately not listed among the inputs: prepare() takes its own copies,
        # so the model may free its float32 ones.
        super().__init__(inputs, outputs, name=name)
        self.ops = ops
        self.saved = saved  # converted weights from a blob (ahead of time): prepare() restores instead of converting
        self.buffers: dict[lite.Tensor, np.ndarray] = {}
        self.planned_for: list[tuple[int, ...]] | None = None

    def prepare(self) -> None:
        """Step 4: converts every op's weights to the NPU's float16 layouts; plans if shapes are known."""
        # WHY here and not in create_graph_kernel: prepare runs once per partition that survives
        # the build (a failure here makes Delite fall back to the native kernels for just this
        # partition), and it is the last moment the model's float32 weights exist: after every
        # prepare() the model frees constant data that no kernel lists among its inputs.
        for index, op in enumerate(self.ops):
            if self.saved is None:
                op.load()
            else:
                prefix = f"{index}."
                op.restore({k[len(prefix):]: v for k, v in self.saved.items() if k.startswith(prefix)})
        # WHY resize here: the runtime calls resize() only when shapes change later; a model with
        # static shapes goes straight from prepare() to execute().
        if all(-1 not in t.shape for t in self.inputs):
            self.resize()

    def resize(self) -> None:
        """Step 5: re-plans buffers and windows for the current shapes.

        The runtime has already propagated the new shapes to every tensor, the ones inside the
        partition included, so a real NPU would recompile (or pick a cached program) here.
        """
        tensors = [*self.inputs, *(op.output for op in self.ops)]
        self.buffers = {t: np.empty(self.device_shape(t.shape), self.device_dtype) for t in tensors}
        for op in self.ops:
            op.plan()
        self.planned_for = [t.shape for t in self.inputs]

    def execute(self) -> None:
        """Step 6: NCHW float32 -> NHWC float16, every op on the NPU, NHWC float16 -> NCHW float32."""
        if self.planned_for != [t.shape for t in self.inputs]:
            self.resize()  # NOTE: defensive; the runtime calls resize() before a predict with new shapes
        # WHY convert only at the boundary: native kernels before and after the partition read and
        # write NCHW float32, but inside it every tensor stays in the NPU's layout and precision.
        # Converting per op would cost a transpose and two casts per tensor, which on real hardware
        # is often slower than running the op on the CPU.
        for tensor in self.inputs:
            self.upload(tensor.data, self.buffers[tensor])
        for op in self.ops:
            op.run(self.buffers.__getitem__, self.buffers[op.output])
        for tensor in self.outputs:  # only what is read after the partition (or a model output)
            self.download(self.buffers[tensor], tensor)


# ---- int8 mode: ExampleNPUDelegate(precision="int8") ---------------------------------------
#
# Like Arm's Ethos-U, Google's Edge TPU or Qualcomm's HTP, the NPU also runs quantized models in
# integers. It takes a quantized op (``kernel.quantized``: see docs/delegates/authoring.md) when
# its activations are int8 with one scale and zero point per tensor, its weights int8 with one
# scale per output channel and zero points 0 (symmetric), and its bias int32 in the
# accumulator's units (scale x_scale * w_scale). Products accumulate exactly in int32. What the
# ops mean is Delite's: lite/ops/quant.py.
#
# The requantization unit scales results to the output's units in one of two ways:
# - "float32" (default): as Delite's native int8 kernels and onnxruntime do, a float32 multiply
#   rounded half to even: the NPU's int8 outputs equal Delite's.
# - "fixed_point": as TFLite and Ethos-U do, an int32 mantissa and a shift (``FixedPoint``). A
#   few results per op round the other way (one quantization step); in a deep network such a
#   step propagates, so whole-model outputs can differ by several steps from Delite's.

INT8_BLOB_TARGET = "example-npu/int8-nhwc/1"
PRECISIONS = ("float16", "int8")
REQUANTIZATIONS = ("float32", "fixed_point")
INT8_ONLY = "the NPU runs int8 only in this mode"
USE_QINT8 = "re-quantize the model with activation_type=QuantType.QInt8"
INT8 = np.dtype(np.int8)
MANTISSA_BITS = 31  # the requantization unit's multipliers: int32 mantissas in [2**30, 2**31)
MAX_SHIFT = 62  # acc * mantissa stays within int64
ADD_SHIFT = 20  # the adder aligns both inputs' scales with this many fraction bits (as TFLite's int8 Add)


@dataclass(frozen=True)
class FixedPoint:
    """Positive real multipliers as the requantization unit holds them: ``mantissa * 2**-shift``.

    ``apply(acc)`` is ``(acc * mantissa + 2**(shift - 1)) >> shift`` in int64: one rounding, ties
    upwards (TFLite's single-rounding mode). Delite's native kernels multiply in float32 and
    round ties to even, so the two agree within one quantization step per op.
    """

    mantissa: np.ndarray  # int64 values in [2**30, 2**31)
    shift: np.ndarray  # int64 right shifts in [1, MAX_SHIFT]

    @classmethod
    def of(cls, real: np.ndarray | float) -> FixedPoint:
        """The nearest fixed-point form of each of ``real`` (check ``problem`` first)."""
        fraction, exponent = np.frexp(np.asarray(real, np.float64))  # real = fraction * 2**exponent
        mantissa = np.rint(np.ldexp(fraction, MANTISSA_BITS)).astype(np.int64)
        carry = mantissa >> MANTISSA_BITS  # 1 where the fraction rounded up to 1.0
        return cls(mantissa >> carry, (MANTISSA_BITS - exponent - carry).astype(np.int64))

    @classmethod
    def problem(cls, real: np.ndarray | float) -> str | None:
        """Why the unit cannot hold every one of ``real`` (None when it can)."""
        real = np.asarray(real, np.float64)
        if not np.all(np.isfinite(real) & (real > 0)):
            return "a requantization multiplier that is not a positive number"
        shift = cls.of(real).shift
        if shift.min() < 1 or shift.max() > MAX_SHIFT:
            return (f"requantization multipliers from {real.min():.3g} to {real.max():.3g}: this NPU's "
                    f"requantization unit holds 2**{MANTISSA_BITS - MAX_SHIFT - 1} to 2**{MANTISSA_BITS - 1}")
        return None

    def apply(self, acc: np.ndarray) -> np.ndarray:
        """``round(acc * multiplier)``, in int64."""
        product = acc.astype(np.int64) * self.mantissa
        return (product + (np.int64(1) << (self.shift - 1))) >> self.shift


@dataclass(frozen=True)
class Float32Multiplier:
    """The "float32" requantization unit: ``round_half_even(float32(acc) * multiplier)`` in float32,
    as ``lite.ops.quant.requantize`` defines it."""

    multiplier: np.ndarray  # float32

    def apply(self, acc: np.ndarray) -> np.ndarray:
        return np.rint(acc.astype(np.float32) * self.multiplier)


Scaler = FixedPoint | Float32Multiplier


def scaler(multiplier: np.ndarray | float, fixed_point: bool) -> Scaler:
    """The requantization unit's setting for ``multiplier`` (float32, as lite.ops.quant computes it)."""
    multiplier = np.asarray(multiplier, np.float32)
    return FixedPoint.of(multiplier) if fixed_point else Float32Multiplier(multiplier)


def float32_quantize(real: np.ndarray, y_scale: float) -> np.ndarray:
    """``round_half_even(real / y_scale)`` in float32: the quantize half of Delite's meaning."""
    return np.rint(real.astype(np.float32, copy=False) / np.float32(y_scale))


def scale_and_zero(tensor: lite.Tensor) -> tuple[float, int]:
    """A per-tensor quantized tensor's scale and zero point."""
    params = tensor.quant_params
    return float(params.scale[0]), int(params.zero_point[0]) if params.zero_point.size else 0


def device_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Where the int8 mode keeps a tensor: 4-D in NHWC, other ranks (after a Reshape) as they are."""
    return nhwc(shape) if len(shape) == 4 else tuple(shape)


def to_device_order(x: np.ndarray) -> np.ndarray:
    """A model (NCHW) array as a view in the device's order."""
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


def to_model_order(x: np.ndarray) -> np.ndarray:
    """A device (NHWC) array as a view in the model's order."""
    return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x


def upload_int8(x: np.ndarray, buffer: np.ndarray) -> None:
    """NCHW int8 -> NHWC int8, into ``buffer``."""
    np.copyto(buffer, to_device_order(x))


def download_int8(buffer: np.ndarray, tensor: lite.Tensor) -> None:
    """NHWC int8 -> NCHW int8, into the tensor's preallocated array."""
    data, model = tensor.data, to_model_order(buffer)
    if data is not None and data.shape == model.shape and data.flags.writeable:
        np.copyto(data, model)
    else:
        tensor.set_data_from_numpy(np.ascontiguousarray(model))


def requantize_into(acc: np.ndarray, unit: Scaler, zero_point: int, bounds: tuple[int, int],
                    out: np.ndarray) -> None:
    """``clip(round(acc * multiplier) + zero_point)`` into the int8 ``out`` (the requantization unit)."""
    store(unit.apply(acc), zero_point, bounds, out)


def store(rounded: np.ndarray, zero_point: int, bounds: tuple[int, int], out: np.ndarray) -> None:
    """``clip(rounded + zero_point)`` into the int8 ``out``."""
    out[...] = np.clip(rounded + zero_point, *bounds).reshape(out.shape)


def output_bounds(tensor: lite.Tensor, activation: str = "NO_ACTIVATION") -> tuple[int, int]:
    """The int8 range an op writes into ``tensor``, narrowed by a fused RELU or RELU6."""
    scale, zero_point = scale_and_zero(tensor)
    return activation_bounds(activation, INT8, scale, zero_point, tensor.quant_params.bits)


def activation_problem(tensor: lite.Tensor) -> str | None:
    """Why ``tensor`` is no int8 activation the NPU holds (one scale and zero point, int8)."""
    params, name = tensor.quant_params, tensor.name
    if params is None:
        return f"tensor {name!r} is {tensor.dtype.name} and not quantized; {INT8_ONLY}"
    if tensor.dtype == np.uint8:
        return f"tensor {name!r} is uint8; this NPU takes int8 activations: {USE_QINT8}"
    if tensor.dtype != INT8 or params.bits != 8:
        return f"tensor {name!r} is {params.bits}-bit {tensor.dtype.name}; this NPU takes int8 activations"
    if not params.per_tensor:
        return f"tensor {name!r} has {params.scale.size} scales; this NPU takes one scale per activation tensor"
    return None


def shape_problem(tensor: lite.Tensor, any_rank: bool) -> str | None:
    """Why the NPU cannot hold ``tensor``'s shape (static; 4-D NCHW unless ``any_rank``)."""
    if -1 in tensor.shape:
        return (f"tensor {tensor.name!r} has dynamic shape {list(tensor.shape)}; this NPU compiles for static "
                "shapes (convert with input_shapes=... to fix them)")
    if len(tensor.shape) != 4 and not any_rank:
        return f"{len(tensor.shape)}-D tensor {tensor.name!r}; this NPU works on 4-D images only"
    if len(tensor.shape) == 4 and tensor.format != lite.Format.NCHW:
        return f"tensor {tensor.name!r} is {tensor.format.name}; this delegate expects NCHW"
    return None


def int8_tensor_problem(kernel: lite.Kernel, op: type[NPUOp]) -> str | None:
    """Why the NPU cannot hold a quantized kernel's activations (its inputs, less the weights, and outputs)."""
    any_rank = getattr(op, "any_rank", False)
    for tensor in [t for t in kernel.inputs[:op.operand_count] if t is not None] + kernel.outputs:
        problem = activation_problem(tensor) or (None if tensor.is_const else shape_problem(tensor, any_rank))
        if problem:
            return f"{kernel.type}: {problem}"
    return None


def float_op_reason(kernel: lite.Kernel) -> str:
    """What the partition report says about an op that is not quantized, in int8 mode."""
    why = {
        "QuantizeLinear": "QuantizeLinear turns float32 into integers; the model's float input stays on the CPU",
        "DequantizeLinear": "DequantizeLinear turns integers into float32; the model's float output stays on the CPU",
    }.get(kernel.type, f"{kernel.type} is a float op; quantize the model (onnxruntime.quantization, QuantType.QInt8)")
    return f"{kernel.type}: {INT8_ONLY}: {why}"


def weight_problem(weight: lite.Tensor) -> str | None:
    """Why ``weight`` is not int8, symmetric and quantized per output channel (or per tensor)."""
    params, name = weight.quant_params, weight.name
    if params is None or weight.dtype != INT8 or params.bits != 8:
        return f"weight {name!r} is {weight.dtype.name}; this NPU takes int8 weights"
    if params.block_size:
        return f"weight {name!r} is quantized in blocks of {params.block_size}; this NPU takes one scale per channel"
    if params.zero_point.any():
        return f"weight {name!r} has zero points other than 0; this NPU takes symmetric int8 weights"
    if not params.per_tensor and params.axis != 0:
        return f"weight {name!r} is quantized along axis {params.axis}; this NPU takes one scale per output channel"
    return None


def bias_problem(bias: lite.Tensor | None, x: lite.Tensor, weight: lite.Tensor) -> str | None:
    """Why ``bias`` cannot go into the accumulator as it is (int32, zero points 0, scale x_scale * w_scale)."""
    if bias is None:
        return None
    params = bias.quant_params
    if params is None or bias.dtype != np.int32 or len(bias.shape) != 1:
        return f"bias {bias.name!r} is {bias.dtype.name}{list(bias.shape)}; this NPU adds an int32 vector"
    unit = np.broadcast_to(np.float32(scale_and_zero(x)[0]) * weight.quant_params.scale, bias.shape)
    if params.zero_point.any() or not np.allclose(np.broadcast_to(params.scale, bias.shape), unit, rtol=1e-5, atol=0):
        return f"bias {bias.name!r} is not in units of x_scale * w_scale with zero point 0; this NPU adds it as it is"
    return None


def int8_constants(op: NPUOp) -> None:
    """``load`` of the int8 mode: constant operands in the device's order, int8."""
    for tensor in op.operands:
        if tensor.is_const:
            op.consts[tensor] = np.ascontiguousarray(to_device_order(tensor.data))


def restore_int8_constants(op: NPUOp, arrays: Mapping[str, np.ndarray]) -> None:
    """``restore`` of the int8 mode: constant operands from a blob, each checked."""
    for i, tensor in enumerate(op.operands):
        if tensor.is_const:
            op.consts[tensor] = expect(arrays, f"const{i}", device_shape(tensor.shape), INT8)


class Int8Conv(Conv):
    """Quantized Conv2DFusion: ``(x - x_zero_point) * w`` summed in int32, the int32 bias added, then
    requantized per output channel, clipped to the fused RELU/RELU6's range.

    Weights stay int8, OHWI per group, (G, O/G, KH*KW*C/G), for the GEMM, and (KH, KW, C,
    multiplier) for depthwise; the padded input holds ``x - x_zero_point`` (pads: 0, a real 0).
    """

    mac_dtype = np.int32

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        x, weight, bias, out = kernel.inputs[0], kernel.inputs[1], (kernel.inputs[2:] or [None])[0], kernel.outputs[0]
        problem = Conv.check(kernel, attrs) or weight_problem(weight) or bias_problem(bias, x, weight)
        if problem:
            return problem
        multiplier = requantize_multiplier(scale_and_zero(x)[0], weight.quant_params.scale, scale_and_zero(out)[0])
        return FixedPoint.problem(multiplier)

    def load(self) -> None:
        w = self.weight.data  # (O, C/G, KH, KW) int8, freed after prepare
        out_c, per_group, kh, kw = w.shape
        groups = int(self.attrs["group"])
        if per_group == 1 and groups > 1:
            layout = w.reshape(groups, out_c // groups, kh, kw).transpose(2, 3, 0, 1)
        else:
            layout = w.reshape(groups, out_c // groups, per_group, kh, kw).transpose(0, 1, 3, 4, 2)
            layout = layout.reshape(groups, out_c // groups, kh * kw * per_group)
        self.weights8 = np.ascontiguousarray(layout)  # what a real NPU would upload
        bias = self.bias_tensor.data if self.bias_tensor is not None else np.zeros(out_c, np.int32)
        self.compile(bias.astype(np.int32))

    def compile(self, bias: np.ndarray) -> None:
        """The MAC array's operands and the requantization unit's settings (from the tensors' QuantParams)."""
        out_c, per_group, kh, kw = self.weight.shape
        self.groups, self.kernel = int(self.attrs["group"]), (kh, kw)
        self.depthwise = per_group == 1 and self.groups > 1
        self.mac_weights, self.bias = self.weights8.astype(np.int32), bias
        (x_scale, self.x_zero), (y_scale, self.y_zero) = scale_and_zero(self.operands[0]), scale_and_zero(self.output)
        self.unit = scaler(requantize_multiplier(x_scale, self.weight.quant_params.scale, y_scale), self.fixed_point)
        self.bounds = output_bounds(self.output, self.attrs["activation_type"])

    def saved(self) -> dict[str, np.ndarray]:
        return {"weights8": self.weights8, "bias32": self.bias}

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        out_c, per_group, kh, kw = self.weight.shape
        groups = int(self.attrs["group"])
        depthwise = per_group == 1 and groups > 1
        layout = (kh, kw, groups, out_c // groups) if depthwise else (groups, out_c // groups, kh * kw * per_group)
        self.weights8 = expect(arrays, "weights8", layout, INT8)
        self.compile(expect(arrays, "bias32", (out_c,), np.int32))

    def run(self, read: Read, out: np.ndarray) -> None:
        x = self.operand(0, read)
        np.subtract(x, self.x_zero, out=self.window.inside(self.padded, x.shape[1:3]), dtype=np.int32)
        acc = self.depthwise_taps(self.padded) if self.depthwise else self.gemm(self.padded)
        acc = acc.reshape(-1, self.bias.size) + self.bias
        requantize_into(acc, self.unit, self.y_zero, self.bounds, out)

    @staticmethod
    def multiply(columns: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(G, M, K) times (G, O/G, K) summed over K in int32 (einsum: numpy's integer matmul has no
        fast path)."""
        return np.einsum("gmk,gnk->gmn", columns, weights)


class Int8Add(Add):
    """Quantized AddFusion. "float32": both inputs dequantized and added in float32, the sum
    quantized. "fixed_point", as TFLite's int8 Add: both inputs shifted left by ``ADD_SHIFT`` bits
    and scaled to a common unit (twice the larger input scale), added, then requantized."""

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        multipliers = cls.multipliers(*kernel.inputs, kernel.outputs[0]) if len(kernel.inputs) == 2 else []
        return Add.check(kernel, attrs) or next(filter(None, map(FixedPoint.problem, multipliers)), None)

    @staticmethod
    def multipliers(a: lite.Tensor, b: lite.Tensor, y: lite.Tensor) -> list[float]:
        """The inputs' multipliers to the common unit, then that unit's to the output's."""
        (a, _), (b, _), (y, _) = (scale_and_zero(t) for t in (a, b, y))
        twice = 2.0 * max(a, b)
        return [a / twice, b / twice, twice / ((1 << ADD_SHIFT) * y)]

    def load(self) -> None:
        int8_constants(self)
        self.compile()

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        restore_int8_constants(self, arrays)
        self.compile()

    def compile(self) -> None:
        """The adder's settings, from the tensors' QuantParams."""
        self.scalers = [FixedPoint.of(m) for m in self.multipliers(*self.operands, self.output)]
        self.scales, self.zeros = zip(*(scale_and_zero(t) for t in (*self.operands, self.output)), strict=True)
        self.bounds = output_bounds(self.output, self.attrs["activation_type"])

    def run(self, read: Read, out: np.ndarray) -> None:
        a, b = (self.operand(i, read) for i in (0, 1))
        if self.fixed_point:
            a, b = ((x.astype(np.int64) - self.zeros[i]) << ADD_SHIFT for i, x in enumerate((a, b)))
            requantize_into(self.scalers[0].apply(a) + self.scalers[1].apply(b), self.scalers[2], self.zeros[2],
                            self.bounds, out)
            return
        a, b = ((x.astype(np.float32) - np.float32(self.zeros[i])) * np.float32(self.scales[i])
                for i, x in enumerate((a, b)))
        store(float32_quantize(a + b, self.scales[2]), self.zeros[2], self.bounds, out)


class Int8MaxPool(MaxPool):
    """Quantized MaxPoolFusion: the largest int8 value (the pads hold -128, which never wins), then
    requantized where the output's parameters differ from the input's."""

    fill = np.iinfo(np.int8).min
    mac_dtype = np.int8

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        return Pool.check(kernel, attrs) or FixedPoint.problem(cls.multiplier(kernel.inputs[0], kernel.outputs[0]))

    @staticmethod
    def multiplier(x: lite.Tensor, y: lite.Tensor) -> float:
        return scale_and_zero(x)[0] / scale_and_zero(y)[0]

    def load(self) -> None:
        x, y = self.operands[0], self.output
        self.same = x.quant_params == y.quant_params
        (self.x_scale, self.x_zero), (self.y_scale, self.y_zero) = scale_and_zero(x), scale_and_zero(y)
        self.unit = FixedPoint.of(self.multiplier(x, y))

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.load()

    def finish(self, acc: np.ndarray, out: np.ndarray, activation: str) -> None:
        if self.same:
            out[...] = acc
            return
        offset = acc.astype(np.int32) - self.x_zero
        rounded = (self.unit.apply(offset) if self.fixed_point
                   else float32_quantize(offset.astype(np.float32) * np.float32(self.x_scale), self.y_scale))
        store(rounded, self.y_zero, output_bounds(self.output), out)

    def global_pool(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], 1, 1, x.shape[3]), INT8)
        self.finish(x.max(axis=(1, 2), keepdims=True), out, "NO_ACTIVATION")
        return out


class Int8AvgPool(AvgPool):
    """Quantized AvgPoolFusion: a sum in int32 (the pads hold x's zero point, a real 0), the zero
    points of the window's taps taken off, then divided by each position's count and requantized:
    in float32, or ("fixed_point") with one multiplier per position, x_scale / (y_scale * count)."""

    mac_dtype = np.int32

    def load(self) -> None:
        (self.x_scale, self.x_zero), (self.y_scale, self.y_zero) = (scale_and_zero(t) for t in
                                                                    (self.operands[0], self.output))
        self.fill, self.bounds = self.x_zero, output_bounds(self.output)

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.load()

    def plan(self) -> None:
        Pool.plan(self)
        n, c, h, w = self.operands[0].shape
        if self.attrs["is_global"]:
            counts, taps = np.array(h * w), h * w
        else:
            counts = np.multiply.outer(*(self.counts(axis, (h, w)[axis]) for axis in (0, 1)))[..., None]
            taps = self.window.kernel[0] * self.window.kernel[1]
        self.offset = self.x_zero * taps  # what the window's zero points add to a sum
        self.counts = counts.astype(np.float32)
        self.unit = FixedPoint.of(self.x_scale / (self.y_scale * counts.astype(np.float64)))

    def finish(self, acc: np.ndarray, out: np.ndarray, activation: str) -> None:
        acc = acc - self.offset
        if self.fixed_point:
            requantize_into(acc, self.unit, self.y_zero, self.bounds, out)
            return
        mean = acc.astype(np.float32) * np.float32(self.x_scale) / self.counts
        store(float32_quantize(mean, self.y_scale), self.y_zero, self.bounds, out)

    def global_pool(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], 1, 1, x.shape[3]), INT8)
        self.finish(x.sum(axis=(1, 2), keepdims=True, dtype=np.int32), out, "NO_ACTIVATION")
        return out


def same_params_problem(kernel: lite.Kernel, inputs: list[lite.Tensor]) -> str | None:
    """Why an op that only moves int8 values cannot run as a copy: its tensors' parameters differ."""
    out = kernel.outputs[0]
    for tensor in inputs:
        if tensor.quant_params != out.quant_params:
            return (f"{kernel.type}: input {tensor.name!r} and output {out.name!r} have different scales or zero "
                    "points; this NPU moves int8 values without requantizing")
    return None


class Int8Concat(Concat):
    """Quantized Concat on the channel axis, where every input has the output's parameters: a copy."""

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        return Concat.check(kernel, attrs) or same_params_problem(kernel, kernel.inputs)

    def load(self) -> None:
        int8_constants(self)

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        restore_int8_constants(self, arrays)


class Int8Reshape(NPUOp):
    """Quantized Reshape and Flatten with equal parameters: the NPU's layout unit reads NHWC in
    the model's NCHW element order, and writes the result in the device's order."""

    operand_count = 1  # Reshape's second input is its constant shape
    any_rank = True

    @classmethod
    def check(cls, kernel: lite.Kernel, attrs: Mapping[str, Any]) -> str | None:
        return same_params_problem(kernel, kernel.inputs[:1])

    def load(self) -> None:
        pass

    def restore(self, arrays: Mapping[str, np.ndarray]) -> None:
        pass

    def run(self, read: Read, out: np.ndarray) -> None:
        model = to_model_order(self.operand(0, read)).reshape(self.output.shape)
        out[...] = to_device_order(model)


INT8_OPS: dict[str, type[NPUOp]] = {
    "Conv2DFusion": Int8Conv, "AddFusion": Int8Add, "MaxPoolFusion": Int8MaxPool, "AvgPoolFusion": Int8AvgPool,
    "Concat": Int8Concat, "Reshape": Int8Reshape, "Flatten": Int8Reshape,
}


class Int8GraphKernel(NPUGraphKernel):
    """Runs one partition in the NPU's int8 mode: NCHW int8 at its boundary, NHWC int8 inside."""

    device_dtype = np.int8
    device_shape = staticmethod(device_shape)
    upload = staticmethod(upload_int8)
    download = staticmethod(download_int8)


# ---- the delegate -----------------------------------------------------------------------

class ExampleNPUDelegate(lite.SimpleDelegate):
    """A simulated NPU: NHWC, float16, a subset of ops. See the module docstring for the walk-through.

    Args:
        min_nodes_per_partition: smaller runs of supported ops stay native (each partition
            pays two layout conversions, so tiny ones rarely pay off).
        ops: op types to take, a subset of ``NPU_OPS`` (``INT8_OPS`` in int8 mode; default: all of them).
        precision: ``"float16"`` (float32 models, run in float16) or ``"int8"``: quantized models
            only (int8 activations per tensor, symmetric int8 weights per output channel), run in
            integers; every float op stays native. ``--delegate-option precision=int8`` on the
            command line.
        requantization: int8 mode: ``"float32"`` (a float32 multiply, as Delite's native kernels:
            the same int8 results) or ``"fixed_point"`` (an int32 mantissa and a shift, as TFLite
            and Ethos-U: within one quantization step per op).

    Raises:
        lite.InputError: an unknown ``precision`` or ``requantization``, or ``ops`` names an op type
            the NPU has no kernel for.

    Example:
        >>> import lite
        >>> ctx = lite.Context(delegates=[ExampleNPUDelegate(ops={"Conv2DFusion", "AddFusion"})])
        >>> ctx = lite.Context(delegates=[ExampleNPUDelegate(precision="int8")])
    """

    def __init__(self, min_nodes_per_partition: int = 2, ops: Iterable[str] | None = None,
                 precision: str = "float16", requantization: str = "float32"):
        for name, value, allowed in (("precision", precision, PRECISIONS),
                                     ("requantization", requantization, REQUANTIZATIONS)):
            if value not in allowed:
                raise lite.InputError(f"ExampleNPUDelegate {name} {value!r}: use one of {', '.join(allowed)}")
        self.min_nodes_per_partition = min_nodes_per_partition
        self.precision, self.requantization = precision, requantization
        table = self.op_table()
        self.ops = set(table) if ops is None else set(ops)
        unknown = sorted(self.ops - set(table))
        if unknown:
            mode = " in int8 mode" if self.int8 else ""
            raise lite.InputError(f"ExampleNPUDelegate has no kernel for {unknown}{mode}; it supports {sorted(table)}")
        # NOTE: nothing of a build is kept here: one delegate object may build many models at once,
        # and each model owns the graph kernels made for it (Model.graph_kernels()).

    def init(self) -> None:
        """Step 1: opens the device; raises lite.NotSupportedError when DELITE_EXAMPLE_NPU=off."""
        # A real delegate loads its driver here and queries the chip (version, memory), raising
        # NotSupportedError when either is missing: declining is not an error, the model simply
        # runs on the native kernels (and the build log says why).
        switch = os.environ.get(ENV_SWITCH, "on").strip().lower()
        if switch in OFF_VALUES:
            raise lite.NotSupportedError(f"{ENV_SWITCH}={switch}: the example NPU is switched off")

    @property
    def int8(self) -> bool:
        """Whether the NPU runs in int8 mode (``precision="int8"``)."""
        return self.precision == "int8"

    def op_table(self) -> dict[str, type[NPUOp]]:
        """The op types this mode has kernels for, and their classes."""
        return INT8_OPS if self.int8 else NPU_OPS

    def graph_kernel_class(self) -> type[NPUGraphKernel]:
        return Int8GraphKernel if self.int8 else NPUGraphKernel

    def compile_ops(self, kernels: list[lite.Kernel]) -> list[NPUOp]:
        """One ``NPUOp`` per kernel of a partition, for this mode."""
        table = self.op_table()
        ops = [table[k.type](k, k.primitive) for k in kernels]
        for op in ops:
            op.fixed_point = self.requantization == "fixed_point"
        return ops

    def is_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        """Step 2: True when the NPU can run ``kernel``, else the reason shown in the partition report."""
        # Be specific: "Conv2DFusion with dilation 2: not supported" tells a user what to change
        # in their model; a bare False shows up as "not supported".
        if self.int8:
            return self.int8_supported(kernel, primitive)
        op = primitive.type
        if op not in NPU_OPS:
            return f"{op}: {WHY_NOT.get(op, 'this NPU has no kernel for it')}"
        if op not in self.ops:
            return f"{op}: left out by ExampleNPUDelegate(ops=...)"
        return tensor_problem(kernel) or NPU_OPS[op].check(kernel, primitive.attrs) or True

    def int8_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        """``is_supported`` in int8 mode: quantized ops only, their tensors read by scale and zero point."""
        # A quantized op's tensors carry QuantParams (kernel.quantized); check the activations
        # first, so that a uint8 model says so on every op.
        op = primitive.type
        if not kernel.quantized:
            return float_op_reason(kernel)
        if op not in INT8_OPS:
            problem = activation_problem(kernel.inputs[0])
            return f"{op}: {problem or WHY_NOT.get(op, 'this NPU has no int8 kernel for it')}"
        problem = int8_tensor_problem(kernel, INT8_OPS[op])
        if problem:
            return problem
        if op not in self.ops:
            return f"{op}: left out by ExampleNPUDelegate(ops=...)"
        problem = INT8_OPS[op].check(kernel, primitive.attrs)
        return True if problem is None else problem if problem.startswith(op) else f"{op}: {problem}"

    def create_graph_kernel(self, kernels: list[lite.Kernel], inputs: list[lite.Tensor],
                            outputs: list[lite.Tensor], model: lite.DelegateModel) -> NPUGraphKernel:
        """Step 3: one NPUGraphKernel for a partition; weights are not touched until its prepare()."""
        # ``inputs`` and ``outputs`` are the partition's boundary (DelegateModel.subgraph_inputs /
        # subgraph_outputs): tensors produced inside it and read only inside it never leave the NPU.
        # ``model`` is this build's DelegateModel: its kernel_name() numbers the partitions of this
        # model only, and its context is this model's lite.Context.
        ops = self.compile_ops(kernels)
        return self.graph_kernel_class()(ops, inputs, outputs, name=model.kernel_name("example_npu"))


    # ---- ahead of time (optional): lite-convert --delegate example_npu ---------------------------

    def blob_target(self) -> str:
        """The layout version of saved partitions: a blob made for another one is not loaded."""
        return INT8_BLOB_TARGET if self.int8 else BLOB_TARGET

    def save_graph_kernel(self, kernel: lite.Kernel) -> bytes | None:
        """Step 7 (ahead of time): the partition's converted weights, after its prepare()."""
        if not isinstance(kernel, NPUGraphKernel):
            return None
        arrays = {f"{i}.{name}": a for i, op in enumerate(kernel.ops) for name, a in op.saved().items()}
        return pack({"ops": [type(op).__name__ for op in kernel.ops]}, arrays)

    def load_graph_kernel(self, blob: memoryview, target: str, kernels: list[lite.Kernel],
                          inputs: list[lite.Tensor], outputs: list[lite.Tensor],
                          model: lite.DelegateModel) -> NPUGraphKernel:
        """Step 8 (on the device): a graph kernel whose prepare() restores the saved weights."""
        if target != self.blob_target():
            raise lite.NotSupportedError(f"saved for {target!r}; this NPU loads {self.blob_target()!r}")
        header, arrays = unpack(blob)
        for kernel in kernels:
            why = self.is_supported(kernel, kernel.primitive)
            if why is not True:
                raise lite.NotSupportedError(f"the saved partition holds {kernel.name!r}, which this NPU does not "
                                             f"take here ({why or 'not supported'})")
        ops = self.compile_ops(kernels)
        if header.get("ops") != [type(op).__name__ for op in ops]:
            raise lite.ModelFormatError(f"example NPU blob: ops {header.get('ops')} do not match the partition's")
        return self.graph_kernel_class()(ops, inputs, outputs, name=model.kernel_name("example_npu"), saved=arrays)


def tensor_problem(kernel: lite.Kernel) -> str | None:
    """Why the NPU cannot hold the kernel's tensors (float32 model, static 4-D NCHW activations)."""
    for tensor in [t for t in kernel.inputs if t is not None] + kernel.outputs:
        if tensor.dtype != np.float32:
            return f"{kernel.type}: tensor {tensor.name!r} is {tensor.dtype.name}; this NPU runs float32 models"
        if tensor.is_const:
            continue  # weights and biases: each op checks its own
        if len(tensor.shape) != 4:
            return f"{kernel.type}: {len(tensor.shape)}-D tensor {tensor.name!r}; this NPU works on 4-D images only"
        if -1 in tensor.shape:
            return (f"{kernel.type}: tensor {tensor.name!r} has dynamic shape {list(tensor.shape)}; this NPU "
                    "compiles for static shapes (convert with input_shapes=... to fix them)")
        if tensor.format != lite.Format.NCHW:
            return f"{kernel.type}: tensor {tensor.name!r} is {tensor.format.name}; this delegate expects NCHW"
    return None
