"""The error family. Every error Delite raises on purpose derives from LiteError."""


class LiteError(Exception):
    """Base of every error Delite raises on purpose."""


class ModelFormatError(LiteError):
    """The model file or buffer is malformed, truncated, hostile or inconsistent."""


class UnsupportedOpError(LiteError):
    """One or more ops (or attribute values) are not supported.

    ``unsupported`` lists every offending op at once as ``(op_type, node_name, opset, reason)``;
    opset is None where it does not apply (a .lite model).
    """

    def __init__(self, unsupported: list[tuple[str, str, int | None, str]], what: str = "model"):
        self.unsupported = list(unsupported)
        lines = [
            f"  {op} (node {name!r}{'' if opset is None else f', opset {opset}'}): {reason}"
            for op, name, opset, reason in self.unsupported
        ]
        super().__init__(
            f"{len(lines)} unsupported op(s) in the {what}:\n" + "\n".join(lines)
        )


class InputError(LiteError, ValueError):
    """Wrong input count, dtype or shape in predict/resize, a bad argument, or a call in the wrong state."""


class ModelFileError(ModelFormatError, InputError):
    """A model file (or its external data) cannot be opened or read: missing, unreadable, not a regular file."""


class NotSupportedError(LiteError):
    """Raised by ``Delegate.init()`` to decline; the model then runs without that delegate."""


class MissingPackageError(NotSupportedError):
    """An optional feature's package is not installed; the message names the ``pip install "delite[...]"`` to run."""


class DelegateError(LiteError):
    """A delegate failed; the message names the delegate and the kernel."""


class KernelError(LiteError):
    """A native kernel failed while the model ran (names the kernel); the model stays usable."""


class MemoryLimitError(LiteError):
    """The model, an input shape or a model file needs more bytes than ``Context.memory_limit``.

    Nothing was allocated: raise the limit, or use smaller inputs.
    """


class StageError(LiteError):
    """A pipeline stage failed on one request (the original error is ``__cause__``).

    Attributes:
        stage: the index of the stage that failed.
        request: the request's number (``PipelineExecutor.run`` returned it).
    """

    def __init__(self, stage: int, request: int, error: Exception):
        super().__init__(f"pipeline stage {stage} failed on request {request}: {type(error).__name__}: {error}")
        self.stage = stage
        self.request = request
        self.__cause__ = error


class WorkerError(LiteError):
    """A pipeline stage's worker process died, could not start, or raised an error that cannot be sent back.

    It is the ``__cause__`` of the ``StageError`` a request gets; the message names the stage
    and the process.
    """


class OutOfMemoryError(LiteError, MemoryError):
    """The system could not allocate memory the model needs (below Context.memory_limit)."""


class ThreadStartError(LiteError, RuntimeError):
    """The system refused to start a thread Delite needs (a limit on threads or memory); the
    message names the thread. Lower ``Context.thread_num`` or raise the limit."""
