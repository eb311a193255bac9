"""Stateful models (iOS18 ``ct.StateType``) at tiny sizes with random weights, stepped like a stream.

- :func:`streaming_conv`: a causal depthwise conv whose cache is a registered buffer converted to a
  state: ``joined = cat([cache, x], -1)``, the conv reads ``joined``, then ``cache[:, :, :] =
  joined[..., -K:]`` (torch's in-place slice assignment converts to ``read_state → slice_update →
  coreml_update_state``; ``cache.copy_(...)`` does not convert).
- :func:`kv_cache_attention`: a GPT-2-style attention step whose keys and values are states
  written at a run-time position ``pos`` (``k_cache[:, :, pos:pos + T] = k``), attending to the
  positions written so far.

Each :class:`StatefulModel` draws the inputs of every step; :func:`torch_steps` runs the torch
module on them from zero buffers, :func:`convert` declares the buffers as fp16 states (Core ML
takes fp16 states only) and :func:`reference_steps` steps the converted model on the reference
interpreter with ``make_state`` / ``predict(state=)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class StatefulModel:
    """A module builder, the inputs of each step, and the module's state buffers (name → shape)."""

    name: str
    build: Callable[[], Any]
    step_inputs: Callable[[np.random.Generator, int], Inputs]  # (rng, step index) -> inputs
    states: dict[str, tuple[int, ...]]

    def instantiate(self, seed: int = 0):
        """The module with weights drawn from ``seed``, in eval mode, its buffers zero."""
        import torch

        torch.manual_seed(seed)
        return self.build().eval()

    def feeds(self, steps: int, seed: int = 0) -> list[Inputs]:
        """The inputs of ``steps`` steps."""
        rng = np.random.default_rng(seed)
        return [self.step_inputs(rng, step) for step in range(steps)]


def streaming_conv(cached: int, channels: int = 8, frames: int = 4) -> StatefulModel:
    """A depthwise causal conv (kernel ``cached + 1``) over ``frames`` new frames, its last
    ``cached`` input frames kept in the state ``cache`` ``[1, channels, cached]``."""

    def build():
        import torch

        class StreamingConv(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv1d(channels, channels, cached + 1, groups=channels)
                self.register_buffer("cache", torch.zeros(1, channels, cached, dtype=torch.float16))

            def forward(self, x):
                joined = torch.cat([self.cache.float(), x], dim=-1)
                self.cache[:, :, :] = joined[..., -cached:].half()
                return self.conv(joined)

        return StreamingConv()

    def step_inputs(rng: np.random.Generator, step: int) -> Inputs:
        return {"x": rng.standard_normal((1, channels, frames)).astype(np.float32)}

    return StatefulModel(f"streaming_conv_k{cached}", build, step_inputs, {"cache": (1, channels, cached)})


def kv_cache_attention(max_positions: int = 16, tokens: int = 1, embed: int = 16, heads: int = 2) -> StatefulModel:
    """One causal self-attention step of GPT-2's form over ``tokens`` new tokens at run-time
    position ``pos``: keys and values written into the states ``k_cache`` / ``v_cache``
    ``[1, heads, max_positions, head_dim]`` at ``pos:pos + tokens``, each new token attending to
    every position up to its own."""
    head_dim = embed // heads

    def build():
        import torch

        class KVCacheAttention(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(embed, 3 * embed)
                self.proj = torch.nn.Linear(embed, embed)
                shape = (1, heads, max_positions, head_dim)
                self.register_buffer("k_cache", torch.zeros(shape, dtype=torch.float16))
                self.register_buffer("v_cache", torch.zeros(shape, dtype=torch.float16))

            def forward(self, x, pos):
                start = pos.squeeze(0)
                q, k, v = self.qkv(x).split(embed, dim=-1)
                q, k, v = (t.view(1, tokens, heads, head_dim).transpose(1, 2) for t in (q, k, v))
                self.k_cache[:, :, start : start + tokens, :] = k.half()
                self.v_cache[:, :, start : start + tokens, :] = v.half()
                keys, values = self.k_cache.float(), self.v_cache.float()
                scores = q @ keys.transpose(-1, -2) / head_dim**0.5
                positions = torch.arange(max_positions).view(1, 1, 1, max_positions)
                query_positions = (start + torch.arange(tokens)).view(1, 1, tokens, 1)
                scores = scores.masked_fill(positions > query_positions, float("-inf"))
                attended = scores.softmax(-1) @ values
                return self.proj(attended.transpose(1, 2).reshape(1, tokens, embed))

        return KVCacheAttention()

    def step_inputs(rng: np.random.Generator, step: int) -> Inputs:
        return {
            "x": rng.standard_normal((1, tokens, embed)).astype(np.float32),
            "pos": np.array([step * tokens], dtype=np.int32),
        }

    shape = (1, heads, max_positions, head_dim)
    return StatefulModel(f"kv_cache_attention_t{tokens}", build, step_inputs, {"k_cache": shape, "v_cache": shape})


MODELS = (streaming_conv(40), streaming_conv(72), kv_cache_attention(), kv_cache_attention(tokens=2))
BY_NAME = {model.name: model for model in MODELS}


def torch_steps(module, feeds: list[Inputs]) -> tuple[list[list[np.ndarray]], dict[str, np.ndarray]]:
    """The module's outputs at each step, and its state buffers after the last, from zero buffers."""
    import torch

    for buffer in module.buffers():
        buffer.zero_()
    outputs = []
    with torch.no_grad():
        for feed in feeds:
            result = module(*(torch.from_numpy(value) for value in feed.values()))
            result = result if isinstance(result, tuple) else (result,)
            outputs.append([r.numpy().copy() for r in result])
    states = {name: buffer.numpy().copy() for name, buffer in module.named_buffers()}
    return outputs, states


def convert(model: StatefulModel, module, feed: Inputs, *, pass_pipeline=None, fp16: bool = False):
    """The ML Program (iOS18) of ``module`` traced on ``feed``, its buffers declared as fp16 states."""
    import coremltools as ct
    import torch

    for buffer in module.buffers():
        buffer.zero_()
    with torch.no_grad():
        traced = torch.jit.trace(module, tuple(torch.from_numpy(v) for v in feed.values()), check_trace=False)
    for buffer in module.buffers():  # tracing ran a step
        buffer.zero_()
    return ct.convert(
        traced,
        inputs=[ct.TensorType(name=name, shape=value.shape, dtype=value.dtype.type) for name, value in feed.items()],
        states=[
            ct.StateType(wrapped_type=ct.TensorType(shape=shape, dtype=np.float16), name=name)
            for name, shape in model.states.items()
        ],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS18,
        pass_pipeline=pass_pipeline,
        skip_model_load=True,
    )


def reference_steps(mlmodel, feeds: list[Inputs]) -> tuple[list[list[np.ndarray]], dict[str, np.ndarray]]:
    """The converted model stepped on the reference interpreter from ``make_state(mlmodel)``:
    its outputs at each step and its states after the last."""
    from ...reference import make_state, predict

    state = make_state(mlmodel)
    outputs = [list(predict(mlmodel, feed, state=state).values()) for feed in feeds]
    return outputs, {name: state.read_state(name) for name in state.names}
