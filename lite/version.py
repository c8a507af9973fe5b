"""The package's version (the facade ``lite`` re-exports it; the placement cache keys on it)."""

__version__ = "0.1.0"
