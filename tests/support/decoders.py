"""Decoder models with their KV cache as graph inputs and outputs, for the generate loop's tests.

``export_decoder`` exports a Hugging Face causal LM (``gpt2`` or ``llama``, built from a small config with
random weights, nothing downloaded) with Hugging Face's export naming: ``input_ids``, ``attention_mask``,
``position_ids``, ``past_key_values.{i}.key/.value`` [batch, heads, past, head_dim] in; ``logits``,
``present.{i}.key/.value`` out. transformers 5 passes the cache as a ``DynamicCache`` object, not as tensors:
``WithCache`` takes and returns plain tensors and builds the cache object inside ``forward``.

``greedy_onnxruntime`` is onnxruntime's own greedy loop on such a file: the reference the tests compare with.
"""

from __future__ import annotations

import inspect
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


# NOTE: weights drawn wider than Hugging Face's default (0.02), which makes a tiny random model repeat one token
STD = 0.5


def gpt2(layers: int = 2, width: int = 32, heads: int = 2, vocab: int = 100, attention: str = "eager"):
    """GPT-2 LM head model from a tiny config (random weights, eager attention unless ``attention`` says
    "sdpa": torch's scaled_dot_product_attention)."""
    config = transformers.GPT2Config(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=heads, n_positions=512,
                                     bos_token_id=0, eos_token_id=0, initializer_range=STD,
                                     attn_implementation=attention)
    return transformers.GPT2LMHeadModel(config).eval()


def llama(layers: int = 2, width: int = 32, heads: int = 4, kv_heads: int = 2, vocab: int = 100,
          attention: str = "eager"):
    """A Llama-style model (RoPE, RMSNorm, grouped-query attention, SwiGLU) from a tiny config."""
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, max_position_embeddings=256,
                                      initializer_range=STD, attn_implementation=attention)
    return transformers.LlamaForCausalLM(config).eval()


class WithCache(torch.nn.Module):
    """A causal LM over explicit cache tensors: (input_ids, attention_mask, position_ids, k0, v0, k1, v1, ...)
    -> (logits, present k0, v0, ...)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        # NOTE: transformers 5.x renamed the argument and the output past_key_values -> cache
        self.argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(self, input_ids, attention_mask, position_ids, *past):
        pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=True, **{self.argument: transformers.DynamicCache(pairs)})
        present = [t for layer in getattr(out, self.argument).layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def names(layers: int) -> tuple[list[str], list[str]]:
    """The graph's input and output names, in order."""
    inputs = ["input_ids", "attention_mask", "position_ids"]
    outputs = ["logits"]
    for i in range(layers):
        inputs += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outputs += [f"present.{i}.key", f"present.{i}.value"]
    return inputs, outputs


def sample_inputs(model, batch: int = 2, seq: int = 3, past: int = 4) -> tuple:
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=generator)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    positions = torch.arange(past, past + seq).repeat(batch, 1)
    cache = [torch.randn(batch, kv_heads, past, head_dim, generator=generator)
             for _ in range(2 * config.num_hidden_layers)]
    return (ids, mask, positions, *cache)


def export_decoder(model, path: Path, dynamo: bool = False) -> Path:
    """Exports ``model`` (from ``gpt2()`` or ``llama()``) with its cache in and out; returns ``path``.

    The file computes what ``model`` computed before; after the TorchScript export ``model`` itself no longer
    does (measured: its greedy tokens change), so run ``greedy_torch`` first."""
    layers = model.config.num_hidden_layers
    inputs, outputs = names(layers)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for name in inputs[3:] + outputs[1:]:
        axes[name] = {0: "batch", 2: "past" if name.startswith("past") else "total"}
    sample = sample_inputs(model)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:  # NOTE: torch.export takes shapes per argument (the cache is one *args tuple), not axes
            auto = torch.export.Dim.AUTO
            shapes = ({0: auto, 1: auto},) * 3 + (({0: auto, 2: auto},) * (2 * layers),)
            torch.onnx.export(WithCache(model), sample, str(path), input_names=inputs, output_names=outputs,
                              dynamic_shapes=shapes, dynamo=True, opset_version=18, external_data=False)
        else:
            buffer = io.BytesIO()
            torch.onnx.export(WithCache(model), sample, buffer, input_names=inputs, output_names=outputs,
                              dynamic_axes=axes, dynamo=False, opset_version=17)
            path.write_bytes(buffer.getvalue())
    return path


def greedy_torch(model, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    """The model's own greedy loop in torch, the whole sequence each step: [batch, new_tokens] int64."""
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1)[:, None]], dim=1)
    return ids[:, prompt.shape[1]:].numpy()


def greedy_onnxruntime(path: Path | str, prompt: np.ndarray, new_tokens: int, exact: bool = False) -> np.ndarray:
    """onnxruntime's greedy loop on a decoder exported as above: [batch, new_tokens] int64. ``exact``:
    ONNX's reference evaluator instead where onnxruntime's integer products saturate on this CPU
    (``tests.support.oracle.onnxruntime_saturates``: a model quantized by ``quantize_dynamic``)."""
    import onnx
    import onnxruntime

    from tests.support.oracle import onnxruntime_saturates, reference_evaluator

    if exact and onnxruntime_saturates():
        model = onnx.load(str(path))
        run, inputs = reference_evaluator(model).run, [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
                                                       for i in model.graph.input]
    else:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        run, inputs = session.run, [(i.name, i.shape) for i in session.get_inputs()]
    batch, length = prompt.shape
    feed = {"input_ids": prompt.astype(np.int64), "attention_mask": np.ones((batch, length), np.int64),
            "position_ids": np.tile(np.arange(length, dtype=np.int64), (batch, 1))}
    for name, shape in inputs[3:]:
        feed[name] = np.zeros((batch, shape[1], 0, shape[3]), np.float32)
    tokens = []
    for _ in range(new_tokens):
        logits, *present = run(None, feed)
        token = logits[:, -1].argmax(-1).astype(np.int64)
        tokens.append(token)
        total = feed["attention_mask"].shape[1]
        feed = {"input_ids": token[:, None], "attention_mask": np.ones((batch, total + 1), np.int64),
                "position_ids": np.full((batch, 1), total, np.int64),
                **{name: p for (name, _), p in zip(inputs[3:], present, strict=True)}}
    return np.stack(tokens, axis=1)
