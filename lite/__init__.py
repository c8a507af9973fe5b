"""Delite: an on-device inference SDK built around a Delegate API.

Convert an ONNX model to .lite once, build it with a Context (threads, delegates),
then predict. Whatever no delegate takes runs on the native numpy kernels.
"""

from lite.context import Context
from lite.delegate import Delegate, DelegateModel, SimpleDelegate
from lite.delegate.placement import PlacementRow
from lite.delegates import available_delegates
from lite.errors import (
    DelegateError,
    InputError,
    KernelError,
    LiteError,
    MemoryLimitError,
    MissingPackageError,
    ModelFileError,
    ModelFormatError,
    NotSupportedError,
    OutOfMemoryError,
    StageError,
    ThreadStartError,
    UnsupportedOpError,
    WorkerError,
)
from lite.generate import DecoderNames, Generator
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel
from lite.kernels.registry import register_custom_kernel, unregister_custom_kernel
from lite.loader import ModelType
from lite.model import Model, PartitionRow
from lite.pipeline import PipelineConfig, PipelineExecutor, split_model
from lite.primitive import Primitive
from lite.runner import ModelParallelRunner
from lite.schema.graph import Format, QuantParams
from lite.tensor import Tensor
from lite.version import __version__ as __version__  # NOTE: re-exported

__all__ = [
    "Context", "DecoderNames", "Delegate", "DelegateError", "DelegateModel", "Format", "Generator", "InputError",
    "Kernel", "KernelError",
    "LiteError", "MemoryLimitError", "MissingPackageError", "Model", "ModelFileError", "ModelFormatError",
    "ModelParallelRunner", "ModelType", "NativeKernel", "NotSupportedError", "OutOfMemoryError", "PartitionRow",
    "PipelineConfig", "PlacementRow", "PipelineExecutor", "Primitive", "QuantParams", "SimpleDelegate", "StageError",
    "Tensor",
    "ThreadStartError", "UnsupportedOpError", "WorkerError", "available_delegates", "register_custom_kernel",
    "split_model", "unregister_custom_kernel",
]
