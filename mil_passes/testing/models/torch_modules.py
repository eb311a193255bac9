"""Small PyTorch modules that exercise real conversions, and a helper to convert them.

Used by the whole-model tests (the interpreter against torch) and by the benchmarks. Torch is
an optional dependency: it is imported when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class TorchCase:
    """A module, its example inputs, and how to declare them to ``ct.convert``."""

    name: str
    build: Callable[[], Any]
    example_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    flexible: dict[int, dict[int, tuple[int, int]]] | None = None  # input -> axis -> (lower, upper)

    def instantiate(self, seed: int = 0):
        """The module with weights drawn from ``seed``, in eval mode."""
        _torch().manual_seed(seed)
        return self.build().eval()


def _torch():
    import torch

    return torch


def conv_stack():
    """Conv2d → BatchNorm → ReLU → MaxPool → grouped strided conv → BatchNorm → AvgPool → Linear."""
    nn = _torch().nn

    class ConvStack(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, dilation=1),
                nn.BatchNorm2d(16),
                nn.AvgPool2d(2, ceil_mode=True),
            )
            self.head = nn.Linear(16 * 2 * 2, 10)

        def forward(self, x):
            return self.head(self.features(x).flatten(1))

    return _randomize_norms(ConvStack())


def transformer_block():
    """Pre-norm attention with softmax and an MLP with GELU, heads split by reshape."""
    torch = _torch()
    nn = torch.nn

    class TransformerBlock(nn.Module):
        def __init__(self, dim=32, heads=4):
            super().__init__()
            self.heads, self.dim, self.scale = heads, dim, (dim // heads) ** -0.5
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            heads, dim = self.heads, self.dim
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            split = lambda t: t.reshape(2, 5, heads, dim // heads).transpose(1, 2)  # noqa: E731
            q, k, v = split(q), split(k), split(v)
            weights = torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1)
            attended = (weights @ v).transpose(1, 2).reshape(2, 5, dim)
            x = x + self.proj(attended)
            return x + self.mlp(self.norm2(x))

    return _randomize_norms(TransformerBlock())


def embedding_where():
    """Embedding lookup, a comparison and ``where``, then a reduction."""
    torch = _torch()
    nn = torch.nn

    class EmbeddingWhere(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 16)

        def forward(self, ids):
            x = self.embed(ids)
            kept = torch.where(x > 0.1, x, torch.zeros_like(x))
            return kept.sum(dim=-1), (ids >= 25).to(torch.int32)

    return EmbeddingWhere()


def streaming_conv(layers: int = 3, channels: int = 8, cached: int = 4):
    """A NeMo-style causal depthwise conv stack keeping ``cat([cache, x], -1)[..., -K:]``."""
    torch = _torch()
    nn: Any = torch.nn  # torch is imported at run time: typed Any, mypy takes nn.Module as a base class

    class StreamingConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(
                nn.Conv1d(channels, channels, cached + 1, groups=channels) for _ in range(layers)
            )

        def forward(self, x, cache):
            next_caches = []
            for i, conv in enumerate(self.convs):
                joined = torch.cat([cache[i], x], dim=-1)
                next_caches.append(joined[:, :, -cached:])
                x = torch.relu(conv(joined))
            return x, torch.stack(next_caches, dim=0)

    return StreamingConv()


def flexible_conv():
    """A 1-D conv with a run-time length, declared with ``ct.RangeDim``."""
    nn = _torch().nn

    class FlexibleConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(4, 6, 3, padding=1)
            self.norm = nn.LayerNorm(6)

        def forward(self, x):
            return self.norm(self.conv(x).transpose(1, 2)).mean(dim=1)

    return FlexibleConv()


def _randomize_norms(module):
    """Give BatchNorm/LayerNorm non-trivial statistics so folding mistakes show."""
    torch = _torch()
    generator = torch.Generator().manual_seed(0)
    for sub in module.modules():
        if isinstance(sub, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
            sub.running_mean.copy_(torch.randn(sub.num_features, generator=generator) * 0.1)
            sub.running_var.copy_(torch.rand(sub.num_features, generator=generator) + 0.5)
        if hasattr(sub, "weight") and isinstance(sub, (torch.nn.LayerNorm,)):
            sub.weight.data.copy_(torch.rand(sub.weight.shape, generator=generator) + 0.5)
            sub.bias.data.copy_(torch.randn(sub.bias.shape, generator=generator) * 0.1)
    return module.eval()


def _normal(*shape):
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


CASES: tuple[TorchCase, ...] = (
    TorchCase("conv_stack", conv_stack, lambda rng: [_normal(1, 3, 16, 16)(rng)]),
    TorchCase("transformer_block", transformer_block, lambda rng: [_normal(2, 5, 32)(rng)]),
    TorchCase(
        "embedding_where",
        embedding_where,
        lambda rng: [rng.integers(0, 50, (2, 7)).astype(np.int32)],
    ),
    TorchCase(
        "streaming_conv",
        streaming_conv,
        lambda rng: [_normal(1, 8, 3)(rng), _normal(3, 1, 8, 4)(rng)],
    ),
    TorchCase(
        "flexible_conv",
        flexible_conv,
        lambda rng: [_normal(1, 4, 10)(rng)],
        flexible={0: {2: (2, 64)}},
    ),
)


def convert(case: TorchCase, module, examples: list[np.ndarray], pass_pipeline=None):
    """Trace ``module`` on ``examples`` and convert it to an ML Program at FLOAT32 (iOS17).

    Inputs are named ``input_0``, ``input_1``, …; axes listed in ``case.flexible`` become
    ``ct.RangeDim``. Returns the MLModel (not loaded: Core ML does not run here).
    """
    import coremltools as ct

    torch = _torch()
    traced = torch.jit.trace(module, tuple(torch.from_numpy(x) for x in examples))
    inputs = []
    for index, example in enumerate(examples):
        shape: list[Any] = list(example.shape)
        for axis, (lower, upper) in (case.flexible or {}).get(index, {}).items():
            shape[axis] = ct.RangeDim(lower_bound=lower, upper_bound=upper, default=example.shape[axis])
        inputs.append(ct.TensorType(name=f"input_{index}", shape=shape, dtype=example.dtype.type))
    return ct.convert(
        traced,
        inputs=inputs,
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        pass_pipeline=pass_pipeline,
        skip_model_load=True,
    )


def torch_outputs(module, examples: list[np.ndarray]) -> list[np.ndarray]:
    """The module's own outputs, as numpy arrays, in order."""
    torch = _torch()
    with torch.no_grad():
        result = module(*(torch.from_numpy(x) for x in examples))
    result = result if isinstance(result, tuple) else (result,)
    return [r.numpy() for r in result]
