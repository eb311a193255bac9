"""A stateful Llama decoder as users convert it for on-device generation, and torch stepping it.

The recipe is coremltools' stateful-model guide's: a ``transformers`` ``LlamaForCausalLM`` (built
from a :class:`LlamaShape`, random weights, nothing downloaded) whose KV cache lives in two
registered fp16 buffers, ``keyCache`` and ``valueCache`` ``[layers, 1, kv_heads, context,
head_dim]``, converted to iOS18 states (``ct.StateType``, fp16: Core ML takes fp16 states only).
Each prediction takes ``inputIds [1, T]`` and a float ``causalMask [1, 1, T, end]``; the position
the new keys and values are written at is ``end - T``, taken from the mask's length, and the cache
is written by slice assignment (``cache[layer, :, :, begin:end] = k``: ``read_state →
slice_update → coreml_update_state``). Attention is transformers' SDPA
(``torch.nn.functional.scaled_dot_product_attention``, grouped-query heads repeated). Both
sequence dims are ``ct.RangeDim``; the program is an iOS18 mlprogram at FLOAT16.

:func:`compress` applies ``coremltools.optimize.coreml`` to the converted model: int8 per channel,
int4 per block, or 4-bit palettization (``constexpr_blockwise_shift_scale`` /
``constexpr_lut_to_dense``). :func:`decode_feeds` draws a prompt and the decode steps after it;
:class:`TorchStepper` runs the torch module on them from zero caches, the reference the benchmark
times and the tests compare with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .real import _transformers

Inputs = dict[str, np.ndarray]

STATE_NAMES = ("keyCache", "valueCache")
COMPRESSIONS = ("int8", "int4", "palettized")


@dataclass(frozen=True)
class LlamaShape:
    """The widths of a Llama decoder, its layer count and its cache length (``context``)."""

    name: str
    vocab: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int
    context: int = 256
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def cache_shape(self) -> tuple[int, int, int, int, int]:
        """The shape of each of the two cache states."""
        return (self.layers, 1, self.kv_heads, self.context, self.head_dim)

    def with_layers(self, layers: int) -> "LlamaShape":
        """The same widths with ``layers`` decoder layers."""
        return dataclasses.replace(self, layers=layers)

    def parameters(self) -> int:
        """Weights of the module (the embedding counted once: input and output share it)."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.vocab * self.hidden + self.layers * layer + self.hidden


TINY = LlamaShape("tiny", vocab=96, hidden=32, intermediate=64, heads=4, kv_heads=2, layers=2, context=16)
#: SmolLM-135M's widths (HuggingFaceTB/SmolLM-135M's config.json).
SMOLLM_135M = LlamaShape(
    "smollm_135m", vocab=49152, hidden=576, intermediate=1536, heads=9, kv_heads=3, layers=30, rope_theta=100000.0
)
#: Llama-3.2-1B's widths (meta-llama/Llama-3.2-1B's config.json), its llama3 RoPE scaling included.
LLAMA_1B = LlamaShape(
    "llama_1b",
    vocab=128256,
    hidden=2048,
    intermediate=8192,
    heads=32,
    kv_heads=8,
    layers=16,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
)
SHAPES = {shape.name: shape for shape in (TINY, SMOLLM_135M, LLAMA_1B)}


def _config(shape: LlamaShape):
    transformers = _transformers()
    return transformers.LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=max(shape.context, 64),
        rope_theta=shape.rope_theta,
        rope_scaling=shape.rope_scaling,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )


