"""Shared-memory blocks that carry a process stage's activations (no pickling of arrays).

The parent process creates every block (``Block``) and is the only one that unlinks it; a
worker attaches by name (``Attachments``) and only closes. A ``Layout`` says where each
array lies in a block: the arrays are written once and read as numpy views.

NOTE: on Python 3.11 attaching registers the block with the resource tracker again. Spawned
workers share the parent's tracker, whose record is a set, so the second registration changes
nothing and the parent's ``unlink`` clears it; a worker must never unregister or unlink.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from lite.aligned import ALIGNMENT, aligned_size

PREFIX = "lite_pipeline_"

# (tensor name, dtype string, shape, byte offset) per array.
Layout = list[tuple[str, str, tuple[int, ...], int]]


def layout_of(arrays: Mapping[str, np.ndarray]) -> tuple[Layout, int]:
    """Where each array goes in a block, and the bytes the block needs."""
    layout, offset = [], 0
    for name, array in arrays.items():
        layout.append((name, array.dtype.str, tuple(array.shape), offset))
        offset += aligned_size(array.nbytes)
    return layout, offset


def bytes_for(specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> int:
    """The bytes a block needs for arrays of these dtypes and shapes (a free -1 dim counts as 0)."""
    return sum(aligned_size(np.dtype(dtype).itemsize * int(np.prod([max(d, 0) for d in shape])))
               for dtype, shape in specs.values())


def views(buffer: memoryview, layout: Layout) -> dict[str, np.ndarray]:
    """The arrays of ``layout``, viewing ``buffer`` (drop them before the block is closed)."""
    return {name: np.ndarray(shape, np.dtype(dtype), buffer=buffer, offset=offset)
            for name, dtype, shape, offset in layout}


def write(buffer: memoryview, layout: Layout, arrays: Mapping[str, np.ndarray]) -> None:
    """Copies ``arrays`` into ``buffer`` where ``layout`` places them."""
    for name, target in views(buffer, layout).items():
        np.copyto(target, arrays[name])


@contextlib.contextmanager
def interrupt_deferred() -> Iterator[None]:
    """On the main thread, a SIGINT that comes within the block takes effect (KeyboardInterrupt) at its
    end instead; elsewhere (no KeyboardInterrupt can come there) it does nothing."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    received: list[tuple] = []
    signal.signal(signal.SIGINT, lambda *arguments: received.append(arguments))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            previous(*received[0])


def block_names(pid: int | None = None) -> list[str]:
    """The pipeline blocks that exist now (``/dev/shm``), of the process ``pid`` (default: this one)."""
    prefix = f"{PREFIX}{os.getpid() if pid is None else pid}_"
    folder = "/dev/shm"
    return sorted(name for name in os.listdir(folder) if name.startswith(prefix)) if os.path.isdir(folder) else []


class Block:
    """A shared-memory block this process created, named after it; ``release`` closes and unlinks it.

    Args:
        nbytes: the least size (a block is never empty).
    """

    def __init__(self, nbytes: int):
        name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(6)}"
        self.memory: SharedMemory | None = SharedMemory(name, create=True, size=max(aligned_size(nbytes), ALIGNMENT))
        self.name, self.size = name, self.memory.size

    @property
    def buffer(self) -> memoryview:
        return self.memory.buf

    def release(self) -> None:
        """Closes and unlinks the block (once; later calls do nothing; a Ctrl-C waits until it is done)."""
        with interrupt_deferred():
            self._release()

    def _release(self) -> None:
        if self.memory is not None:
            memory, self.memory = self.memory, None
            try:
                memory.close()
            except BufferError:  # NOTE: an array still views it: its mapping ends with that array, its name now
                pass
            finally:
                memory.unlink()


def fitted(block: Block | None, nbytes: int) -> Block:
    """``block`` when it holds ``nbytes``, else a new block that does (the old one is released)."""
    if block is not None and block.size >= nbytes:
        return block
    if block is not None:
        block.release()
    return Block(max(nbytes, 2 * (block.size if block else 0)))


class Attachments:
    """A worker's view of the parent's blocks, by role ("in", "out"): one block per role at a time."""

    def __init__(self) -> None:
        self._blocks: dict[str, SharedMemory] = {}

    def buffer(self, role: str, name: str) -> memoryview:
        """The buffer of block ``name``, attaching it (and closing the role's previous block) when new."""
        held = self._blocks.get(role)
        if held is None or held.name.lstrip("/") != name:
            if held is not None:
                held.close()
            self._blocks[role] = held = SharedMemory(name)
        return held.buf

    def close(self) -> None:
        """Closes every block (the parent unlinks them)."""
        for block in self._blocks.values():
            block.close()
        self._blocks.clear()
