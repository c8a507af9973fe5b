"""What a TVM graph kernel and a saved TVM partition read of the delegate that made them
(``TVMDelegate`` is one): its target, device, caches and trust setting. They see this protocol,
not the delegate class, so the delegate module can import them without a cycle."""

from __future__ import annotations

from typing import Any, Protocol


class TVMSettings(Protocol):
    """A TVM delegate's settings once ``init()`` ran."""

    target: Any  # the tvm.target.Target compiled for (None before init)
    kind: str  # the target's kind: "llvm", "cuda"...
    device: Any  # the tvm runtime device the VM runs on
    on_cpu: bool  # whether that device is the host CPU (arrays shared without copies)
    cache: Any  # lite.delegates.tvm.cache.ModuleCache, or None: compiled modules on disk
    database: Any  # a tuning database opened from tuning_db, or None
    tuning_db: str | None
    symbolic_batch: bool  # compile the batch dimension symbolic (one module for every batch)
    trust_saved_code: bool  # load partitions compiled ahead of time (native code from the file)

    def compiler(self) -> None:
        """Imports TVM's compiler and resolves the target, cache and database (idempotent)."""
