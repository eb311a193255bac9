"""Core kernels no other test names, against PyTorch: acos, asin, atanh, cosh, sinh, tan, log,
rsqrt, inverse, pow, threshold, reduce_argmax/argmin, reduce_l1_norm, reduce_log_sum,
reduce_sum_square, fill_like, range_1d and flatten2d.

Each op is the only op of a program run by the reference interpreter; the oracle is torch
applied to MIL's definition of the op (coremltools' ``defs/iOS15``, ``defs/iOS16``), epsilons
included. fp32 results match torch's fp32 at test_kernels_core.py's tolerances (rtol 1e-6,
atol 1e-7 elementwise; rtol 1e-5 for reductions, atol 1e-6); fp16 results are within one ulp of torch in
float64 (for the unary functions, on every finite fp16 input); integer, index and data-movement
results are exact. Where torch and MIL differ, the test follows MIL and says so.
"""

from __future__ import annotations

import math

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernel_helpers import assert_faithful, assert_same, program_of, run, run_one_op
from mil_passes.reference import evaluate

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")

FLOATS = (np.float32, np.float16)
shapes = hnp.array_shapes(min_dims=1, max_dims=4, max_side=5)


def arrays(dtype, shape, elements=None, **kwargs):
    """Arrays with every element drawn (hypothesis otherwise fills most of them with one value)."""
    return hnp.arrays(dtype, shape, elements=elements, fill=st.nothing(), **kwargs)


def values(dtype, low, high):
    """Elements of ``dtype`` in [low, high]."""
    if np.issubdtype(dtype, np.integer):
        return st.integers(math.ceil(low), math.floor(high))
    return st.floats(low, high, width=np.finfo(dtype).bits)


def check(out, oracle, *inputs, rtol=1e-6, atol=1e-7):
    """``out`` against ``oracle`` (a torch function) of ``inputs``: fp32 close to torch's fp32,
    fp16 within one ulp of torch in float64, integers exact (in MIL's declared dtype)."""
    dtype = inputs[0].dtype
    if dtype == np.float16:
        exact = oracle(*(torch.from_numpy(v.astype(np.float64)) for v in inputs))
        assert_faithful(out, exact.numpy(), dtype)
        return
    want = oracle(*map(torch.from_numpy, inputs)).numpy()
    if dtype == np.float32:
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
    else:
        assert_same(out, want.astype(dtype))


def run_op(build, x):
    """Evaluate ``build(x)`` as the only op of a program; return its output and the op."""
    prog = program_of(lambda x: build(x), {"x": x})
    (op,) = [op for op in prog.functions["main"].operations if op.op_type != "const"]
    (out,) = evaluate(prog, {"x": x}).values()
    return out, op


# -- unary functions --------------------------------------------------------------------------

# op: (torch function, fp32 inputs, fp16 domain)
UNARY = {
    "acos": (torch.acos, st.floats(-1, 1, width=32), lambda x: abs(x) <= 1),
    "asin": (torch.asin, st.floats(-1, 1, width=32), lambda x: abs(x) <= 1),
    "atanh": (torch.atanh, st.floats(-1, 1, width=32, exclude_min=True, exclude_max=True), lambda x: abs(x) < 1),
    "cosh": (torch.cosh, st.floats(-88, 88, width=32), np.isfinite),
    "sinh": (torch.sinh, st.floats(-88, 88, width=32), np.isfinite),
    "tan": (torch.tan, st.floats(-1e4, 1e4, width=32), np.isfinite),
    "log": (torch.log, st.floats(0, 2.0**100, width=32), lambda x: x > 0),
    "rsqrt": (torch.rsqrt, st.floats(0, 2.0**100, width=32), lambda x: x > 0),
    "inverse": (torch.reciprocal, st.floats(-1e4, 1e4, width=32), np.isfinite),
}


def mil_argument(op, x):
    """What MIL applies the function to: ``x``, or for log, rsqrt and inverse ``x + epsilon``
    (the op's epsilon, default 1e-45, 1e-12 and 1e-4 in x's dtype), added in x's dtype."""
    if op.op_type not in ("log", "rsqrt", "inverse"):
        return x
    total = x + np.asarray(op.epsilon.val)
    assert total.dtype == x.dtype
    return total


