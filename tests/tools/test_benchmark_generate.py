"""lite-benchmark --generate on the smallest GPT-2 decoder of tests/support/decoders.py: both engines' greedy tokens
equal onnxruntime's plain reference loop, the report's fields, and a difference between the engines fails the
run and says where."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.tools import generate_bench
from lite.tools.benchmark import main
from lite.tools.generate_bench import GenerationTimes, OnnxRuntimeDecoder, first_difference, seeded_prompt

pytest.importorskip("onnxruntime")
decoders = pytest.importorskip("tests.support.decoders")

QUICK = ["--generate", "--prompt-length", "5", "--new-tokens", "7", "--loop-count", "2", "--warmup", "1",
         "--pause-ms", "0", "--thread-num", "1"]


@pytest.fixture(scope="module")
def gpt2_path(tmp_path_factory) -> Path:
    decoders.torch.manual_seed(0)
    return decoders.export_decoder(decoders.gpt2(), tmp_path_factory.mktemp("gpt2") / "gpt2.onnx")


def test_both_engines_generate_the_reference_tokens_and_the_report_has_every_figure(gpt2_path, tmp_path, capsys):
    out = tmp_path / "generate.json"
    assert main([str(gpt2_path), *QUICK, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tokens: the 7 greedy tokens are identical in both engines, in every round" in text
    report = json.loads(out.read_text())
    expected = decoders.greedy_onnxruntime(gpt2_path, seeded_prompt(0, 100, 5), 7)[0].tolist()
    assert report["tokens"] == {"lite": expected, "onnxruntime": expected}
    assert report["tokens_identical"] is True and report["first_difference"] is None
    assert (report["prompt_length"], report["new_tokens"], report["rounds"], report["thread_num"]) == (5, 7, 2, 1)
    for engine in ("lite", "onnxruntime"):
        samples = report["samples"][engine]
        assert len(samples) == 2
        for name, value in report["medians"][engine].items():
            assert value > 0 and value == np.median([s[name] for s in samples]), (engine, name)
    ratios = report["ratios"]
    assert set(ratios) == set(generate_bench.ROWS)
    decode = ratios["decode_tokens_per_s"]
    assert decode == report["medians"]["lite"]["decode_tokens_per_s"] / report["medians"]["onnxruntime"][
        "decode_tokens_per_s"]
    for label, _ in generate_bench.ROWS.values():
        assert label in text


def test_tokens_that_differ_fail_the_run_and_say_where(gpt2_path, monkeypatch, capsys):
    real = generate_bench._ort_round

    def changed(ort, prompt, new_tokens):
        tokens, times = real(ort, prompt, new_tokens)
        return tokens[:3] + [(tokens[3] + 1) % 100] + tokens[4:], times

    monkeypatch.setattr(generate_bench, "_ort_round", changed)
    assert main([str(gpt2_path), *QUICK]) == 1
    captured = capsys.readouterr()
    assert "differ from token 3 on" in captured.out and "differ between lite and onnxruntime" in captured.err


def test_the_io_binding_loop_keeps_batch_rows_apart(gpt2_path):
    prompt = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    tokens, first, steps = OnnxRuntimeDecoder(str(gpt2_path), 1).generate(prompt, 6)
    np.testing.assert_array_equal(tokens, decoders.greedy_onnxruntime(gpt2_path, prompt, 6))
    assert first > 0 and len(steps) == 5


def test_a_model_without_a_cache_is_refused(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["input_ids"], ["logits"])], "relu",
                              [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "relu.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(lite.InputError, match="not a decoder with a KV cache"):
        OnnxRuntimeDecoder(str(path), 1)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_times_of_one_generation():
    times = GenerationTimes.of(prompt_tokens=8, first_s=0.5, steps_s=[0.1, 0.2, 0.3])
    assert times.time_to_first_token_ms == pytest.approx(500) and times.prefill_tokens_per_s == pytest.approx(16)
    assert times.decode_tokens_per_s == pytest.approx(5) and times.token_latency_p50_ms == pytest.approx(200)
    assert GenerationTimes.of(8, 0.5, []).decode_tokens_per_s == 0.0
