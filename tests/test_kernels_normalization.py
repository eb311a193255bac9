"""batch_norm, instance_norm, layer_norm, l2_norm and local_response_norm against PyTorch.

Each case is a one-op MIL program (iOS15: parameters in x's dtype; iOS17: either dtype) evaluated
by the reference interpreter. The reference is torch in float64 on the exact stored values of
the input, parameters and epsilon (read back from the op, so defaults count too): the result
must be within one ulp of its own dtype (fp16 stays fp16). fp32 results must also match torch's
fp32 kernels at rtol 1e-5, plus 1e-6 of the terms behind each output (``x - mean`` and
``+ beta`` cancel; torch's fp32 error there is relative to the terms, not to the output).
"""

from __future__ import annotations

from typing import Callable

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel_helpers import assert_faithful, program_of
from mil_passes.reference import evaluate

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")
F = torch.nn.functional

FLOATS = (np.float32, np.float16)
OPSETS = (ct.target.iOS15, ct.target.iOS17)


def run_one_op(build: Callable, x: np.ndarray, opset) -> tuple[np.ndarray, object]:
    """Evaluate ``build(x)`` as the only op of a program; return its output and the op."""
    prog = program_of(lambda x: build(x), {"x": x}, opset)
    (op,) = [op for op in prog.functions["main"].operations if op.op_type != "const"]
    (out,) = evaluate(prog, {"x": x}).values()
    return out, op


def stored(op, name: str) -> float | None:
    """The value of ``op``'s input ``name`` as stored (a default included), as float64."""
    var = op.inputs.get(name)
    return None if var is None else np.asarray(var.val, dtype=np.float64)


def check(
    out: np.ndarray,
    x: np.ndarray,
    reference: Callable[[torch.Tensor, torch.dtype], torch.Tensor],
    terms: np.ndarray | None = None,
) -> None:
    """Faithful to ``reference`` in float64; for fp32, close to ``reference`` run in fp32.

    ``terms`` bounds the size of what each output is computed from (default: the output): an
    output that cancels to ~0 keeps an absolute error of its terms, 1e-12 of them in float64 (far
    below an ulp of the terms) and ~1e-6 in torch's fp32 kernels.
    """
    exact = reference(torch.from_numpy(x.astype(np.float64)), torch.float64).numpy()
    terms = np.abs(exact) if terms is None else np.broadcast_to(terms, exact.shape)
    assert_faithful(out, exact, x.dtype, noise=1e-12 * terms)
    if x.dtype == np.float32:
        torch_fp32 = reference(torch.from_numpy(x), torch.float32).numpy().astype(np.float64)
        error = np.abs(out - torch_fp32)
        bound = 1e-5 * np.abs(torch_fp32) + 1e-6 * terms
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        assert (error <= bound).all(), f"at {worst}: got {out[worst]}, torch fp32 {torch_fp32[worst]}"


def standardization_terms(x, center, variance, epsilon, gamma=None, beta=None) -> np.ndarray:
    """Size of the terms of ``gamma * (x - center) / sqrt(variance + epsilon) + beta``."""
    scale = 1.0 if gamma is None else np.abs(gamma)
    shift = 0.0 if beta is None else np.abs(beta)
    return (np.abs(x) + np.abs(center)) / np.sqrt(variance + epsilon) * scale + shift


def per_channel_standardization_terms(x, center, variance, op, kwargs: dict) -> np.ndarray:
    """``standardization_terms`` with ``op``'s stored epsilon and ``kwargs``' ``[C]`` gamma / beta."""
    return standardization_terms(
        x.astype(np.float64),
        center,
        variance,
        float(stored(op, "epsilon")),
        along_channels(kwargs.get("gamma"), x.ndim),
        along_channels(kwargs.get("beta"), x.ndim),
    )


def along_channels(value, rank: int) -> np.ndarray | None:
    """A ``[C]`` parameter as float64, shaped to broadcast along axis 1."""
    return None if value is None else np.asarray(value, np.float64).reshape((1, -1) + (1,) * (rank - 2))


def tensor(value, dtype) -> torch.Tensor | None:
    return None if value is None else torch.from_numpy(np.asarray(value, np.float64)).to(dtype)


@st.composite
def setting(draw, ranks: tuple[int, int], magnitudes=(0.5, 8.0, 300.0)):
    """(x, param dtype, opset); iOS15 ties the parameters to x's dtype."""
    dtype = draw(st.sampled_from(FLOATS))
    opset = draw(st.sampled_from(OPSETS))
    param_dtype = draw(st.sampled_from(FLOATS)) if opset == ct.target.iOS17 else dtype
    rank = draw(st.integers(*ranks))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offset = draw(st.sampled_from([0.0, 3.0]))
    x = ((rng.standard_normal(shape) + offset) * draw(st.sampled_from(magnitudes))).astype(dtype)
    return x, param_dtype, opset


