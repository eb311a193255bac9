"""Example programs: the reported streaming-cache reproducer (docs/evidence.md §1), also the benchmark."""

from __future__ import annotations

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types

DTYPES = {"fp16": (types.fp16, np.float16), "fp32": (types.fp32, np.float32)}


def streaming_cache_program(
    layers: int = 24,
    channels: int = 1024,
    new_frames: int = 7,
    cached_frames: int = 8,
    dtype: str = "fp16",
    windows_on_inputs: bool = False,
    opset: ct.target = ct.target.iOS17,
    seed: int = 0,
) -> Program:
    """A stack of causal depthwise convs that carries a cache of ``cached_frames`` per layer.

    Inputs ``cache [1, layers, channels, K]`` and ``x [1, channels, T]``; per layer::

        %layer_cache = slice_by_index(x=%caches, ..., squeeze_mask=[True, False, False, False])
        %joined      = concat(values=(%layer_cache, %h), axis=-1)            # [1, C, K + T]
        %h           = conv(x=%joined, weight=[C, 1, K + 1], groups=C, pad_type="valid")
        %next_cache  = slice_by_index(x=%joined, begin=[0, 0, -K], ...)      # joined[..., -K:]

    outputs ``new_cache = transpose(stack(next_caches, axis=0))`` and the last ``h``. With
    ``windows_on_inputs`` the next cache is cut from the concat's inputs instead (the form the
    Neural Engine compiles). Weights are seeded, scaled to keep activations of order one.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got '{dtype}'")
    if min(layers, channels, new_frames, cached_frames) < 1:
        raise ValueError("layers, channels, new_frames and cached_frames must be at least 1")
    mil_dtype, np_dtype = DTYPES[dtype]
    kernel = cached_frames + 1
    rng = np.random.default_rng(seed)
    scale = np.float32(1.0 / np.sqrt(kernel))
    weights = [
        (rng.standard_normal((channels, 1, kernel), dtype=np.float32) * scale).astype(np_dtype) for _ in range(layers)
    ]
    specs = [
        mb.TensorSpec((1, layers, channels, cached_frames), dtype=mil_dtype),
        mb.TensorSpec((1, channels, new_frames), dtype=mil_dtype),
    ]

    @mb.program(input_specs=specs, opset_version=opset)
    def program(cache, x):
        caches = mb.transpose(x=cache, perm=[1, 0, 2, 3], name="caches")
        h, next_caches = x, []
        for layer in range(layers):
            layer_cache = mb.slice_by_index(
                x=caches,
                begin=[layer, 0, 0, 0],
                end=[layer + 1, 0, 0, 0],
                end_mask=[False, True, True, True],
                squeeze_mask=[True, False, False, False],
                name=f"layer{layer}_cache",
            )
            joined = mb.concat(values=(layer_cache, h), axis=-1, name=f"layer{layer}_joined")
            if windows_on_inputs:
                next_cache = _cache_from_inputs(layer_cache, h, cached_frames, new_frames, layer)
            else:
                next_cache = mb.slice_by_index(
                    x=joined,
                    begin=[0, 0, -cached_frames],
                    end=[0, 0, 0],
                    end_mask=[True, True, True],
                    name=f"layer{layer}_next_cache",
                )
            h = mb.conv(x=joined, weight=weights[layer], groups=channels, pad_type="valid", name=f"layer{layer}_conv")
            next_caches.append(next_cache)
        stacked = mb.stack(values=next_caches, axis=0, name="next_caches")
        new_cache = mb.transpose(x=stacked, perm=[1, 0, 2, 3], name="new_cache")
        return new_cache, h

    return program


def _cache_from_inputs(layer_cache, h, cached_frames: int, new_frames: int, layer: int):
    """``concat(layer_cache, h)[..., -K:]`` written as slices of the concat's inputs."""
    name = f"layer{layer}_next_cache"
    if new_frames >= cached_frames:
        return mb.slice_by_index(
            x=h,
            begin=[0, 0, new_frames - cached_frames],
            end=[0, 0, 0],
            end_mask=[True, True, True],
            name=name,
        )
    kept = mb.slice_by_index(
        x=layer_cache,
        begin=[0, 0, new_frames],
        end=[0, 0, 0],
        end_mask=[True, True, True],
        name=f"{name}_kept",
    )
    return mb.concat(values=(kept, h), axis=-1, name=name)
