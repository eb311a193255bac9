"""Activation ops through the reference interpreter, against PyTorch.

Every op of ``defs/iOS15/activation.py`` (and its iOS17 variant with parameters of another dtype)
is evaluated as the only op of a program. The reference is the same function in torch float64
on the exact fp32/fp16 values of the input and parameters (gelu's tails rewritten with erfc /
sigmoid so float64 does not cancel them away): the interpreter's result must be one of the two
representable neighbours of it (under 1 ulp of its own dtype). fp32 results must also match
torch's own fp32 kernels (F.gelu, F.silu, ...) at rtol 1e-5, atol 1e-6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from hypothesis import given
from hypothesis import strategies as st

from kernel_helpers import assert_faithful, run_one_op
from mil_passes.reference import evaluate

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")
F = torch.nn.functional

FLOATS = (np.float32, np.float16)
OPSETS = (ct.target.iOS15, ct.target.iOS17)


def torch64(value) -> torch.Tensor:
    return torch.from_numpy(np.asarray(value, dtype=np.float64))


# -- torch references (float64 tensors in, float64 tensor out) -----------------------------------


def clamped_relu(x, alpha, beta):
    return torch.clamp(torch.where(x >= 0, x, alpha * x), max=beta)


def gelu_exact(x):
    """F.gelu's formula with ``1 + erf(-y)`` written ``erfc(y)``: float64 keeps the tail."""
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))


def gelu_tanh_approximation(x):
    """F.gelu(approximate="tanh") with ``1 + tanh(z)`` written ``2 sigmoid(2 z)``."""
    return x * torch.sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))


def gelu_sigmoid_approximation(x):
    return x * torch.sigmoid(1.702 * x)


def linear_activation(x, alpha, beta):
    return alpha * x + beta


def scaled_tanh(x, alpha, beta):
    return alpha * torch.tanh(beta * x)


def sigmoid_hard(x, alpha, beta):
    return torch.clamp(alpha * x + beta, 0.0, 1.0)


def thresholded_relu(x, alpha):
    return torch.where(x >= alpha, x, torch.zeros_like(x))


def elu(x, alpha):
    return F.elu(x, alpha=float(alpha))


def leaky_relu(x, alpha):
    return F.leaky_relu(x, negative_slope=float(alpha))


def prelu(x, alpha):
    return F.prelu(x, alpha.reshape(-1))


def softplus_parametric(x, alpha, beta):
    return alpha * F.softplus(beta * x)


@dataclass(frozen=True)
class Activation:
    """One MIL activation, its torch reference and the parameters it takes."""

    op: str
    reference: Callable
    params: tuple[str, ...] = ()
    per_channel: bool = False  # params are [C] vectors along axis 1
    ranks: tuple[int, int] = (1, 4)
    attributes: dict = field(default_factory=dict)
    torch_kernel: Callable | None = None  # torch's own op, for the fp32 check (default: reference)

    def build(self, x, params: dict):
        return getattr(mb, self.op)(x=x, **params, **self.attributes)


ACTIVATIONS = {
    "relu": Activation("relu", F.relu),
    "relu6": Activation("relu6", F.relu6),
    "sigmoid": Activation("sigmoid", torch.sigmoid),
    "silu": Activation("silu", F.silu),
    "softsign": Activation("softsign", F.softsign),
    "softplus": Activation("softplus", F.softplus),
    "gelu_exact": Activation("gelu", gelu_exact, attributes={"mode": "EXACT"}, torch_kernel=F.gelu),
    "gelu_tanh": Activation(
        "gelu",
        gelu_tanh_approximation,
        attributes={"mode": "TANH_APPROXIMATION"},
        torch_kernel=lambda x: F.gelu(x, approximate="tanh"),
    ),
    "gelu_sigmoid": Activation("gelu", gelu_sigmoid_approximation, attributes={"mode": "SIGMOID_APPROXIMATION"}),
    "elu": Activation("elu", elu, ("alpha",)),
    "leaky_relu": Activation("leaky_relu", leaky_relu, ("alpha",)),
    "thresholded_relu": Activation("thresholded_relu", thresholded_relu, ("alpha",)),
    "clamped_relu": Activation("clamped_relu", clamped_relu, ("alpha", "beta")),
    "linear_activation": Activation("linear_activation", linear_activation, ("alpha", "beta")),
    "scaled_tanh": Activation("scaled_tanh", scaled_tanh, ("alpha", "beta")),
    "sigmoid_hard": Activation("sigmoid_hard", sigmoid_hard, ("alpha", "beta")),
    "prelu": Activation("prelu", prelu, ("alpha",), per_channel=True, ranks=(4, 4)),
    "softplus_parametric": Activation(
        "softplus_parametric", softplus_parametric, ("alpha", "beta"), per_channel=True, ranks=(3, 5)
    ),
}


