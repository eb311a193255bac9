"""Runs the reference interpreter's float kernels on fixed inputs and reports their outputs.

Run as a script (``python tests/numerics_probe.py``) under a chosen ``NPY_DISABLE_CPU_FEATURES``:
it prints one JSON object, case name -> sha256 of the output's dtype, shape and bytes (and under
``FEATURES_KEY`` the CPU features numpy enabled), so two
runs under different numpy CPU dispatch settings can be compared bit for bit
(``tests/test_numerics_dispatch.py``). ``--save FILE.npz`` also writes the outputs themselves,
to count which elements differ. ``--only SUBSTRING`` keeps the cases whose name contains it.

Inputs: every finite fp16 value for the unary ops and activations; for binary ops every finite
fp16 ``x`` against a fixed permutation of them as ``y`` (and a few fixed ``y``); seeded random
tensors for reductions, softmax, normalizations, matmul/linear and conv at fp16 and fp32.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Callable

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from numpy._core._multiarray_umath import __cpu_features__

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_helpers import run  # noqa: E402

FEATURES_KEY = "(numpy CPU features enabled)"
FP16_BITS = np.arange(2**16, dtype=np.uint16).view(np.float16)
FP16 = FP16_BITS[np.isfinite(FP16_BITS)]

UNARY = (
    "abs acos asin atan atanh ceil cos cosh erf exp exp2 floor round sign sin sinh sqrt square tan tanh "
    "log rsqrt inverse"
).split()
# name -> builder of the op on v with its parameters of numpy type t (x's dtype, as MIL requires)
ACTIVATIONS: dict[str, Callable] = {
    "sigmoid": lambda v, t: mb.sigmoid(x=v),
    "silu": lambda v, t: mb.silu(x=v),
    "softplus": lambda v, t: mb.softplus(x=v),
    "softsign": lambda v, t: mb.softsign(x=v),
    "relu": lambda v, t: mb.relu(x=v),
    "relu6": lambda v, t: mb.relu6(x=v),
    "gelu_exact": lambda v, t: mb.gelu(x=v, mode="EXACT"),
    "gelu_tanh": lambda v, t: mb.gelu(x=v, mode="TANH_APPROXIMATION"),
    "gelu_sigmoid": lambda v, t: mb.gelu(x=v, mode="SIGMOID_APPROXIMATION"),
    "elu": lambda v, t: mb.elu(x=v, alpha=t(0.75)),
    "leaky_relu": lambda v, t: mb.leaky_relu(x=v, alpha=t(0.1)),
    "scaled_tanh": lambda v, t: mb.scaled_tanh(x=v, alpha=t(1.5), beta=t(0.625)),
    "softplus_parametric": lambda v, t: mb.softplus_parametric(
        x=v, alpha=np.array([0.75], t), beta=np.array([1.25], t)
    ),
    "sigmoid_hard": lambda v, t: mb.sigmoid_hard(x=v, alpha=t(0.2), beta=t(0.5)),
    "linear_activation": lambda v, t: mb.linear_activation(x=v, alpha=t(0.3), beta=t(-0.1)),
    "clamped_relu": lambda v, t: mb.clamped_relu(x=v, alpha=t(0.1), beta=t(6.0)),
    "thresholded_relu": lambda v, t: mb.thresholded_relu(x=v, alpha=t(0.5)),
}
BINARY = "add sub mul real_div floor_div mod pow maximum minimum".split()
FIXED_Y = (0.5, 2.0, 3.0, -1.5, 7.0, 0.3330078125)
REDUCTIONS = (
    "reduce_sum reduce_mean reduce_prod reduce_max reduce_min reduce_l1_norm reduce_l2_norm "
    "reduce_sum_square reduce_log_sum reduce_log_sum_exp"
).split()


def one(build: Callable, x: np.ndarray, opset=ct.target.iOS17) -> np.ndarray:
    (out,) = run(lambda x: build(x), {"x": x}, opset)
    return out


def two(build: Callable, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    (out,) = run(build, {"x": x, "y": y})
    return out


def unary_cases():
    x = FP16.reshape(1, -1)
    for op_type in UNARY:
        yield f"unary/{op_type}/fp16", lambda op_type=op_type: one(lambda v: getattr(mb, op_type)(x=v), x)
        yield (
            f"unary/{op_type}/fp32",
            lambda op_type=op_type: one(lambda v: getattr(mb, op_type)(x=v), _fp32_sample()),
        )


def _fp32_sample() -> np.ndarray:
    """Every finite fp16 value widened, and as many seeded fp32 values with exponents in [-24, 8)."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**23, FP16.size) | (rng.integers(127 - 24, 127 + 8, FP16.size) << 23)
    bits |= rng.integers(0, 2, FP16.size) << 31
    spread = bits.astype(np.uint32).view(np.float32)
    return np.concatenate([FP16.astype(np.float32), spread]).reshape(1, -1)