def build(shape: LlamaShape, seed: int = 0):
    """The stateful decoder of ``shape``: ``forward(input_ids, causal_mask) -> logits``, its caches
    zero, weights drawn from ``seed``, in eval mode."""
    import torch
    from transformers.cache_utils import Cache

    class SliceUpdateKeyValueCache(Cache):
        """The guide's cache: every layer's keys and values written in place at ``begin:end``."""

        def __init__(self):
            super().__init__()
            self.past_seen_tokens = 0
            self.k_cache = torch.zeros(shape.cache_shape, dtype=torch.float16)
            self.v_cache = torch.zeros(shape.cache_shape, dtype=torch.float16)

        def update(self, k_state, v_state, layer_idx, cache_kwargs=None):
            position = cache_kwargs["cache_position"]
            begin, end = self.past_seen_tokens, self.past_seen_tokens + position.shape[-1]
            self.k_cache[layer_idx, :, : k_state.shape[1], begin:end, :] = k_state.half()
            self.v_cache[layer_idx, :, : v_state.shape[1], begin:end, :] = v_state.half()
            keys = self.k_cache[layer_idx, :, :, :end, :].to(k_state.dtype)
            values = self.v_cache[layer_idx, :, :, :end, :].to(v_state.dtype)
            return keys, values

        def get_seq_length(self, layer_idx=0):
            return self.past_seen_tokens

    class KvCacheStateLlama(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = _transformers().LlamaForCausalLM(_config(shape))
            self.kv_cache = SliceUpdateKeyValueCache()
            self.register_buffer("keyCache", self.kv_cache.k_cache)
            self.register_buffer("valueCache", self.kv_cache.v_cache)

        @torch.no_grad()
        def forward(self, input_ids, causal_mask):
            self.kv_cache.past_seen_tokens = causal_mask.shape[-1] - input_ids.shape[-1]
            return self.model(
                input_ids=input_ids, attention_mask=causal_mask, past_key_values=self.kv_cache, use_cache=True
            ).logits

    torch.manual_seed(seed)
    return KvCacheStateLlama().eval()


def causal_mask(tokens: int, end: int) -> np.ndarray:
    """``[1, 1, tokens, end]``: 0 where a new token may attend (positions up to its own), -inf after."""
    past = end - tokens
    positions = np.arange(end)[None, :]
    own = past + np.arange(tokens)[:, None]
    return np.where(positions > own, -np.inf, 0.0).astype(np.float16)[None, None]


def decode_feeds(shape: LlamaShape, prompt: int = 4, steps: int = 3, seed: int = 0) -> list[Inputs]:
    """A prompt of ``prompt`` random tokens, then ``steps`` single-token decode steps."""
    if prompt + steps > shape.context:
        raise ValueError(f"{prompt} prompt tokens and {steps} steps do not fit a context of {shape.context}")
    rng = np.random.default_rng(seed)
    feeds = [
        {
            "inputIds": rng.integers(0, shape.vocab, (1, prompt)).astype(np.int32),
            "causalMask": causal_mask(prompt, prompt),
        }
    ]
    for step in range(steps):
        end = prompt + step + 1
        feeds.append(
            {"inputIds": rng.integers(0, shape.vocab, (1, 1)).astype(np.int32), "causalMask": causal_mask(1, end)}
        )
    return feeds


def convert(module, shape: LlamaShape, *, pass_pipeline=None):
    """The iOS18 mlprogram (FLOAT16) of ``module``, its caches as fp16 states, both sequence dims
    ``RangeDim(1, context)``; the module's caches are zero again afterwards."""
    import coremltools as ct
    import torch

    example = decode_feeds(dataclasses.replace(shape, context=max(shape.context, 3)), prompt=2, steps=0)[0]
    _zero_caches(module)
    traced = torch.jit.trace(module, (torch.from_numpy(example["inputIds"]), _mask_tensor(example)))
    _zero_caches(module)
    query = ct.RangeDim(lower_bound=1, upper_bound=shape.context, default=1)
    end = ct.RangeDim(lower_bound=1, upper_bound=shape.context, default=1)
    return ct.convert(
        traced,
        inputs=[
            ct.TensorType(shape=(1, query), dtype=np.int32, name="inputIds"),
            ct.TensorType(shape=(1, 1, query, end), dtype=np.float16, name="causalMask"),
        ],
        outputs=[ct.TensorType(dtype=np.float16, name="logits")],
        states=[
            ct.StateType(wrapped_type=ct.TensorType(shape=shape.cache_shape, dtype=np.float16), name=name)
            for name in STATE_NAMES
        ],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT16,
        minimum_deployment_target=ct.target.iOS18,
        pass_pipeline=pass_pipeline,
        skip_model_load=True,
    )


def compress(mlmodel, kind: str):
    """``mlmodel`` with its weights compressed by ``coremltools.optimize.coreml``: ``int8``
    (linear symmetric, per output channel), ``int4`` (linear symmetric, blocks of 32 along the
    input axis) or ``palettized`` (4-bit uniform LUTs, one per group of 16 output channels)."""
    import coremltools.optimize.coreml as cto

    if kind == "int8":
        op_config: Any = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
        return cto.linear_quantize_weights(mlmodel, cto.OptimizationConfig(global_config=op_config))
    if kind == "int4":
        op_config = cto.OpLinearQuantizerConfig(
            mode="linear_symmetric", dtype="int4", granularity="per_block", block_size=32
        )
        return cto.linear_quantize_weights(mlmodel, cto.OptimizationConfig(global_config=op_config))
    if kind == "palettized":
        op_config = cto.OpPalettizerConfig(mode="uniform", nbits=4, granularity="per_grouped_channel", group_size=16)
        return cto.palettize_weights(mlmodel, cto.OptimizationConfig(global_config=op_config))
    raise ValueError(f"unknown compression '{kind}' (known: {', '.join(COMPRESSIONS)})")


def _mask_tensor(feed: Inputs):
    """The feed's mask as torch takes it: fp32 (the module computes in fp32; the program in fp16)."""
    import torch

    return torch.from_numpy(feed["causalMask"].astype(np.float32))


def _zero_caches(module) -> None:
    for buffer in module.buffers():
        buffer.zero_()


class TorchStepper:
    """The torch module stepped on feeds from zero caches: the reference of every step."""

    def __init__(self, module):
        self.module = module
        _zero_caches(module)

    def step(self, feed: Inputs) -> np.ndarray:
        """The logits of one prediction (fp32); the caches move on."""
        import torch

        with torch.no_grad():
            return self.module(torch.from_numpy(feed["inputIds"]), _mask_tensor(feed)).numpy()

    def caches(self) -> dict[str, np.ndarray]:
        """A copy of each cache buffer, by state name."""
        return {name: getattr(self.module, name).numpy().copy() for name in STATE_NAMES}
