"""The TVM delegate: partitions compiled by Apache TVM (Relax) for CPU (llvm), GPU (cuda) or any TVM target.

Layout, in pipeline order: ``ops/`` (the support table: primitive type -> Relax emitter),
``lowering.py`` (a partition -> one Relax function with a symbolic batch), ``compiler.py``
(targets, pipelines, tuned compilation), ``cache.py`` (compiled modules on disk),
``kernel.py`` (the graph kernel: prepare / resize / execute), ``delegate.py`` (the
SimpleDelegate), ``tuning.py`` (MetaSchedule tuning, behind ``lite-tune``), ``runtime.py``
(the TVM runtime alone, without the compiler) and ``saved.py`` (partitions compiled ahead of
time into the .lite file by ``lite-convert --delegate tvm``, loaded with the runtime alone).

Importing this package does not import tvm. ``TVMDelegate.init()`` loads TVM's runtime and
declines (lite.NotSupportedError) when it is missing or the target's device is absent; the
compiler is imported when something is compiled.

Example:
    >>> import lite
    >>> from lite.delegates.tvm import TVMDelegate
    >>> ctx = lite.Context(thread_num=2, delegates=[TVMDelegate("llvm", tuning_db=None)])
"""

from lite.delegates.tvm.delegate import TVMDelegate, module_sources

__all__ = ["TVMDelegate", "module_sources"]
