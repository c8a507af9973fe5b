"""lite.Generator: greedy tokens equal onnxruntime's own loop on the same file, seeded sampling repeats, stop
tokens stop, the callback sees every token, the stats are filled; decoders exported from Hugging Face
transformers (tiny configs, random weights) with their cache as graph inputs and outputs."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.tools.converter import convert, convert_to_graph
from tests.support.docs import blocks

pytest.importorskip("onnxruntime")
decoders = pytest.importorskip("tests.support.decoders")

ROOT = Path(__file__).resolve().parents[1]
PROMPT = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])


@pytest.fixture(scope="module")
def gpt2_path(tmp_path_factory) -> Path:
    decoders.torch.manual_seed(0)
    return decoders.export_decoder(decoders.gpt2(), tmp_path_factory.mktemp("gpt2") / "gpt2.onnx")


@pytest.fixture(scope="module")
def generator(gpt2_path) -> lite.Generator:
    return lite.Generator(gpt2_path, context=lite.Context(thread_num=2))


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_tokens_equal_onnxruntimes_loop(generator, gpt2_path, batch):
    expected = decoders.greedy_onnxruntime(gpt2_path, PROMPT[:batch], 16)
    assert len(set(expected.ravel().tolist())) > 3  # NOTE: the random model does not just repeat a token
    result = generator.generate(PROMPT[:batch], max_new_tokens=16)
    np.testing.assert_array_equal(np.array(result.tokens), expected)


def test_a_lite_file_as_bytes_and_a_copied_cache_give_the_same_tokens(generator, gpt2_path):
    expected = generator.generate(PROMPT[:2], max_new_tokens=8).tokens
    copying = lite.Generator(convert(str(gpt2_path)), bind_cache=False)
    assert copying.generate(PROMPT[:2], max_new_tokens=8).tokens == expected


def test_a_dynamic_cache_gives_the_same_tokens_resizing_per_token(generator, gpt2_path, monkeypatch):
    """The static cache resizes the model once per call (after the prefill); the dynamic one per token."""
    expected = decoders.greedy_onnxruntime(gpt2_path, PROMPT[:2], 12)
    resizes = []
    resize = generator.model.resize
    monkeypatch.setattr(generator.model, "resize", lambda *args: (resizes.append(args), resize(*args)))
    assert generator.cache_mode == "static"
    np.testing.assert_array_equal(np.array(generator.generate(PROMPT[:2], max_new_tokens=12).tokens), expected)
    assert len(resizes) == 1
    dynamic = lite.Generator(generator.model, cache="dynamic")
    assert dynamic.cache_mode == "dynamic"
    np.testing.assert_array_equal(np.array(dynamic.generate(PROMPT[:2], max_new_tokens=12).tokens), expected)
    assert len(resizes) == 1 + 11


def test_the_static_cache_is_the_present_outputs_own_buffer(generator, gpt2_path):
    """Each layer's past input views the first positions of the array its present output is bound to, so the
    model's Concat of past and new finds the past already in its slot and copies only the new position."""
    from lite.kernels.shape import _in_place

    expected = decoders.greedy_onnxruntime(gpt2_path, PROMPT[:2], 10)
    np.testing.assert_array_equal(np.array(generator.generate(PROMPT[:2], max_new_tokens=10).tokens), expected)
    cache = generator._static
    for buffer, present in cache.sources:
        assert present.data is buffer
    inputs = {t.name: t for t in generator.model.get_inputs()}
    for name, past in cache.buffers.items():
        assert inputs[name].data is past and past.base is not None
    presents = {present for _, present in cache.sources}
    joins = [k for k in generator.model._engine.kernels if k.type == "Concat" and k.outputs[0] in presents]
    assert len(joins) == len(presents)
    for join in joins:
        past = next(t for t in join.inputs if t.name in cache.buffers)
        assert _in_place(past.data, join.slots[1][join.inputs.index(past)])