@st.composite
def activation_cases(draw, activation: Activation):
    """(x, params, opset): x is fp32 or fp16; iOS17 may give the parameters the other dtype."""
    dtype = draw(st.sampled_from(FLOATS))
    opset = draw(st.sampled_from(OPSETS))
    param_dtype = draw(st.sampled_from(FLOATS)) if opset == ct.target.iOS17 else dtype
    rank = draw(st.integers(*activation.ranks))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    magnitude = draw(st.sampled_from([0.5, 4.0, 16.0]))
    x = (rng.standard_normal(shape) * magnitude).astype(dtype)
    count = shape[1] if activation.per_channel else None
    value = st.floats(-3.0, 3.0, allow_subnormal=False, width=32)
    params = {}
    for name in activation.params:
        if count is None:
            params[name] = param_dtype(draw(value))
        else:
            params[name] = np.array(draw(st.lists(value, min_size=count, max_size=count)), param_dtype)
    return x, params, opset


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@given(data=st.data())
def test_activation_matches_torch(name, data):
    activation = ACTIVATIONS[name]
    x, params, opset = data.draw(activation_cases(activation))
    out = run_one_op(lambda v: activation.build(v, params), x, opset)

    rank = x.ndim
    torch_params = {
        k: torch64(v).reshape((1, -1) + (1,) * (rank - 2)) if activation.per_channel else torch64(v)
        for k, v in params.items()
    }
    exact = activation.reference(torch64(x), **torch_params).numpy()
    assert_faithful(out, exact, x.dtype)
    if x.dtype == np.float32:
        fp32_params = {k: v.float() for k, v in torch_params.items()}
        torch_kernel = activation.torch_kernel or activation.reference
        torch_fp32 = torch_kernel(torch.from_numpy(x), **fp32_params).numpy()
        np.testing.assert_allclose(out, torch_fp32, rtol=1e-5, atol=1e-6)


@given(data=st.data(), dtype=st.sampled_from(FLOATS), seed=st.integers(0, 2**32 - 1))
def test_softmax_matches_torch(data, dtype, seed):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    out = run_one_op(lambda v: mb.softmax(x=v, axis=axis), x)
    exact = torch.softmax(torch64(x), dim=axis).numpy()
    if dtype == np.float16:
        assert_faithful(out, exact, dtype)
    else:  # a core kernel computed in fp32: exp(x - max) amplifies the subtraction's rounding
        assert out.dtype == dtype
        np.testing.assert_allclose(out, exact, rtol=1e-5, atol=0)
        np.testing.assert_allclose(out, torch.softmax(torch.from_numpy(x), dim=axis).numpy(), rtol=1e-5)


# -- fp16 tails and aliasing, where coremltools' value_inference is wrong ------------------------

TAIL_CASES = [
    # (op builder, x, exact float64 result): value_inference flushes / overflows these in fp16
    ("sigmoid", lambda v: mb.sigmoid(x=v), -11.1015625, 1 / (1 + np.exp(11.1015625))),
    ("softplus", lambda v: mb.softplus(x=v), -7.66015625, np.log1p(np.exp(-7.66015625))),
    (
        "softplus_parametric",
        lambda v: mb.softplus_parametric(x=v, alpha=np.ones(1, np.float16), beta=np.ones(1, np.float16)),
        15.8984375,
        15.8984375 + np.log1p(np.exp(-15.8984375)),
    ),
    (
        "gelu_sigmoid",
        lambda v: mb.gelu(x=v, mode="SIGMOID_APPROXIMATION"),
        -6.5390625,
        -6.5390625 / (1 + np.exp(1.702 * 6.5390625)),
    ),
    ("elu", lambda v: mb.elu(x=v, alpha=np.float16(1.0)), -0.0014963150024414062, np.expm1(-0.0014963150024414062)),
]


@pytest.mark.parametrize("name, build, value, exact", TAIL_CASES, ids=[c[0] for c in TAIL_CASES])
def test_fp16_tail_is_correctly_rounded(name, build, value, exact):
    x = np.full((1, 1, 2), value, np.float16)
    out = run_one_op(build, x)
    assert out.dtype == np.float16
    assert np.all(out == np.float16(exact)), f"{name}({value}) = {out.ravel()[0]!r}, exact {exact!r}"


def test_thresholded_relu_keeps_x_intact_for_other_readers():
    x = np.array([[-1.0, 0.25, 0.5, 2.0]], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.thresholded_relu(x=x, alpha=0.5), mb.relu(x=x)

    thresholded, relu = evaluate(prog, {"x": x.copy()}).values()
    np.testing.assert_array_equal(thresholded, [[0.0, 0.0, 0.5, 2.0]])  # x == alpha is kept
    np.testing.assert_array_equal(relu, [[0.0, 0.25, 0.5, 2.0]])


def test_gelu_default_mode_is_exact():
    x = np.linspace(-4, 4, 17, dtype=np.float32)
    out = run_one_op(lambda v: mb.gelu(x=v), x)
    assert_faithful(out, F.gelu(torch64(x)).numpy(), np.float32)


def test_relu_is_coremltools_formula_bit_for_bit():
    """relu's kernel computes coremltools' value_inference formula, np.maximum(x, 0); fp16 reads a
    table of it: every fp16 input (NaNs and -0.0 included) and fp32 specials give the same bits."""
    every_fp16 = np.arange(2**16, dtype=np.uint16).view(np.float16)
    got = run_one_op(lambda v: mb.relu(x=v), every_fp16)
    assert got.dtype == np.float16 and got.tobytes() == np.maximum(every_fp16, 0).tobytes()
    fp32 = np.array([-0.0, 0.0, -1.5, 2.5, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45], np.float32)
    got = run_one_op(lambda v: mb.relu(x=v), fp32)
    assert got.dtype == np.float32 and got.tobytes() == np.maximum(fp32, 0).tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_sigmoid_hard_and_thresholded_relu_by_table_match_float64(dtype):
    """fp16 reads a table of the float64 formula, fp32 runs it in blocks: both round once."""
    x = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(dtype)
    alpha, beta = dtype(0.2), dtype(0.5)
    got = run_one_op(lambda v: mb.sigmoid_hard(x=v, alpha=alpha, beta=beta), x)
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = np.clip(np.float64(alpha) * wide + np.float64(beta), 0.0, 1.0).astype(dtype)
    assert got.tobytes() == want.tobytes()
    got = run_one_op(lambda v: mb.thresholded_relu(x=v, alpha=dtype(0.75)), x)
    want = np.where(wide >= 0.75, x, np.zeros_like(x))
    assert got.tobytes() == want.tobytes()
