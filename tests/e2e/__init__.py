"""End-to-end acceptance tests: ONNX -> .lite -> lite.Model.predict, checked against onnxruntime
(the checks and tolerances are in ``tests.support.e2e``)."""