def resident_kib() -> int:
    """This process's resident set now (VmRSS), KiB; 0 where /proc does not say."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def test_memory_stays_flat_while_tokens_are_generated(generator):
    """tracemalloc (numpy's arrays included) and the resident set at the 9th and the last of 256 tokens of a
    second call: what grows per token is the result's own record, a token and its step time, 40 bytes (a
    dynamic cache grows by its new positions and a larger arena, about 1.2 KB per token here). Each reading
    follows a full collection, which also empties Python's free lists: the blocks they keep are traced as in
    use, and how many they hold depends on what ran before in the process."""
    tokens, readings = 256, {}
    step = iter(range(10 ** 6))

    def sample(_):
        at = next(step) % tokens
        if at in (8, tokens - 1):
            gc.collect()
            readings[at] = tracemalloc.get_traced_memory()[0], resident_kib()

    tracemalloc.start()
    try:
        for _ in range(2):
            generator.generate(PROMPT[:1], tokens, on_token=sample)
    finally:
        tracemalloc.stop()
    (traced_before, resident_before), (traced_after, resident_after) = readings[8], readings[tokens - 1]
    per_token = (traced_after - traced_before) / (tokens - 9)
    assert per_token < 48, f"{per_token:.0f} bytes more per token"
    assert resident_after - resident_before <= 256, f"the resident set grew {resident_after - resident_before} KiB"


def test_an_unknown_cache_mode_is_refused(generator):
    with pytest.raises(lite.InputError, match="cache must be"):
        lite.Generator(generator.model, cache="paged")


def test_the_ort_delegate_generates_the_same_tokens(gpt2_path):
    from lite.delegates.onnxruntime import ORTDelegate

    expected = decoders.greedy_onnxruntime(gpt2_path, PROMPT[:2], 12)
    delegated = lite.Generator(gpt2_path, context=lite.Context(thread_num=2, delegates=[ORTDelegate()]))
    assert {row.runs_on for row in delegated.model.partition_report()} <= {"ORTDelegate", "folded"}
    np.testing.assert_array_equal(np.array(delegated.generate(PROMPT[:2], 12).tokens), expected)


def test_a_decoder_quantized_by_quantize_dynamic_generates_onnxruntimes_tokens(gpt2_path, tmp_path):
    """int8 weights, each linear layer's input quantized per call (DynamicQuantizeLinear, MatMulInteger,
    the scaling): a decode step's single row runs those kernels as the prompt's rows do."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from lite.fusion_kernels import ScaledIntegerProduct

    path = tmp_path / "gpt2_int8.onnx"
    quantize_dynamic(str(gpt2_path), str(path), weight_type=QuantType.QInt8)
    expected = decoders.greedy_onnxruntime(path, PROMPT[:2], 16, exact=True)
    quantized = lite.Generator(path, context=lite.Context(thread_num=2))
    np.testing.assert_array_equal(np.array(quantized.generate(PROMPT[:2], 16).tokens), expected)
    assert any(isinstance(k, ScaledIntegerProduct) for k in quantized.model._engine.kernels)


@pytest.mark.slow
def test_the_tvm_delegate_generates_the_same_tokens(gpt2_path):
    """TVM takes the float ops (the integer mask and position ops stay native); the prefill's empty cache
    and the decode steps' fixed shapes both run there."""
    tvm = pytest.importorskip("lite.delegates.tvm")
    expected = decoders.greedy_onnxruntime(gpt2_path, PROMPT[:2], 12)
    delegated = lite.Generator(gpt2_path, context=lite.Context(thread_num=2, delegates=[tvm.TVMDelegate()]))
    products = [row for row in delegated.model.partition_report() if row.op_type == "MatMulFusion"]
    assert products and all(row.runs_on == "TVMDelegate" for row in products)
    np.testing.assert_array_equal(np.array(delegated.generate(PROMPT[:2], 12).tokens), expected)


def test_a_one_dimensional_prompt_is_one_row(generator):
    assert generator.generate([1, 2, 3, 4], 4).tokens == generator.generate(PROMPT[:1], 4).tokens


def test_sampling_with_a_seed_repeats(generator):
    options = {"max_new_tokens": 12, "temperature": 1.5, "top_k": 50, "top_p": 0.95}
    first = generator.generate(PROMPT[:2], seed=7, **options).tokens
    assert generator.generate(PROMPT[:2], seed=7, **options).tokens == first
    others = [generator.generate(PROMPT[:2], seed=seed, **options).tokens for seed in (8, 9)]
    assert any(tokens != first for tokens in others)


def test_top_k_of_one_is_greedy(generator):
    greedy = generator.generate(PROMPT[:2], 8).tokens
    assert generator.generate(PROMPT[:2], 8, temperature=0.7, top_k=1, seed=3).tokens == greedy
    assert generator.generate(PROMPT[:2], 8, temperature=0.7, top_p=1e-6, seed=3).tokens == greedy


