"""Delite: an on-device inference SDK built around a Delegate API.

Convert an ONNX model to .lite once, build it with a Context (threads, delegates),
then predict. Whatever no delegate takes runs on the native numpy kernels.
"""

from lite.context import Context
from lite.delegate import Delegate, DelegateModel, SimpleDelegate
from lite.errors import (
    DelegateError,
    InputError,
    KernelError,
    LiteError,
    MemoryLimitError,
    ModelFileError,
    ModelFormatError,
    NotSupportedError,
    OutOfMemoryError,
    StageError,
    UnsupportedOpError,
)
from lite.kernel import Kernel
from lite.loader import ModelType
from lite.model import Model, PartitionRow
from lite.pipeline import PipelineConfig, PipelineExecutor, split_model
from lite.primitive import Primitive
from lite.runner import ModelParallelRunner
from lite.schema.graph import Format
from lite.tensor import Tensor

__all__ = [
    "Context", "Delegate", "DelegateError", "DelegateModel", "Format", "InputError", "Kernel", "KernelError",
    "LiteError", "MemoryLimitError", "Model", "ModelFileError", "ModelFormatError", "ModelParallelRunner",
    "ModelType", "NotSupportedError", "OutOfMemoryError", "PartitionRow", "PipelineConfig", "PipelineExecutor",
    "Primitive", "SimpleDelegate", "StageError", "Tensor", "UnsupportedOpError", "split_model",
]
__version__ = "0.1.0"