@pytest.mark.parametrize("op_type", list(UNARY))
@given(data=st.data())
def test_unary_fp32_matches_torch(op_type, data):
    function, elements, _ = UNARY[op_type]
    x = data.draw(arrays(np.float32, shapes, elements=elements))
    kwargs = {}
    if op_type in ("log", "rsqrt", "inverse"):
        epsilons = st.sampled_from([np.float32(1e-3), np.float32(0.5)])
        kwargs = data.draw(st.fixed_dictionaries({}, optional={"epsilon": epsilons}))
    out, op = run_op(lambda v: getattr(mb, op_type)(x=v, **kwargs), x)
    check(out, function, mil_argument(op, x))


FP16 = np.arange(2**16, dtype=np.uint16).view(np.float16)
FP16 = FP16[np.isfinite(FP16)]


@pytest.mark.parametrize("op_type", list(UNARY))
def test_unary_fp16_is_faithful_on_every_input(op_type):
    function, _, in_domain = UNARY[op_type]
    x = FP16[in_domain(FP16.astype(np.float64))]
    out, op = run_op(lambda v: getattr(mb, op_type)(x=v), x)
    argument = mil_argument(op, x)  # inverse: x + 1e-4 rounds to fp16 first, as in torch's fp16
    representable = np.abs(function(torch.from_numpy(argument.astype(np.float64))).numpy()) < 65504
    check(out[representable], function, argument[representable])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "op_type, x",
    [
        # Out of the domain: NaN, at atanh's poles: +-inf, as in torch.
        ("acos", [1.5, -2.0, np.inf]),
        ("asin", [1.5, -2.0, -np.inf]),
        ("atanh", [1.5, -2.0, 1.0, -1.0]),
        ("log", [-1.0, -np.inf]),
        ("rsqrt", [-1.0, -np.inf]),
        # At 0, MIL's epsilon makes fp32 log(0) = log(1e-45) = -103.28, rsqrt(0) = 1e6 and
        # inverse(0) = 1e4, where torch.log, torch.rsqrt and torch.reciprocal give -inf and inf.
        # fp16's epsilons of log and rsqrt round to 0: -inf and inf, as in torch.
        ("log", [0.0]),
        ("rsqrt", [0.0]),
        ("inverse", [0.0, -1e-4]),
    ],
)
def test_unary_domain_edges_follow_mil(op_type, x, dtype):
    x = np.array(x, dtype)
    out, op = run_op(lambda v: getattr(mb, op_type)(x=v), x)
    want = UNARY[op_type][0](torch.from_numpy(mil_argument(op, x))).numpy()
    assert out.dtype == dtype
    np.testing.assert_allclose(out, want, rtol=1e-6)  # NaN matches NaN, inf matches inf


# -- pow and threshold ------------------------------------------------------------------------


@st.composite
def broadcast_shapes(draw, shape):
    """A shape that broadcasts against ``shape``: a suffix of it, some dims set to 1."""
    suffix = shape[len(shape) - draw(st.integers(0, len(shape))) :]
    return tuple(1 if draw(st.booleans()) else d for d in suffix)


@given(data=st.data())
def test_pow_matches_torch(data):
    dtype = data.draw(st.sampled_from(FLOATS + (np.int32,)))
    if dtype == np.int32:  # negative exponents: undefined in MIL (coremltools' value_inference raises)
        x_values, y_values = values(dtype, -9, 9), values(dtype, 0, 6)
    elif data.draw(st.booleans()):  # integer exponents of bases of either sign
        x_values = values(dtype, -8, -1 / 8) | values(dtype, 1 / 8, 8)
        y_values = st.integers(-4, 4).map(float)
    else:
        x_values, y_values = values(dtype, 1 / 8, 8), values(dtype, -4, 4)
    x = data.draw(arrays(dtype, shapes, elements=x_values))
    y = data.draw(arrays(dtype, broadcast_shapes(x.shape), elements=y_values))
    (out,) = run(lambda x, y: mb.pow(x=x, y=y), {"x": x, "y": y})
    check(out, torch.pow, x, y)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "build, oracle, inputs",
    [
        # negative ** fraction is NaN, 0 ** -1 is inf
        (lambda x, y: mb.pow(x=x, y=y), torch.pow, {"x": [-2.0, -0.5, 0.0], "y": [0.5, 1.5, -1.0]}),
        # MIL's reduce_log_sum is log(sum(x)): NaN for a negative sum, -inf for 0
        (
            lambda x: mb.reduce_log_sum(x=x, axes=[1]),
            lambda t: torch.log(t.sum(1)),
            {"x": [[-1.0, -2.0], [0.0, 0.0], [1.0, 2.0]]},
        ),
    ],
    ids=["pow", "reduce_log_sum"],
)
def test_pow_and_log_sum_outside_their_domain_match_torch(build, oracle, inputs, dtype):
    inputs = {name: np.array(value, dtype) for name, value in inputs.items()}
    (out,) = run(build, inputs)
    want = oracle(*(torch.from_numpy(v) for v in inputs.values())).numpy()
    assert out.dtype == dtype
    np.testing.assert_allclose(out, want, rtol=1e-6)