def maybe_param(draw, rng_values, param_dtype):
    """Half the time absent (None), else the drawn values in ``param_dtype``."""
    return np.asarray(rng_values, param_dtype) if draw(st.booleans()) else None


def epsilon_kwargs(draw, param_dtype) -> dict:
    """No epsilon (the MIL default) or an explicit one."""
    if draw(st.booleans()):
        return {}
    return {"epsilon": param_dtype(draw(st.sampled_from([1e-6, 1e-3, 0.5])))}


def channel_values(draw, count: int, low: float, high: float) -> list[float]:
    """Values in [low, high]; those under 1e-3 in size become 0: fp16/fp32 subnormal parameters
    cost torch's fp32 kernels all their precision (``gamma * invstd`` rounds to a subnormal)."""
    value = st.floats(low, high).map(lambda v: 0.0 if abs(v) < 1e-3 else v)
    return draw(st.lists(value, min_size=count, max_size=count))


def channel_scale_and_shift(draw, count: int, param_dtype) -> dict:
    """``gamma`` and ``beta`` kwargs: each ``count`` values in [-2, 2], or (half the time) absent."""
    kwargs = {}
    for name in ("gamma", "beta"):
        value = maybe_param(draw, channel_values(draw, count, -2, 2), param_dtype)
        if value is not None:
            kwargs[name] = value
    return kwargs


@given(data=st.data())
def test_batch_norm(data):
    x, pdt, opset = data.draw(setting((3, 5)))
    channels = x.shape[1]
    mean = np.asarray(channel_values(data.draw, channels, -5, 5), pdt)
    variance = np.asarray(channel_values(data.draw, channels, 0.01, 10), pdt)
    kwargs = {
        "mean": mean,
        "variance": variance,
        **epsilon_kwargs(data.draw, pdt),
        **channel_scale_and_shift(data.draw, channels, pdt),
    }
    out, op = run_one_op(lambda v: mb.batch_norm(x=v, **kwargs), x, opset)

    def reference(t, dtype):
        return F.batch_norm(
            t,
            tensor(mean, dtype),
            tensor(variance, dtype),
            tensor(kwargs.get("gamma"), dtype),
            tensor(kwargs.get("beta"), dtype),
            training=False,
            eps=float(stored(op, "epsilon")),
        )

    terms = per_channel_standardization_terms(
        x, along_channels(mean, x.ndim), along_channels(variance, x.ndim), op, kwargs
    )
    check(out, x, reference, terms)


@given(data=st.data())
def test_instance_norm(data):
    x, pdt, opset = data.draw(setting((3, 4)))
    assume(np.prod(x.shape[2:]) > 1)  # torch refuses a single spatial element
    channels = x.shape[1]
    kwargs = {**epsilon_kwargs(data.draw, pdt), **channel_scale_and_shift(data.draw, channels, pdt)}
    out, op = run_one_op(lambda v: mb.instance_norm(x=v, **kwargs), x, opset)

    def reference(t, dtype):
        return F.instance_norm(
            t,
            weight=tensor(kwargs.get("gamma"), dtype),
            bias=tensor(kwargs.get("beta"), dtype),
            eps=float(stored(op, "epsilon")),
        )

    wide, spatial = x.astype(np.float64), tuple(range(2, x.ndim))
    mean, variance = wide.mean(axis=spatial, keepdims=True), wide.var(axis=spatial, keepdims=True)
    terms = per_channel_standardization_terms(x, mean, variance, op, kwargs)
    check(out, x, reference, terms)


@given(data=st.data())
def test_layer_norm(data):
    x, pdt, opset = data.draw(setting((1, 4)))
    rank = x.ndim
    axes = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    axes = [a - rank if data.draw(st.booleans()) else a for a in axes]  # some negative, any order
    normalized = sorted(a % rank for a in axes)
    param_shape = [x.shape[a] for a in normalized]
    kwargs = {"axes": axes, **epsilon_kwargs(data.draw, pdt)}
    count = int(np.prod(param_shape))
    gamma = maybe_param(data.draw, channel_values(data.draw, count, -2, 2), pdt)
    if gamma is not None:  # coremltools' type inference reads gamma's shape to check beta's
        kwargs["gamma"] = gamma.reshape(param_shape)
        beta = maybe_param(data.draw, channel_values(data.draw, count, -2, 2), pdt)
        if beta is not None:
            kwargs["beta"] = beta.reshape(param_shape)
    out, op = run_one_op(lambda v: mb.layer_norm(x=v, **kwargs), x, opset)

    order = [a for a in range(rank) if a not in normalized] + normalized

    def reference(t, dtype):
        moved = t.permute(order)
        result = F.layer_norm(
            moved,
            param_shape,
            tensor(kwargs.get("gamma"), dtype),
            tensor(kwargs.get("beta"), dtype),
            eps=float(stored(op, "epsilon")),
        )
        return result.permute(list(np.argsort(order)))

    wide, axes_tuple = x.astype(np.float64), tuple(normalized)
    broadcast = [x.shape[i] if i in normalized else 1 for i in range(rank)]
    gamma, beta = (kwargs.get(name) for name in ("gamma", "beta"))
    terms = standardization_terms(
        wide,
        wide.mean(axis=axes_tuple, keepdims=True),
        wide.var(axis=axes_tuple, keepdims=True),
        float(stored(op, "epsilon")),
        None if gamma is None else gamma.astype(np.float64).reshape(broadcast),
        None if beta is None else beta.astype(np.float64).reshape(broadcast),
    )
    check(out, x, reference, terms)


