"""Loading cached kernels without numba's registries.

Before numba loads a function from its cache it refreshes the target context: it imports and
installs every typing and lowering registry it has (numpy, lists, dicts, random, linear algebra...),
which only compiling needs. On a warm build that refresh was a third of a ResNet-50's build time.
``install`` makes a cache lookup initialize numba's runtime alone (the allocator the compiled
wrappers call); the symbols cached code links against are installed when the context is made
(numba's C helpers, its math functions). A lookup that misses refreshes as numba does, before
numba compiles the function.
"""

from __future__ import annotations

from types import ModuleType

_INSTALLED: list[bool] = []


def install(numba: ModuleType) -> bool:
    """Puts the lazy lookup in place of ``numba.core.caching.Cache.load_overload`` (once); False
    where this numba's cache has another shape (then numba's own lookup stays)."""
    if _INSTALLED:
        return _INSTALLED[0]
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys
    except ImportError:
        _INSTALLED.append(False)
        return False
    cache = getattr(caching, "Cache", None)
    if cache is None or not all(hasattr(cache, name) for name in ("load_overload", "_load_overload",
                                                                  "_guard_against_spurious_io_errors")):
        _INSTALLED.append(False)
        return False

    def load_overload(self, sig, target_context):
        """numba's ``Cache.load_overload``, refreshing the context only where nothing is cached."""
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            found = self._load_overload(sig, target_context)
            if found is not None:
                return found
        target_context.refresh()
        return None

    cache.load_overload = load_overload
    _INSTALLED.append(True)
    return True
