"""Context: run-time options of a Model (threads, delegates, fallback)."""

from __future__ import annotations

import os

from lite.arguments import MAX_THREADS, delegate_list, positive_int, strict_bool
from lite.errors import InputError
from lite.schema.reader import DEFAULT_MEMORY_LIMIT
from lite.threads import capped_threads

PLACEMENTS = ("priority", "measured")


class Context:
    """Options for building and running a Model.

    Args:
        thread_num: threads for native kernels and the delegates' graph kernels (at least 1; at
            most the CPUs this process may use: a larger value is capped, with a warning once). On
            idle cores one native pool (``lite.kernels.fast.crew``, where it runs) takes both BLAS's
            matrix products and the compiled loops (depthwise convolutions, epilogues, Winograd
            transforms, the attention softmax); when other processes keep the cores busy, large
            products are split into chunks that the model's threads take dynamically, so a busy
            core slows a predict in proportion instead of stalling it (``lite.kernels.parallel``).
        fallback: when a delegate's graph kernel fails ``prepare``, run the native
            kernels it covered instead of failing the build (a bool: ``"false"`` is refused).
        delegates: ``lite.Delegate`` instances in priority order (highest first).
        memory_limit: the most bytes one tensor, or all activations together, may need;
            a model (or an input shape) that would need more is refused before anything
            is allocated.
        placement: "priority" (default): delegates take what they support in priority order.
            "measured": every partition any delegate claims is timed at build against the
            native kernels it covers (and against other delegates claiming the same kernels),
            and runs where it is fastest (``lite.delegate.placement``; ``Model.placement_report()``).
        placement_budget: seconds measured placement may spend timing (what is not timed
            in time runs natively).
        placement_cache: where measured times are cached ("default": ``$DELITE_PLACEMENT_CACHE``
            or ``~/.cache/delite/placement``; a folder; None: no cache), so a second build of
            the same model, shapes, threads and delegates times nothing.
        conversion_cache: where ``Model.build_from_file`` keeps the ``.lite`` conversions of
            ``.onnx`` files ("default": ``$DELITE_CONVERSION_CACHE`` or
            ``~/.cache/delite/converted``; a folder; None: convert every time), so a second
            build of the same file (the same bytes and external data) maps the converted file
            instead of converting again (``lite.conversion.convert_file``).

    Example:
        >>> ctx = Context(thread_num=2)
        >>> ctx.delegate is None
        True
    """

    def __init__(self, thread_num: int | None = None, fallback: bool = True,
                 delegates: list[object] | None = None, memory_limit: int = DEFAULT_MEMORY_LIMIT,
                 placement: str = "priority", placement_budget: float = 60.0,
                 placement_cache: str | os.PathLike | None = "default",
                 conversion_cache: str | os.PathLike | None = "default"):
        self.thread_num = thread_num if thread_num is not None else (os.cpu_count() or 1)
        self.fallback = fallback
        self.delegates = [] if delegates is None else delegate_list(delegates)
        self.memory_limit = positive_int(memory_limit, "memory_limit (bytes)")
        self.placement = placement
        self.placement_budget = placement_budget
        self.placement_cache = placement_cache
        self.conversion_cache = conversion_cache

    @property
    def placement(self) -> str:
        return self._placement

    @placement.setter
    def placement(self, value: str) -> None:
        if value not in PLACEMENTS:
            raise InputError(f"placement must be one of {', '.join(PLACEMENTS)}, got {value!r}")
        self._placement = value

    @property
    def fallback(self) -> bool:
        return self._fallback

    @fallback.setter
    def fallback(self, value: bool) -> None:
        self._fallback = strict_bool(value, "Context fallback")

    @property
    def placement_budget(self) -> float:
        return self._placement_budget

    @placement_budget.setter
    def placement_budget(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise InputError(f"placement_budget must be a finite number of seconds >= 0, got {value!r}")
        self._placement_budget = float(value)

    @property
    def conversion_cache(self) -> str | os.PathLike | None:
        return self._conversion_cache

    @conversion_cache.setter
    def conversion_cache(self, value: str | os.PathLike | None) -> None:
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise InputError(f"conversion_cache must be a folder, \"default\" or None, got {type(value).__name__}")
        self._conversion_cache = value

    @property
    def thread_num(self) -> int:
        return self._thread_num

    @thread_num.setter
    def thread_num(self, value: int) -> None:
        self._thread_num = capped_threads(positive_int(value, "thread_num", MAX_THREADS))

    @property
    def delegate(self) -> object | None:
        """The highest-priority ``lite.Delegate``; setting it replaces the list (None clears it)."""
        return self.delegates[0] if self.delegates else None

    @delegate.setter
    def delegate(self, value: object | None) -> None:
        self.delegates = [] if value is None else delegate_list([value])

    def __repr__(self) -> str:
        names = [type(d).__name__ for d in self.delegates]
        return (f"Context(thread_num={self.thread_num}, fallback={self.fallback}, delegates={names}, "
                f"placement={self.placement!r})")
