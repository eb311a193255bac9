"""Core kernels against two independent oracles: PyTorch, and coremltools' own value_inference."""

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.reference import evaluate

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")

IOS17 = ct.target.iOS17
FP32 = types.fp32


def run_one(build, x, dtype=FP32, opset=IOS17):
    """Evaluate ``build(x_var)`` with x fed as an input."""

    @mb.program(input_specs=[mb.TensorSpec(x.shape, dtype=dtype)], opset_version=opset)
    def prog(x_var):
        return build(x_var)

    return next(iter(evaluate(prog, {"x_var": x}).values()))


def coremltools_value(build, x, opset=IOS17):
    """What coremltools' value_inference computes for ``build`` on a const ``x``."""
    captured = {}

    @mb.program(input_specs=[mb.TensorSpec((1,))], opset_version=opset)
    def prog(unused):
        out = build(mb.const(val=x))
        captured["val"] = out.val
        return unused

    return np.asarray(captured["val"])


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def arrays(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@st.composite
def windows(draw):
    shape = draw(shapes)
    begin, end, stride, bmask, emask, smask = [], [], [], [], [], []
    for dim in shape:
        squeeze = draw(st.booleans()) and draw(st.booleans())
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        begin.append(draw(st.integers(-dim, dim - 1)))
        end.append(draw(st.integers(-dim - 1, dim)))
        stride.append(1 if squeeze else step)
        bmask.append(draw(st.booleans()))
        emask.append(draw(st.booleans()))
        smask.append(squeeze)
    if all(smask):
        smask[0] = False
    return shape, dict(begin=begin, end=end, stride=stride, begin_mask=bmask, end_mask=emask, squeeze_mask=smask)


@given(windows(), st.integers(0, 100))
def test_slice_by_index_matches_coremltools(window, seed):
    shape, params = window
    x = arrays(shape, seed)
    try:
        want = coremltools_value(lambda v: mb.slice_by_index(x=v, **params), x)
    except ValueError:  # coremltools refuses empty windows at build time
        assume(False)
    assume(want.size > 0)
    got = run_one(lambda v: mb.slice_by_index(x=v, **params), x)
    np.testing.assert_array_equal(got, want)
    as_bool = run_one(lambda v: mb.slice_by_index(x=v, **params), x > 0, dtype=types.bool)
    np.testing.assert_array_equal(as_bool, want > 0)


@given(shapes, st.integers(0, 100), st.data())
def test_slice_by_size_matches_coremltools(shape, seed, data):
    begin = [data.draw(st.integers(0, d - 1)) for d in shape]
    size = [data.draw(st.sampled_from([-1, 1, d - b])) for d, b in zip(shape, begin)]
    x = arrays(shape, seed)
    build = lambda v: mb.slice_by_size(x=v, begin=begin, size=size)  # noqa: E731
    np.testing.assert_array_equal(run_one(build, x), coremltools_value(build, x))


def last(outputs):
    return outputs[-1] if isinstance(outputs, (list, tuple)) else outputs


@given(shapes, st.integers(0, 100), st.data())
def test_concat_split_stack_transpose_match_torch(shape, seed, data):
    x = arrays(shape, seed)
    t = torch.from_numpy(x)
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    got = run_one(lambda v: mb.concat(values=[v, v, v], axis=axis), x)
    np.testing.assert_array_equal(got, torch.cat([t, t, t], dim=axis).numpy())
    got = run_one(lambda v: mb.concat(values=[v, v], axis=axis, interleave=True), x)
    want = torch.stack([t, t], dim=axis % rank + 1).reshape(
        [s * (2 if i == axis % rank else 1) for i, s in enumerate(shape)]
    )
    np.testing.assert_array_equal(got, want.numpy())
    sizes = [1, shape[axis] - 1] if shape[axis] > 1 else [1]
    got = run_one(lambda v: last(mb.split(x=v, split_sizes=sizes, axis=axis)), x)
    np.testing.assert_array_equal(got, torch.split(t, sizes, dim=axis)[-1].numpy())
    got = run_one(lambda v: mb.stack(values=[v, v], axis=axis), x)
    np.testing.assert_array_equal(got, torch.stack([t, t], dim=axis).numpy())
    perm = data.draw(st.permutations(range(rank)))
    got = run_one(lambda v: mb.transpose(x=v, perm=list(perm)), x)
    np.testing.assert_array_equal(got, t.permute(*perm).numpy())


def test_split_num_splits_matches_coremltools():
    x = np.arange(6, dtype=np.float32)
    build = lambda v: mb.split(x=v, num_splits=3, axis=0)[2]  # noqa: E731
    np.testing.assert_array_equal(run_one(build, x), coremltools_value(build, x))


@pytest.mark.parametrize(
    "opset, x_shape, target, want",
    [
        (ct.target.iOS15, (2, 12), [0, -1], (2, 12)),
        (ct.target.iOS16, (2, 3, 4), [0, 0, 4], (2, 3, 4)),
        (ct.target.iOS17, (3, 8), [0, -1], (3, 8)),
        # iOS17 matches 0 from the right; a 0 out of range becomes 1.
        (ct.target.iOS17, (6, 4), [1, 0, -1, 0], (1, 1, 6, 4)),
        (ct.target.iOS17, (2, 3, 4), [0, -1], (3, 8)),
    ],
)
def test_reshape_zero_follows_the_opset(opset, x_shape, target, want):
    x = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape)
    got = run_one(lambda v: mb.reshape(x=v, shape=target), x, opset=opset)
    assert got.shape == want
    np.testing.assert_array_equal(got.reshape(-1), x.reshape(-1))