@given(data=st.data())
def test_threshold_is_torch_clamp_below(data):
    """MIL's threshold is max(x, alpha): torch.clamp(x, min=alpha), NaN kept."""
    dtype = data.draw(st.sampled_from(FLOATS + (np.int32,)))
    elements = values(dtype, -50, 50)
    if dtype != np.int32:
        elements |= st.sampled_from([np.nan, np.inf, -np.inf])
    x = data.draw(arrays(dtype, shapes, elements=elements))
    alpha = dtype(data.draw(values(dtype, -50, 50)))
    out = run_one_op(lambda v: mb.threshold(x=v, alpha=alpha), x)
    assert_same(out, torch.clamp(torch.from_numpy(x), min=alpha.item()).numpy())


# -- reductions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op_type, arg, extremum",
    [
        ("reduce_argmax", torch.argmax, torch.amax),
        ("reduce_argmin", torch.argmin, torch.amin),
    ],
)
@given(data=st.data())
def test_arg_reductions_match_torch(op_type, arg, extremum, data):
    """MIL leaves ties open ("the identity of the return value is not guaranteed"): the index
    must point at an extremum, and be torch's where the extremum is unique."""
    dtype = data.draw(st.sampled_from(FLOATS + (np.int32,)))
    few = st.integers(-3, 3)  # few distinct values: ties are common
    elements = few if dtype == np.int32 else few.map(float) | st.floats(-4, 4, width=16)
    x = data.draw(arrays(dtype, shapes, elements=elements))
    kwargs = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "axis": st.integers(-x.ndim, x.ndim - 1),
                "keep_dims": st.booleans(),
                "output_dtype": st.sampled_from(["int32", "uint16"]),
            },
        )
    )
    out = run_one_op(lambda v: getattr(mb, op_type)(x=v, **kwargs), x)
    axis, keep = kwargs.get("axis", -1), kwargs.get("keep_dims", False)
    assert out.dtype == np.dtype(kwargs.get("output_dtype", "int32"))
    t = torch.from_numpy(x)
    want = arg(t, dim=axis, keepdim=keep).numpy()
    assert out.shape == want.shape
    index = (out if keep else np.expand_dims(out, axis)).astype(np.int64)
    top = extremum(t, dim=axis, keepdim=True)
    np.testing.assert_array_equal(np.take_along_axis(x, index, axis), top.numpy())
    unique = ((t == top).sum(dim=axis, keepdim=keep) == 1).numpy()
    np.testing.assert_array_equal(out[unique], want[unique])


# MIL's definitions (defs/iOS15/reduction.py): op -> (torch oracle, lowest input, int32 allowed)
REDUCTIONS = {
    "reduce_l1_norm": (lambda t, dim, keep: t.abs().sum(dim, keep), -8, True),
    "reduce_log_sum": (lambda t, dim, keep: torch.log(t.sum(dim, keep)), 1 / 16, False),  # not logsumexp
    "reduce_sum_square": (lambda t, dim, keep: (t * t).sum(dim, keep), -8, True),
}


@pytest.mark.parametrize("op_type", list(REDUCTIONS))
@given(data=st.data())
def test_reductions_match_torch(op_type, data):
    oracle, low, integers = REDUCTIONS[op_type]
    dtype = data.draw(st.sampled_from(FLOATS + ((np.int32,) if integers else ())))
    x = data.draw(arrays(dtype, shapes, elements=values(dtype, low, 8)))
    axes = st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=x.ndim, unique_by=lambda a: a % x.ndim)
    kwargs = data.draw(st.fixed_dictionaries({}, optional={"axes": axes, "keep_dims": st.booleans()}))
    out = run_one_op(lambda v: getattr(mb, op_type)(x=v, **kwargs), x)
    dim = tuple(kwargs["axes"]) if "axes" in kwargs else None
    # atol: log of a sum near 1 is near 0, and torch sums in another order (an fp32 ulp of the sum)
    check(out, lambda t: oracle(t, dim, kwargs.get("keep_dims", False)), x, rtol=1e-5, atol=1e-6)


