"""ModelParallelRunner: thread-safe predict from a pool of models that share their weights."""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence

import numpy as np

from lite.arguments import sequence_of
from lite.context import Context
from lite.conversion import load_lite_bytes
from lite.errors import InputError
from lite.loader import ModelSource, ModelType
from lite.model import Model
from lite.schema.reader import aligned_copy
from lite.tensor import Tensor


class ModelParallelRunner:
    """Serves concurrent ``predict`` calls from a pool of ``workers`` copies of one model.

    The copies are built from one 64-byte aligned buffer of the model file, so their
    constant weights are views into the same memory: N workers cost one copy of the
    weights plus N sets of activation buffers. Each call borrows an idle copy, so up to
    ``workers`` predictions run at once (numpy releases the GIL in BLAS and most ufuncs);
    more callers wait for a free copy.

    Args:
        model_path: a ``.lite`` or ``.onnx`` file (an ONNX file is converted once), or the
            model as bytes or an ``onnx.ModelProto`` (see ``lite.loader``).
        context: threads and delegates for every copy (each copy gets its own delegates'
            graph kernels; the delegate objects themselves are shared).
        workers: number of model copies.

    Example:
        >>> runner = lite.ModelParallelRunner("model.lite", lite.Context(thread_num=1), workers=4)  # doctest: +SKIP
        >>> outputs = runner.predict([x])  # list of lite.Tensor, from any thread          # doctest: +SKIP
    """

    def __init__(self, model_path: ModelSource, context: Context | None = None, workers: int = 2):
        if not isinstance(workers, int) or workers < 1:
            raise InputError(f"workers must be a positive int, got {workers!r}")
        context = context or Context()
        buffer = aligned_copy(load_lite_bytes(model_path, size_limit=context.memory_limit))
        self.workers = workers
        self._idle: queue.SimpleQueue[Model] = queue.SimpleQueue()
        self._models = []
        for _ in range(workers):
            model = Model()
            model.build(buffer, ModelType.LITE, context)
            self._models.append(model)
            self._idle.put(model)

    @property
    def models(self) -> tuple[Model, ...]:
        """The model copies (for reports: ``partition_report()``, ``graph_kernels()``; predict through the runner)."""
        return tuple(self._models)

    def get_inputs(self):
        """The input tensors of one copy (names, dtypes, shapes; do not set their data)."""
        return self._models[0].get_inputs()

    def get_outputs(self):
        """The output tensors of one copy (names, dtypes)."""
        return self._models[0].get_outputs()

    def predict(self, inputs: Sequence[Tensor | np.ndarray] | Mapping[str, Tensor | np.ndarray],
                output_names: Sequence[str] | None = None) -> list[Tensor]:
        """Runs one request on an idle copy; takes and returns what ``Model.predict`` does
        (inputs as a list or by name, optionally the outputs named). Thread-safe.

        Raises:
            InputError: as ``Model.predict``; the copy stays usable.
        """
        if not isinstance(inputs, Mapping):
            inputs = list(sequence_of(inputs, "one input per graph input", "ModelParallelRunner.predict"))
        model = self._idle.get()
        try:
            return model.predict(inputs, output_names=output_names)
        finally:
            self._idle.put(model)

