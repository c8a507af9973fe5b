"""What each op means, written once: pure functions and tables (numpy only).

Native kernels (``lite.kernels``), converter mappers and passes (``lite.tools.converter``),
the ONNX Runtime emitters, the TVM lowering and the example NPU all import these, so a
delegate lowering is a thin translation of one meaning, never a restatement of it.

- ``activation``: activation types, the fused ones (as clip bounds), the ops that fuse them.
- ``broadcast``: numpy / ONNX broadcasting of shapes (Expand, legacy ``axis`` broadcast).
- ``dtypes``: named dtype groups; each layer states which group an op supports on it.
- ``geometry``: sliding windows: pad modes, SAME pads, output sizes, transposed convolutions,
  average-pool divisors.
- ``naming``: unique tensor and node names.
- ``norm``: inference BatchNorm as a per-channel multiplier and offset; LRN's channel window.
- ``padding``: Pad's modes and its begins/ends pads (negative ones crop).
- ``quant``: QuantizeLinear and DequantizeLinear (per tensor, axis or block), requantization.
- ``quantized_arithmetic``: quantized Add, Sub and Mul (8-bit Add and Mul as onnxruntime's
  QLinearAdd and QLinearMul compute them).
- ``resize``: Resize's output dims from scales, and scales from output dims.
- ``slicing``: ONNX Slice bounds clamped to a dim.
- ``split``: Split sizes when only the number of parts is given.
"""
