"""The ONNX Runtime delegate: partitions re-emitted as ONNX graphs and run by onnxruntime.

Example::

    import lite
    from lite.delegates.onnxruntime import ORTDelegate

    model = lite.Model()
    model.build_from_file("mobilenet_v2.lite", context=lite.Context(delegates=[ORTDelegate()]))
"""

from lite.delegates.onnxruntime.delegate import ORTDelegate
from lite.delegates.onnxruntime.graph_kernel import ORTGraphKernel

__all__ = ["ORTDelegate", "ORTGraphKernel"]
