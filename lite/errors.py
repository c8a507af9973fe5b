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


class NotSupportedError(LiteError):
    """Raised by ``Delegate.init()`` to decline; the model then runs without that delegate."""


class DelegateError(LiteError):
    """A delegate failed; the message names the delegate and the kernel."""


class OutOfMemoryError(LiteError, MemoryError):
    """The system could not allocate memory the model needs (below Context.memory_limit)."""