def activation_cases():
    for tag, x in (("fp16", FP16.reshape(1, 1, -1)), ("fp32", _fp32_sample().reshape(1, 1, -1))):
        for name, build in ACTIVATIONS.items():
            yield (
                f"activation/{name}/{tag}",
                lambda build=build, x=x: one(lambda v: build(v, x.dtype.type), x),
            )


def binary_cases():
    x = FP16.reshape(1, -1)
    y = np.random.default_rng(11).permutation(FP16).reshape(1, -1)
    for op_type in BINARY:
        build = lambda x, y, op_type=op_type: getattr(mb, op_type)(x=x, y=y)  # noqa: E731
        yield f"binary/{op_type}/fp16/permuted", lambda build=build: two(build, x, y)
        yield (
            f"binary/{op_type}/fp16/fixed",
            lambda build=build: two(
                build, np.broadcast_to(x, (len(FIXED_Y), x.size)).copy(), np.array(FIXED_Y, np.float16).reshape(-1, 1)
            ),
        )
        wide = _fp32_sample()
        wide_y = np.random.default_rng(12).permutation(wide.reshape(-1)).reshape(wide.shape)
        yield f"binary/{op_type}/fp32/permuted", lambda build=build: two(build, wide, wide_y)


def _tensor(dtype, shape, seed: int, scale: float = 3.0) -> np.ndarray:
    """Seeded values in about [-2 scale, 2 scale], made with integer and IEEE arithmetic only (numpy's
    float64 transcendental loops would give different inputs under different dispatch settings)."""
    steps = np.random.default_rng(seed).integers(-(2**20), 2**20, shape) + np.random.default_rng(seed + 1).integers(
        -(2**20), 2**20, shape
    )
    return (steps * (scale / 2**20)).astype(dtype)


def reduction_cases():
    for dtype, tag in ((np.float16, "fp16"), (np.float32, "fp32")):
        x = _tensor(dtype, (16, 48, 257), 3, scale=1.0)
        positive = np.abs(x) + dtype(0.5)
        for op_type in REDUCTIONS:
            data = positive if op_type in ("reduce_log_sum", "reduce_prod") else x
            for axes in ([-1], [1], [0, 2]):
                yield (
                    f"reduce/{op_type}/{tag}/axes{axes}",
                    lambda op_type=op_type, data=data, axes=axes: one(
                        lambda v: getattr(mb, op_type)(x=v, axes=axes), data
                    ),
                )
        for axis in (-1, 1):
            yield f"softmax/{tag}/axis{axis}", lambda x=x, axis=axis: one(lambda v: mb.softmax(x=v, axis=axis), x)


def norm_cases():
    for dtype, tag in ((np.float16, "fp16"), (np.float32, "fp32")):
        x = _tensor(dtype, (4, 8, 24, 24), 5)
        channels = np.linspace(0.5, 1.5, 8).astype(dtype)
        yield f"norm/layer_norm/{tag}", lambda x=x: one(lambda v: mb.layer_norm(x=v, axes=[-1, -2]), x)
        yield (
            f"norm/instance_norm/{tag}",
            lambda x=x, c=channels: one(lambda v: mb.instance_norm(x=v, gamma=c, beta=c - c.dtype.type(1)), x),
        )
        yield (
            f"norm/batch_norm/{tag}",
            lambda x=x, c=channels: one(
                lambda v: mb.batch_norm(x=v, mean=c - c.dtype.type(1), variance=c, gamma=c, beta=c), x
            ),
        )
        yield f"norm/l2_norm/{tag}", lambda x=x: one(lambda v: mb.l2_norm(x=v), x)
        yield (
            f"norm/local_response_norm/{tag}",
            lambda x=x: one(lambda v: mb.local_response_norm(x=v, size=5, alpha=1e-2, beta=0.75, k=1.0), x),
        )