# -- fill_like, range_1d, flatten2d -----------------------------------------------------------

FILL_VALUES = {
    np.float32: st.floats(width=32, allow_nan=False),
    np.float16: st.floats(width=16, allow_nan=False),
    np.int32: st.integers(-(2**31), 2**31 - 1),
    np.bool_: st.booleans(),
}


@given(data=st.data())
def test_fill_like_matches_torch_full_like(data):
    """The result has ``value``'s dtype (coremltools' type_inference; its docstring says the
    reference's), so the oracle is torch.full_like with that dtype. The default value is 0.0."""
    ref = data.draw(arrays(data.draw(st.sampled_from(list(FILL_VALUES))), shapes))
    value_dtype = data.draw(st.sampled_from([None, *FILL_VALUES]))
    kwargs = {} if value_dtype is None else {"value": value_dtype(data.draw(FILL_VALUES[value_dtype]))}
    value = kwargs.get("value", np.float32(0.0))  # MIL's default
    out = run_one_op(lambda v: mb.fill_like(ref_tensor=v, **kwargs), ref)
    want = torch.full_like(torch.from_numpy(ref), value.item(), dtype=torch.from_numpy(np.asarray(value)).dtype)
    assert_same(out, want.numpy())


@given(data=st.data())
def test_range_1d_matches_torch_arange(data):
    """Float ranges are dyadic (eighths), so every element and the length are exact in fp16
    and any correct implementation agrees."""
    dtype = data.draw(st.sampled_from(FLOATS + (np.int32,)))
    unit = 1 if dtype == np.int32 else 1 / 8
    steps = data.draw(st.integers(-16, 16).filter(bool))
    length = data.draw(st.integers(1, 20))
    past_last = data.draw(st.integers(1, abs(steps))) * (1 if steps > 0 else -1)  # end: beyond the last element
    start = data.draw(st.integers(-64, 64)) * unit
    step, end = steps * unit, start + ((length - 1) * steps + past_last) * unit
    inputs = {name: np.array(v, dtype) for name, v in [("start", start), ("end", end), ("step", step)]}
    (out,) = run(lambda start, end, step: mb.range_1d(start=start, end=end, step=step), inputs)
    want = torch.arange(start, end, step, dtype=torch.from_numpy(inputs["step"]).dtype).numpy()
    assert_same(out, want)
    assert len(out) == length


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # coremltools: fp16 size vs a size limit
def test_range_1d_fp16_counts_and_steps_in_fp16_as_mil_does():
    """MIL's range_1d is np.arange on its T inputs (coremltools' value_inference): in fp16,
    (1 - 0) / fp16(0.1) rounds to 10 elements, each start + i * step in fp16. torch.arange
    computes in wider precision and gives 11 (ending 0.8, 0.9, 1.0); MIL is followed."""
    start, end, step = (np.array(v, np.float16) for v in (0, 1, 0.1))
    captured = {}

    @mb.program(input_specs=[mb.TensorSpec((1,))], opset_version=ct.target.iOS17)
    def prog(unused):
        captured["val"] = mb.range_1d(start=start, end=end, step=step).val
        return unused

    inputs = {"start": start, "end": end, "step": step}
    (out,) = run(lambda start, end, step: mb.range_1d(start=start, end=end, step=step), inputs)
    assert_same(out, captured["val"])
    assert len(out) == 10


@given(data=st.data())
def test_flatten2d_matches_torch_reshape(data):
    """MIL: [prod(shape[:axis]), prod(shape[axis:])], axis in [-rank, rank], default 1."""
    dtype = data.draw(st.sampled_from(list(FILL_VALUES)))
    x = data.draw(arrays(dtype, shapes, unique=dtype != np.bool_))  # distinct: any reordering shows
    kwargs = data.draw(st.fixed_dictionaries({}, optional={"axis": st.integers(-x.ndim, x.ndim)}))
    out = run_one_op(lambda v: mb.flatten2d(x=v, **kwargs), x)
    axis = kwargs.get("axis", 1)
    want = torch.from_numpy(x).reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    assert_same(out, want.numpy())
