"""Reductions (ReduceFusion): the reduce modes, as ONNX names the ops."""

from __future__ import annotations

# ReduceMode of schema/ops.fbs -> the ONNX op computing it.
ONNX_REDUCTIONS = {"MEAN": "ReduceMean", "MAX": "ReduceMax", "MIN": "ReduceMin", "SUM": "ReduceSum",
                   "PROD": "ReduceProd", "L1": "ReduceL1", "L2": "ReduceL2", "LOG_SUM": "ReduceLogSum",
                   "LOG_SUM_EXP": "ReduceLogSumExp", "SUM_SQUARE": "ReduceSumSquare"}
REDUCE_MODES = tuple(ONNX_REDUCTIONS)