def linear_algebra_cases():
    for dtype, tag in ((np.float16, "fp16"), (np.float32, "fp32")):
        a = _tensor(dtype, (4, 64, 96), 21, scale=1.0)
        b = _tensor(dtype, (4, 96, 80), 22, scale=1.0)
        weight = _tensor(dtype, (40, 96), 23, scale=0.5)
        bias = _tensor(dtype, (40,), 24)
        yield f"matmul/{tag}", lambda a=a, b=b: two(lambda x, y: mb.matmul(x=x, y=y), a, b)
        yield f"linear/{tag}", lambda a=a, w=weight, c=bias: one(lambda v: mb.linear(x=v, weight=w, bias=c), a)
        image = _tensor(dtype, (2, 8, 20, 20), 25, scale=1.0)
        kernel = _tensor(dtype, (16, 8, 3, 3), 26, scale=0.5)
        yield f"conv/{tag}", lambda x=image, w=kernel: one(lambda v: mb.conv(x=v, weight=w, pad_type="same"), x)
        wide, filters = _tensor(dtype, (1, 32, 80, 80), 27, scale=1.0), _tensor(dtype, (8, 32, 3, 3), 28, scale=0.5)
        yield (  # im2col columns of 14.7 MB: built a block of output rows at a time
            f"conv_blocked/{tag}",
            lambda x=wide, w=filters: one(lambda v: mb.conv(x=v, weight=w, pad_type="same"), x),
        )
        square, square_filters = (
            _tensor(dtype, (1, 32, 24, 23), 29, scale=1.0),
            _tensor(dtype, (32, 32, 3, 3), 30, scale=0.5),
        )
        yield (  # 32 channels in and out, 3x3, stride 1, 144 tiles: Winograd's F(2x2, 3x3)
            f"conv_winograd/{tag}",
            lambda x=square, w=square_filters, c=bias[:32]: one(
                lambda v: mb.conv(x=v, weight=w, bias=c, pad_type="same"), x
            ),
        )
        yield (
            f"conv_transpose/{tag}",
            lambda x=image, w=kernel: one(
                lambda v: mb.conv_transpose(x=v, weight=np.ascontiguousarray(w.transpose(1, 0, 2, 3)), strides=[2, 2]),
                x,
            ),
        )


def pool_and_recurrent_cases():
    for dtype, tag in ((np.float16, "fp16"), (np.float32, "fp32")):
        image = _tensor(dtype, (2, 8, 20, 20), 31, scale=1.0)
        window = {"kernel_sizes": [3, 3], "strides": [2, 2], "pad_type": "valid"}
        yield f"pool/avg_pool/{tag}", lambda x=image: one(lambda v: mb.avg_pool(x=v, **window), x)
        yield f"pool/l2_pool/{tag}", lambda x=image: one(lambda v: mb.l2_pool(x=v, **window), x)
        steps, batch, inputs, hidden = 12, 3, 16, 24
        sequence = _tensor(dtype, (steps, batch, inputs), 32, scale=1.0)
        weights = {
            "weight_ih": _tensor(dtype, (4 * hidden, inputs), 33, scale=0.3),
            "weight_hh": _tensor(dtype, (4 * hidden, hidden), 34, scale=0.3),
            "bias": _tensor(dtype, (4 * hidden,), 35, scale=0.3),
        }
        state = np.zeros((batch, hidden), dtype)
        yield (
            f"recurrent/lstm/{tag}",
            lambda x=sequence, w=weights, h=state: one(
                lambda v: mb.lstm(x=v, initial_h=h, initial_c=h, output_sequence=True, **w)[0], x
            ),
        )
        gru = {name: value[: 3 * hidden] for name, value in weights.items()}
        yield (
            f"recurrent/gru/{tag}",
            lambda x=sequence, w=gru, h=state: one(lambda v: mb.gru(x=v, initial_h=h, output_sequence=True, **w)[0], x),
        )


FAMILIES = (
    unary_cases,
    activation_cases,
    binary_cases,
    reduction_cases,
    norm_cases,
    linear_algebra_cases,
    pool_and_recurrent_cases,
)


def digest(value: np.ndarray) -> str:
    value = np.ascontiguousarray(value)
    header = f"{value.dtype.str}{value.shape}".encode()
    return hashlib.sha256(header + value.tobytes()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="also write every output to this .npz")
    parser.add_argument("--only", default="", help="keep the cases whose name contains this")
    options = parser.parse_args(argv)
    outputs = {}
    for family in FAMILIES:
        for name, compute in family():
            if options.only in name:
                with np.errstate(all="ignore"):
                    outputs[name] = compute()
    if options.save:
        np.savez(options.save, **{name.replace("/", "|"): value for name, value in outputs.items()})
    report = {name: digest(value) for name, value in outputs.items()}
    report[FEATURES_KEY] = sorted(name for name, enabled in __cpu_features__.items() if enabled)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