@given(data=st.data())
def test_l2_norm(data):
    x, pdt, opset = data.draw(setting((3, 5)))
    kwargs = epsilon_kwargs(data.draw, pdt)
    out, op = run_one_op(lambda v: mb.l2_norm(x=v, **kwargs), x, opset)

    def reference(t, dtype):
        square_sum = torch.sum(t * t, dim=(-3, -2, -1), keepdim=True)
        return t / torch.sqrt(square_sum + float(stored(op, "epsilon")))

    check(out, x, reference)


@given(data=st.data())
def test_local_response_norm(data):
    x, pdt, opset = data.draw(setting((3, 5), magnitudes=(0.5, 8.0, 30.0)))
    size = data.draw(st.integers(1, 6))
    kwargs = {}
    for name, low, high in (("alpha", 1e-4, 1.0), ("beta", 0.5, 1.0), ("k", 0.5, 2.0)):
        if data.draw(st.booleans()):
            kwargs[name] = pdt(data.draw(st.floats(low, high)))
    out, op = run_one_op(lambda v: mb.local_response_norm(x=v, size=size, **kwargs), x, opset)
    alpha, beta, k = (float(stored(op, name)) for name in ("alpha", "beta", "k"))

    def reference(t, dtype):
        return lrn_channels_at_minus_3(t, size, alpha, beta, k)

    check(out, x, reference)


def lrn_channels_at_minus_3(t: torch.Tensor, size: int, alpha: float, beta: float, k: float):
    """F.local_response_norm with channels on axis -3 (leading axes batch) and the window
    ``[c - (size - 1) // 2, c + size // 2]``: torch's window is the mirror image, so the
    channels are reversed around the call."""
    batched = t.reshape((-1,) + tuple(t.shape[-3:]))
    mirrored = torch.flip(batched, dims=[1])
    result = torch.flip(F.local_response_norm(mirrored, size, alpha=alpha, beta=beta, k=k), dims=[1])
    return result.reshape(t.shape)


def test_local_response_norm_rank3_matches_coremltools_expectation():
    """coremltools' smoke test, run on Core ML by its CI: a rank-3 ``[1, 3, 2]`` input has one
    channel (axis -3), so each value is normalized by its own square only."""
    x = np.array([[[1.0, -7.0], [5.0, -6.0], [-3.0, -5.0]]], dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.local_response_norm(x=x, size=2), mb.local_response_norm(x=x, size=3)

    size2, size3 = evaluate(prog, {"x": x}).values()
    expected2 = [[[0.99996257, -6.98716545], [4.99531746, -5.99191284], [-2.99898791, -4.99531746]]]
    expected3 = [[[0.99997497, -6.99143696], [4.99687672, -5.99460602], [-2.99932504, -4.99687672]]]
    np.testing.assert_allclose(size2, expected2, rtol=2e-7)
    np.testing.assert_allclose(size3, expected3, rtol=2e-7)


def test_local_response_norm_window_placement():
    """Channel c sums channels c - (size - 1) // 2 .. c + size // 2 (zero beyond the ends)."""
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 4, 1, 1)
    out, _ = run_one_op(lambda v: mb.local_response_norm(x=v, size=2, alpha=2.0, beta=1.0, k=1.0), x, ct.target.iOS17)
    window_sums = np.array([1 + 4, 4 + 9, 9 + 16, 16], np.float64)  # (c, c + 1)
    np.testing.assert_allclose(out.ravel(), x.ravel() / (1.0 + window_sums), rtol=1e-7)


def test_fp16_statistics_do_not_overflow():
    """Squares of fp16 values ~300 overflow fp16; the statistics must not."""
    x = np.full((1, 2, 2, 64), 300.0, np.float16)
    x[..., ::2] = -300.0
    l2, _ = run_one_op(lambda v: mb.l2_norm(x=v), x, ct.target.iOS17)
    layer, _ = run_one_op(lambda v: mb.layer_norm(x=v, axes=[-1]), x, ct.target.iOS17)
    assert l2.dtype == layer.dtype == np.float16
    np.testing.assert_array_equal(np.abs(l2), np.float16(1 / 16))  # 300 / sqrt(256 * 300^2)
    np.testing.assert_array_equal(layer, np.sign(x.astype(np.float32)).astype(np.float16))
