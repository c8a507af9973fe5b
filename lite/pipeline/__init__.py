"""Pipeline execution: a model cut into stages that run concurrently, in threads or worker processes.

On a stream of requests (camera frames, audio chunks) a model split into stages keeps several
compute units busy at once, like an assembly line: while stage 1 works on request k+1,
stage 0 already works on request k+2. Each stage is a built ``lite.Model`` with its own
Context, so one stage can run native kernels on one core while another runs on a delegate.

- ``PipelineConfig`` (``config.py``) wires stages together by tensor name (``connect``) and
  records what each stage is built from (``set_source``), so it can run in a worker process.
- ``PipelineExecutor`` (``executor.py``) runs the requests: ``set_input``/``run`` queue one,
  ``get_output`` returns results in submission order; ``processes=`` puts stages in worker
  processes (``process.py`` the parent's end, ``worker.py`` the worker's, ``shared.py`` the
  shared-memory blocks that carry the activations).
- ``split_model`` (``split.py``) cuts one model into stages balanced on the Context each stage
  will use, and returns a ready config.

Where a stage runs:

- Thread stages share one process and its GIL. numpy releases the GIL inside BLAS calls and
  large array operations, but the Python code between those calls takes turns, so two busy
  native stages slow each other. A stage whose graph kernels release the GIL for a whole call
  (ONNX Runtime, TVM, a GPU or an NPU) overlaps with native stages in threads: place it there.
- Process stages (``PipelineExecutor(config, processes=True)`` or a list of stage indices)
  each have their own interpreter, GIL and BLAS pool, so CPU-bound native stages run truly in
  parallel. Workers are spawned (a fork would copy the parent's BLAS, numba or TVM threads
  mid-flight), build their stage from its ``.lite`` bytes and pickled Context (delegates hold
  options, so they travel), and exchange activations through shared memory: only small
  control messages are pickled. A worker that dies fails its request with a ``StageError``
  naming the stage and is replaced for the next one (``worker_restarts``); ``close()``, the
  ``with`` block's end (Ctrl-C included) and the interpreter's exit leave no process and no
  shared-memory block behind.

Threads and BLAS: the BLAS thread pool is process-wide (``lite.threads.limit_blas_threads``):
every ``Model.predict`` sets it to its own Context's ``thread_num``. Thread stages that all use
the same ``thread_num`` (``split_model`` gives every default stage ``thread_num=1``) agree;
stages with different values switch the pool on every predict. Give every thread stage the
same ``thread_num``, and keep the sum of all stages' threads within the cores you have.

Example (``python -m lite.tools.pipeline_bench --ort-stage`` measures these against the whole model)::

    pieces, config = lite.split_model("resnet18.lite", 2)
    with lite.PipelineExecutor(config, processes=True) as pipeline:
        for frame in frames:
            pipeline.run([frame])
        results = [pipeline.get_output(block=True) for _ in frames]
"""

from lite.errors import StageError, WorkerError
from lite.pipeline.config import Endpoint, PipelineConfig, TensorSpec
from lite.pipeline.executor import PipelineExecutor
from lite.pipeline.split import Cutter, balance, split_model
from lite.pipeline.worker import StageSource

__all__ = ["Cutter", "Endpoint", "PipelineConfig", "PipelineExecutor", "StageError", "StageSource", "TensorSpec",
           "WorkerError", "balance", "split_model"]