@given(shapes, st.integers(0, 100), st.data())
def test_gather_with_negative_indices_matches_torch(shape, seed, data):
    x = arrays(shape, seed)
    axis = data.draw(st.integers(0, len(shape) - 1))
    idx = np.array(data.draw(st.lists(st.integers(-shape[axis], shape[axis] - 1), min_size=1, max_size=4)), np.int32)
    got = run_one(lambda v: mb.gather(x=v, indices=idx, axis=axis), x)
    want = torch.index_select(torch.from_numpy(x), axis, torch.from_numpy(idx % shape[axis]).long())
    np.testing.assert_array_equal(got, want.numpy())


BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "real_div": torch.true_divide,
    "floor_div": torch.floor_divide,
    "mod": torch.remainder,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "equal": torch.eq,
    "not_equal": torch.ne,
    "less": torch.lt,
    "less_equal": torch.le,
    "greater": torch.gt,
    "greater_equal": torch.ge,
}


@pytest.mark.parametrize("op_type", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["fp32", "int32"])
def test_binary_ops_match_torch_with_broadcasting(op_type, dtype):
    rng = np.random.default_rng(1)
    if dtype == "fp32":
        x = rng.standard_normal((3, 4)).astype(np.float32)
        y = rng.standard_normal((4,)).astype(np.float32) + 0.5
    else:
        x = rng.integers(-9, 10, (3, 4)).astype(np.int32)
        y = rng.choice([-3, -2, -1, 1, 2, 5], (4,)).astype(np.int32)
    got = run_one(lambda v: getattr(mb, op_type)(x=v, y=y), x, dtype=getattr(types, dtype))
    want = BINARY[op_type](torch.from_numpy(x), torch.from_numpy(y)).numpy()
    if op_type == "real_div" and dtype == "int32":
        want = want.astype(got.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6)


UNARY = ["abs", "ceil", "cos", "exp", "floor", "sign", "sin", "sqrt", "square", "tanh", "erf", "atan", "round"]


@pytest.mark.parametrize("op_type", UNARY)
def test_unary_ops_match_torch(op_type):
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    if op_type == "sqrt":
        x = np.abs(x)
    got = run_one(lambda v: getattr(mb, op_type)(x=v), x)
    want = getattr(torch, op_type)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_cast_to_bool_treats_nan_as_true_and_negative_zero_as_false():
    x = np.array([np.nan, -0.0, 0.0, np.inf, -2.5, 1e-30], np.float32)
    got = run_one(lambda v: mb.cast(x=v, dtype="bool"), x)
    np.testing.assert_array_equal(got, torch.from_numpy(x).to(torch.bool).numpy())


def test_cast_float_to_int_truncates_toward_zero():
    x = np.array([-2.7, -0.5, 0.5, 2.7, 100.2], np.float32)
    got = run_one(lambda v: mb.cast(x=v, dtype="int32"), x)
    np.testing.assert_array_equal(got, torch.from_numpy(x).to(torch.int32).numpy())


@given(st.booleans(), st.booleans(), st.integers(0, 50))
def test_matmul_with_transposes_matches_torch(tx, ty, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, 4, 3) if tx else (2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4) if ty else (4, 5)).astype(np.float32)
    got = run_one(lambda v: mb.matmul(x=v, y=b, transpose_x=tx, transpose_y=ty), a)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    want = torch.matmul(ta.transpose(-1, -2) if tx else ta, tb.T if ty else tb)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "op_type, oracle",
    [
        ("reduce_sum", lambda t, a, k: torch.sum(t, a, keepdim=k)),
        ("reduce_mean", lambda t, a, k: torch.mean(t, a, keepdim=k)),
        ("reduce_max", lambda t, a, k: torch.amax(t, a, keepdim=k)),
        ("reduce_min", lambda t, a, k: torch.amin(t, a, keepdim=k)),
        ("reduce_prod", lambda t, a, k: torch.prod(t, a[0], keepdim=k)),
        ("reduce_l2_norm", lambda t, a, k: torch.linalg.vector_norm(t, 2, a, keepdim=k)),
        ("reduce_log_sum_exp", lambda t, a, k: torch.logsumexp(t, a, keepdim=k)),
    ],
)
@pytest.mark.parametrize("keep", [True, False])
def test_reductions_match_torch(op_type, oracle, keep):
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    axes = [1]
    got = run_one(lambda v: getattr(mb, op_type)(x=v, axes=axes, keep_dims=keep), x)
    np.testing.assert_allclose(got, oracle(torch.from_numpy(x), axes, keep).numpy(), rtol=1e-5)


def test_softmax_matches_torch():
    x = np.random.default_rng(4).standard_normal((2, 7)).astype(np.float32) * 10
    got = run_one(lambda v: mb.softmax(x=v, axis=-1), x)
    np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-5, atol=1e-7)


def test_select_broadcasts_like_torch_where():
    cond = np.array([[True], [False]])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = run_one(lambda v: mb.select(cond=cond, a=v, b=mb.mul(x=v, y=-1.0)), x)
    np.testing.assert_array_equal(
        got, torch.where(torch.from_numpy(cond), torch.from_numpy(x), -torch.from_numpy(x)).numpy()
    )


def test_squeeze_without_axes_keeps_a_symbolic_dim_that_is_one_at_run_time():
    from coremltools.converters.mil.mil import get_new_symbol

    @mb.program(input_specs=[mb.TensorSpec((1, get_new_symbol()))], opset_version=IOS17)
    def prog(x):
        return mb.squeeze(x=x, name="out")

    out = evaluate(prog, {"x": np.ones((1, 1), np.float32)})["out"]
    assert out.shape == (1,)