def test_a_stop_token_stops_its_row_and_the_callback_sees_every_token(generator):
    greedy = generator.generate(PROMPT[:2], 10).tokens
    stop = greedy[0][2]
    cut = [row[:row.index(stop) + 1] if stop in row else row for row in greedy]
    seen = []
    result = generator.generate(PROMPT[:2], 10, stop_tokens=[stop], on_token=lambda t: seen.append(t.copy()))
    assert result.tokens == cut and len(cut[0]) <= 3
    steps = max(len(row) for row in cut)
    assert np.array(seen).T.tolist() == [row + [-1] * (steps - len(row)) for row in cut]


def test_generation_ends_when_every_row_stopped(generator):
    greedy = generator.generate(PROMPT[:1], 10).tokens[0]
    result = generator.generate(PROMPT[:1], 10, stop_tokens=[greedy[1]])
    assert result.tokens == [greedy[:greedy.index(greedy[1]) + 1]]
    assert result.stats.generated_tokens == len(result.tokens[0])


def test_the_stats_are_filled(generator):
    stats = generator.generate(PROMPT[:2], 8).stats
    assert (stats.batch, stats.prompt_tokens, stats.generated_tokens) == (2, 4, 8)
    for name in ("time_to_first_token_s", "prefill_tokens_per_s", "decode_tokens_per_s", "token_latency_p50_ms",
                 "token_latency_p90_ms", "peak_rss_mb", "load_s"):
        assert getattr(stats, name) > 0, name
    assert stats.token_latency_p90_ms >= stats.token_latency_p50_ms
    one = generator.generate(PROMPT[:1], 1).stats
    assert one.generated_tokens == 1 and one.decode_tokens_per_s == 0.0 and one.token_latency_p50_ms == 0.0


@pytest.mark.parametrize("options", [
    {"max_new_tokens": 0}, {"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5},
    {"prompt": [[1, 2], [3]]}, {"prompt": []}, {"prompt": [0.5, 1.5]},
])
def test_bad_options_are_refused(generator, options):
    call = {"prompt": [1, 2, 3], "max_new_tokens": 4, **options}
    with pytest.raises(lite.InputError):
        generator.generate(call.pop("prompt"), **call)


def test_names_that_the_model_lacks_are_refused(generator):
    with pytest.raises(lite.InputError, match="missing"):
        lite.Generator(generator.model, names=lite.DecoderNames(past_key="cache.{}.k"))
    with pytest.raises(lite.InputError, match="present.0.k"):
        lite.Generator(generator.model, names=lite.DecoderNames(present_key="present.{}.k"))


def test_the_docs_page_runs(tmp_path, monkeypatch):
    """docs/generate.md's python blocks (marked no-test there: they need torch), in order, in one namespace."""
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    code = [b for b in blocks(ROOT / "docs" / "generate.md") if b.language == "python"]
    assert len(code) >= 2
    for block in code:
        exec(compile(block.code, block.where, "exec"), names)
    assert len(names["result"].tokens[0]) == 16


# ---- heavier: a Llama-style decoder, longer runs, batch 4 --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_64_greedy_tokens_equal_onnxruntimes_loop(name, exporter, batch, tmp_path):
    decoders.torch.manual_seed(1)
    model = getattr(decoders, name)()
    in_torch = decoders.greedy_torch(model, PROMPT[:batch], 16)
    path = decoders.export_decoder(model, tmp_path / f"{name}.onnx", dynamo=exporter == "dynamo")
    expected = decoders.greedy_onnxruntime(path, PROMPT[:batch], 64)
    np.testing.assert_array_equal(expected[:, :16], in_torch)  # the export computes what the model does
    result = lite.Generator(path, context=lite.Context(thread_num=2)).generate(PROMPT[:batch], 64)
    np.testing.assert_array_equal(np.array(result.tokens), expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_dynamo_exporters_sdpa_attention_fuses_and_gives_onnxruntimes_tokens(name, tmp_path):
    """torch's scaled_dot_product_attention as the dynamo exporter writes it (a Where(IsNaN(p), 0, p)
    after the softmax) is one Attention a layer, with nan_to_zero."""
    decoders.torch.manual_seed(1)
    path = decoders.export_decoder(getattr(decoders, name)(attention="sdpa"), tmp_path / f"{name}.onnx", dynamo=True)
    graph, _ = convert_to_graph(path)
    assert [n.attrs["nan_to_zero"] for n in graph.nodes if n.op_type == "Attention"] == [True, True]
    expected = decoders.greedy_onnxruntime(path, PROMPT, 32)
    result = lite.Generator(path, context=lite.Context(thread_num=2)).generate(PROMPT, 32)
    np.testing.assert_array_equal(np.array(result.tokens), expected)
