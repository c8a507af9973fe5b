"""Pipeline execution: a model cut into stages that run concurrently, one worker thread each.

On a stream of requests (camera frames, audio chunks) a model split into stages keeps several
compute units busy at once, like an assembly line: while stage 1 works on request k+1,
stage 0 already works on request k+2. Each stage is a built ``lite.Model`` with its own
Context, so one stage can run native kernels on one core while another runs on a delegate.

- ``PipelineConfig`` (``config.py``) wires stages together by tensor name (``connect``).
- ``PipelineExecutor`` (``executor.py``) runs the requests: ``set_input``/``run`` queue one,
  ``get_output`` returns results in submission order.
- ``split_model`` (``split.py``) cuts one model into balanced stages and returns a ready config.

Threads and BLAS: numpy releases the GIL inside BLAS calls and most large array operations,
so stages in different threads really do run at the same time; the Python code between
those calls (kernel dispatch, small ops) still takes turns on the GIL. The BLAS thread pool
is process-wide (``lite.threads.limit_blas_threads``): every ``Model.predict`` sets it to its
own Context's ``thread_num``. Stages that all use the same ``thread_num`` (``split_model``
gives every default stage ``thread_num=1``) agree, and the pool stays as it is; stages with
different values switch the pool on every predict, and a stage's GEMMs then run with
whichever value another stage set last. Give every stage the same ``thread_num``, and keep
the sum of the stages' threads within the cores you have.
"""

from lite.errors import StageError
from lite.pipeline.config import Endpoint, PipelineConfig, TensorSpec
from lite.pipeline.executor import PipelineExecutor
from lite.pipeline.split import Cutter, balance, split_model

__all__ = ["Cutter", "Endpoint", "PipelineConfig", "PipelineExecutor", "StageError", "TensorSpec", "balance",
           "split_model"]
