"""Several bundled delegates on one model: each takes its partitions, the rest runs natively."""

from lite.delegates.onnxruntime import ORTDelegate
from lite.delegates.tvm import TVMDelegate
from tests.support.ort_delegate import assert_matches, build, normal, small_cnn


def test_ort_restricted_to_a_subset_then_tvm(tmp_path):
    """ORT takes MaxPool, MatMul and Softmax; TVM its largest run; the first conv stays native."""
    original = small_cnn(batch=2)
    ort = ORTDelegate(ops={"MaxPoolFusion", "MatMulFusion", "Softmax"})
    tvm = TVMDelegate("llvm", cache_dir=str(tmp_path), max_partitions=1)
    model = build(original, ort, tvm)
    where = [(r.op_type, r.runs_on) for r in model.partition_report()]
    assert where == [("Conv2DFusion", "native"), ("MaxPoolFusion", "ORTDelegate"), ("Conv2DFusion", "TVMDelegate"),
                     ("AddFusion", "TVMDelegate"), ("AvgPoolFusion", "TVMDelegate"), ("Flatten", "TVMDelegate"),
                     ("MatMulFusion", "ORTDelegate"), ("Softmax", "ORTDelegate")]
    assert [type(k).__name__ for k in model.graph_kernels()] == ["ORTGraphKernel", "TVMGraphKernel", "ORTGraphKernel"]
    for _ in range(2):
        assert_matches(model, original, {"x": normal(2, 3, 12, 12)}, tolerance=1e-4)
