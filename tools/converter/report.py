"""What a conversion did (``ConversionReport``), in a module of its own: the converter's passes fill
it in, and the converter package imports them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ConversionReport:
    """What a conversion did: node counts and the ONNX nodes folded, removed or fused."""

    opset: int
    onnx_nodes: int
    lite_nodes: int = 0
    folded: list[str] = field(default_factory=list)  # nodes evaluated into constants
    removed: list[str] = field(default_factory=list)  # Dropout/Identity nodes dropped
    bn_folded: list[str] = field(default_factory=list)  # BatchNormalization (Conv/Gemm), per-channel Mul/Add (Conv)
    fused: list[str] = field(default_factory=list)  # activations fused into their producer
    fused_blocks: list[str] = field(default_factory=list)  # LayerNorm, GELU, attention, MatMul+bias blocks
    canonical: list[str] = field(default_factory=list)  # nodes rewritten to the one spelling (canonical.py)
    quantized_ops: list[str] = field(default_factory=list)  # DequantizeLinear -> op -> QuantizeLinear groups
    expanded_quantized_ops: int = 0  # QLinearConv, QGemm... rewritten into their QDQ groups
    pruned_tensors: int = 0

    def summary(self) -> str:
        """A few human-readable lines, as ``lite-convert`` prints them."""
        return "\n".join([
            f"ONNX nodes: {self.onnx_nodes} (opset {self.opset}) -> lite nodes: {self.lite_nodes}",
            f"  constant-folded nodes:      {len(self.folded)}",
            f"  Dropout/Identity removed:   {len(self.removed)}",
            f"  affine maps folded:         {len(self.bn_folded)} (BatchNormalization, per-channel Mul/Add)",
            f"  respelled canonically:      {len(self.canonical)} (Sum as Add, Max(x, 0) as Relu, full-plane pools "
            "and means)",
            f"  activations fused:          {len(self.fused)}",
            f"  blocks fused:               {len(self.fused_blocks)} (LayerNorm, GELU, attention, MatMul+bias)",
            f"  quantized ops:              {len(self.quantized_ops)} (QDQ groups; {self.expanded_quantized_ops} "
            "QOperator nodes expanded)",
        ])
