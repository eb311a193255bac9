"""conv, conv_transpose, max_pool, avg_pool and l2_pool kernels against PyTorch.

Each case is a one-op MIL program evaluated by the reference interpreter. MIL's ``same`` /
``same_lower`` padding is not PyTorch's: the expected pads are computed here from the MIL
definition (TensorFlow's rule, odd element after / before) and applied explicitly in torch.
"""

from __future__ import annotations

import math

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from hypothesis import given
from hypothesis import strategies as st

from kernel_helpers import run_one_op
from mil_passes.reference import UnsupportedOpError, evaluate
from mil_passes.reference.kernels import conv_pool

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")
F = torch.nn.functional

PAD_TYPES = ("valid", "same", "same_lower", "custom")
POOLS = ("max_pool", "avg_pool", "avg_pool_exclude", "l2_pool")
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
LP_POOL = {1: F.lp_pool1d, 2: F.lp_pool2d}


def same_pads(sizes, kernels, strides, lower: bool) -> list[tuple[int, int]]:
    """MIL ``same``: output ceil(d / s); the odd pad goes after (``same_lower``: before)."""
    pads = []
    for d, k, s in zip(sizes, kernels, strides):
        total = max(0, (math.ceil(d / s) - 1) * s + k - d)
        small, large = total // 2, total - total // 2
        pads.append((large, small) if lower else (small, large))
    return pads


def mil_pads(pad_type: str, custom, sizes, kernels, strides) -> list[tuple[int, int]]:
    if pad_type == "valid":
        return [(0, 0)] * len(sizes)
    if pad_type == "custom":
        return list(custom)
    return same_pads(sizes, kernels, strides, lower=pad_type == "same_lower")


def torch_pad_arg(pads) -> tuple[int, ...]:
    """F.pad's argument (last dim first) for per-dim (before, after) pads."""
    return tuple(v for before, after in reversed(pads) for v in (before, after))


def padding_kwargs(pad_type: str, custom) -> dict:
    """MIL's ``pad_type``, with ``pad`` (the flat (before, after) pairs) when it is custom."""
    kwargs = {"pad_type": pad_type}
    if pad_type == "custom":
        kwargs["pad"] = [v for pair in custom for v in pair]
    return kwargs


def conv_kwargs(weight, bias, strides, dilations, groups: int, pad_type: str, custom) -> dict:
    """The arguments of MIL ``conv`` / ``conv_transpose`` (``bias`` only when there is one)."""
    kwargs = dict(weight=weight, strides=strides, dilations=dilations, groups=groups)
    kwargs.update(padding_kwargs(pad_type, custom))
    if bias is not None:
        kwargs["bias"] = bias
    return kwargs


def assert_close(out, expected, magnitude, atol_factor: float = 1e-6) -> None:
    """rtol 1e-5 plus ``atol_factor`` times ``magnitude``: per output, the sum of the |terms|
    behind it (what bounds a floating-point sum's error)."""
    assert out.dtype == np.float32 and out.shape == expected.shape
    error = np.abs(out.astype(np.float64) - expected)
    bound = 1e-5 * np.abs(expected) + atol_factor * magnitude
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), f"at {worst}: got {out[worst]}, expected {expected[worst]}"


def f64(array):
    return None if array is None else torch.from_numpy(np.asarray(array, np.float64))


# -- conv ----------------------------------------------------------------------------------------


@st.composite
def conv_cases(draw):
    rank = draw(st.integers(1, 3))
    depthwise = draw(st.booleans())
    groups = draw(st.integers(1, 3))
    pad_type = draw(st.sampled_from(PAD_TYPES))
    kernels = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2 if rank == 3 else 3)) for _ in range(rank)]
    custom = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank)]
    sizes = []
    for k, d, pads in zip(kernels, dilations, custom):
        reach = (k - 1) * d + 1 - (sum(pads) if pad_type == "custom" else 0)
        smallest = 1 if pad_type.startswith("same") else max(1, reach)  # a non-empty output
        sizes.append(smallest + draw(st.integers(0, 6 if rank < 3 else 3)))
    return dict(
        rank=rank,
        batch=draw(st.integers(1, 2)),
        groups=groups,
        c_group=1 if depthwise else draw(st.integers(1, 3)),
        c_out=groups * draw(st.integers(1, 2)),
        kernels=kernels,
        strides=[draw(st.integers(1, 3)) for _ in range(rank)],
        dilations=dilations,
        pad_type=pad_type,
        custom=custom,
        sizes=sizes,
        bias=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@given(conv_cases())
def test_conv_matches_torch(case):
    rng = np.random.default_rng(case["seed"])
    rank, groups, pad_type = case["rank"], case["groups"], case["pad_type"]
    strides, dilations = case["strides"], case["dilations"]
    shape = (case["batch"], groups * case["c_group"], *case["sizes"])
    x = rng.standard_normal(shape).astype(np.float32)
    weight_shape = (case["c_out"], case["c_group"], *case["kernels"])
    weight = rng.standard_normal(weight_shape).astype(np.float32)
    bias = rng.standard_normal(case["c_out"]).astype(np.float32) if case["bias"] else None
    kwargs = conv_kwargs(weight, bias, strides, dilations, groups, pad_type, case["custom"])
    out = run_one_op(lambda v: mb.conv(x=v, **kwargs), x)

    dilated = [(k - 1) * d + 1 for k, d in zip(case["kernels"], dilations)]
    pads = mil_pads(pad_type, case["custom"], case["sizes"], dilated, strides)

    def torch_conv(x_t, w_t, b_t):
        if pad_type == "same" and set(strides) == {1}:  # torch's own "same" agrees at stride 1
            return CONV[rank](x_t, w_t, b_t, stride=1, padding="same", dilation=dilations, groups=groups)
        x_t = F.pad(x_t, torch_pad_arg(pads))
        return CONV[rank](x_t, w_t, b_t, stride=strides, dilation=dilations, groups=groups)

    expected = torch_conv(f64(x), f64(weight), f64(bias)).numpy()
    magnitude = torch_conv(f64(np.abs(x)), f64(np.abs(weight)), None if bias is None else f64(np.abs(bias))).numpy()
    torch32 = [None if a is None else torch.from_numpy(a) for a in (x, weight, bias)]
    expected32 = torch_conv(*torch32).numpy().astype(np.float64)
    assert_close(out, expected, magnitude, atol_factor=1e-12)  # float64 truth, rounded once
    assert_close(out, expected32, magnitude, atol_factor=1e-6)  # torch's own fp32 sums


def test_conv_with_dynamic_weight_matches_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 9)).astype(np.float32)
    weight = rng.standard_normal((6, 2, 3)).astype(np.float32)
    specs = [mb.TensorSpec(x.shape, dtype=types.fp32), mb.TensorSpec(weight.shape, types.fp32)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
    def prog(x, w):
        return mb.conv(x=x, weight=w, groups=2, strides=[2], pad_type="same")

    (out,) = evaluate(prog, {"x": x, "w": weight}).values()
    x_t = F.pad(torch.from_numpy(x), (1, 1))
    expected = F.conv1d(x_t, torch.from_numpy(weight), stride=2, groups=2).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_depthwise_conv_chain_of_24_layers_c1024():
    """The streaming-cache shape of the field notes: 24 depthwise convs, C=1024, kernel 9."""
    channels, frames, layers = 1024, 16, 24
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, channels, frames)).astype(np.float32)
    weights = [(rng.standard_normal((channels, 1, 9)) / 3).astype(np.float32) for _ in range(layers)]

    def chain(v):
        for w in weights:
            v = mb.conv(x=v, weight=w, groups=channels, pad_type="same")
        return v

    out = run_one_op(chain, x)
    expected = torch.from_numpy(x)  # fp32: torch's float64 depthwise conv takes seconds
    for w in weights:
        expected = F.conv1d(expected, torch.from_numpy(w), padding="same", groups=channels)
    expected = expected.numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


# -- conv_transpose ------------------------------------------------------------------------------


@st.composite
def conv_transpose_cases(draw):
    rank = draw(st.integers(1, 3))
    kernels = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    sizes = [draw(st.integers(1, 5 if rank < 3 else 3)) for _ in range(rank)]
    pad_type = draw(st.sampled_from(PAD_TYPES))
    custom = []
    for n, s, k, d in zip(sizes, strides, kernels, dilations):
        uncropped = (n - 1) * s + (k - 1) * d + 1
        before = draw(st.integers(0, min(2, uncropped - 1)))  # keep an output element
        custom.append((before, draw(st.integers(0, min(2, uncropped - 1 - before)))))
    # output_shape: the default size plus up to stride - 1 (sizes the forward conv maps back to
    # ``sizes``); coremltools infers no shape for same_lower without one.
    with_shape = pad_type == "same_lower" or draw(st.booleans())
    return dict(
        rank=rank,
        batch=draw(st.integers(1, 2)),
        groups=draw(st.integers(1, 3)),
        c_group_in=draw(st.integers(1, 2)),
        c_group_out=draw(st.integers(1, 2)),
        kernels=kernels,
        strides=strides,
        dilations=dilations,
        sizes=sizes,
        pad_type=pad_type,
        custom=custom,
        extra=[draw(st.integers(0, s - 1)) for s in strides] if with_shape else None,
        bias=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


@given(conv_transpose_cases())
def test_conv_transpose_matches_torch(case):
    rng = np.random.default_rng(case["seed"])
    rank, groups, sizes, pad_type = case["rank"], case["groups"], case["sizes"], case["pad_type"]
    strides, dilations, custom = case["strides"], case["dilations"], case["custom"]
    extra = case["extra"] or [0] * rank
    c_in, c_out = groups * case["c_group_in"], groups * case["c_group_out"]
    shape = (case["batch"], c_in, *sizes)
    x = rng.standard_normal(shape).astype(np.float32)
    weight_shape = (c_in, case["c_group_out"], *case["kernels"])
    weight = rng.standard_normal(weight_shape).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32) if case["bias"] else None
    dilated = [(k - 1) * d + 1 for k, d in zip(case["kernels"], dilations)]
    uncropped_sizes = [(n - 1) * s + k for n, s, k in zip(sizes, strides, dilated)]

    # Output sizes and the crop before each dim, from the MIL definition.
    if pad_type.startswith("same"):
        out_sizes = [n * s - e for n, s, e in zip(sizes, strides, extra)]
        crop = [b for b, _ in mil_pads(pad_type, custom, out_sizes, dilated, strides)]
    else:
        pads = mil_pads(pad_type, custom, sizes, dilated, strides)
        out_sizes = [f - b - a + e for f, (b, a), e in zip(uncropped_sizes, pads, extra)]
        crop = [b for b, _ in pads]

    kwargs = conv_kwargs(weight, bias, strides, dilations, groups, pad_type, custom)
    if case["extra"] is not None:
        kwargs["output_shape"] = [case["batch"], c_out, *out_sizes]
    out = run_one_op(lambda v: mb.conv_transpose(x=v, **kwargs), x)

    layout = dict(stride=strides, dilation=dilations, groups=groups)
    symmetric = pad_type == "custom" and all(b == a for b, a in custom)
    if symmetric and all(e < max(s, d) for e, s, d in zip(extra, strides, dilations)):
        # torch's own padding and output_padding
        padding = [b for b, _ in custom]
        expected = CONV_TRANSPOSE[rank](f64(x), f64(weight), padding=padding, output_padding=extra, **layout)
    else:  # the uncropped result, cropped (or zero-extended) to the output window
        uncropped = CONV_TRANSPOSE[rank](f64(x), f64(weight), **layout)
        expected = torch.zeros((case["batch"], c_out, *out_sizes), dtype=torch.float64)
        stops = [min(f, c + o) for c, f, o in zip(crop, uncropped_sizes, out_sizes)]
        source = tuple(slice(c, stop) for c, stop in zip(crop, stops))
        target = tuple(slice(0, stop - c) for c, stop in zip(crop, stops))
        expected[(Ellipsis,) + target] = uncropped[(Ellipsis,) + source]
    if bias is not None:
        expected = expected + f64(bias).reshape(-1, *[1] * rank)
    expected = expected.numpy()
    assert_close(out, expected, np.full(expected.shape, np.abs(expected).max()))


# -- pools ---------------------------------------------------------------------------------------


@st.composite
def pool_cases(draw, op: str, ceil_mode: bool):
    # MIL: ceil_mode is 1-D/2-D only, with valid or symmetric custom pads; l2_pool is 1-D/2-D.
    rank = draw(st.integers(1, 2 if op == "l2_pool" or ceil_mode else 3))
    pad_type = draw(st.sampled_from(("valid", "custom") if ceil_mode else PAD_TYPES))
    kernels = [draw(st.integers(1, 3)) for _ in range(rank)]
    if ceil_mode:
        # stride <= kernel: no window starts past x (at pad 0 MIL keeps such a window);
        # pads at most half the kernel (what torch accepts).
        strides = [draw(st.integers(1, k)) for k in kernels]
        custom = [(p, p) for p in (draw(st.integers(0, k // 2)) for k in kernels)]
    else:  # pads below the kernel: every window keeps an element of x
        strides = [draw(st.integers(1, 3)) for _ in kernels]
        custom = [(draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))) for k in kernels]
    sizes = []
    for k, pads in zip(kernels, custom):
        reach = k - (sum(pads) if pad_type == "custom" else 0)
        smallest = 1 if pad_type.startswith("same") else max(1, reach)  # a non-empty output
        sizes.append(smallest + draw(st.integers(0, 5)))
    return dict(
        op=op,
        rank=rank,
        ceil_mode=ceil_mode,
        pad_type=pad_type,
        kernels=kernels,
        strides=strides,
        custom=custom,
        sizes=sizes,
        batch=draw(st.integers(1, 2)),
        channels=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


def _sum_pool(x_t, rank, kernels, strides, padding, ceil_mode):
    """Window sums (padding adds nothing): avg_pool with divisor 1; 1-D through 2-D."""
    if rank == 1:
        x_t, kernels, strides, padding = (x_t.unsqueeze(-2), [1, *kernels], [1, *strides], [0, *padding])
    pool = F.avg_pool3d if rank == 3 else F.avg_pool2d
    out = pool(x_t, kernels, strides, padding, ceil_mode=ceil_mode, divisor_override=1)
    return out.squeeze(-2) if rank == 1 else out


def torch_pool(case, x: np.ndarray) -> np.ndarray:
    op, rank, kernels, strides = case["op"], case["rank"], case["kernels"], case["strides"]
    pads = mil_pads(case["pad_type"], case["custom"], case["sizes"], kernels, strides)
    x_t = f64(x)
    if case["ceil_mode"]:  # symmetric pads within torch's limits: torch's own padding
        padding = [b for b, _ in pads]
        if op == "max_pool":
            return MAX_POOL[rank](x_t, kernels, strides, padding, ceil_mode=True).numpy()
        if op == "l2_pool":  # lp_pool rescales clipped windows: sum the squares directly
            return _sum_pool(x_t * x_t, rank, kernels, strides, padding, True).sqrt().numpy()
        include = op == "avg_pool"
        return AVG_POOL[rank](x_t, kernels, strides, padding, ceil_mode=True, count_include_pad=include).numpy()
    fill = -math.inf if op == "max_pool" else 0.0
    padded = F.pad(x_t, torch_pad_arg(pads), value=fill)
    if op == "max_pool":
        return MAX_POOL[rank](padded, kernels, strides).numpy()
    if op == "l2_pool":
        window = kernels[0] if rank == 1 else kernels  # lp_pool1d takes an int
        return LP_POOL[rank](padded, 2, window, strides).numpy()
    if op == "avg_pool":
        return AVG_POOL[rank](padded, kernels, strides).numpy()
    # exclude padding: window sums over window counts of x's elements (pads may be asymmetric)
    ones = F.pad(torch.ones_like(x_t), torch_pad_arg(pads))
    zeros = [0] * rank
    sums = _sum_pool(padded, rank, kernels, strides, zeros, False)
    return (sums / _sum_pool(ones, rank, kernels, strides, zeros, False)).numpy()


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("op", POOLS)
@given(data=st.data())
def test_pool_matches_torch(op, ceil_mode, data):
    case = data.draw(pool_cases(op, ceil_mode))
    rng = np.random.default_rng(case["seed"])
    shape = (case["batch"], case["channels"], *case["sizes"])
    x = rng.standard_normal(shape).astype(np.float32)
    kwargs = dict(kernel_sizes=case["kernels"], strides=case["strides"], ceil_mode=ceil_mode)
    kwargs.update(padding_kwargs(case["pad_type"], case["custom"]))
    if op == "avg_pool_exclude":
        out = run_one_op(lambda v: mb.avg_pool(x=v, exclude_padding_from_average=True, **kwargs), x)
    else:
        out = run_one_op(lambda v: getattr(mb, op)(x=v, **kwargs), x)
    expected = torch_pool(case, x)
    if op == "max_pool":
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, expected.astype(np.float32))
    else:
        assert_close(out, expected, np.full(expected.shape, np.abs(x).max()))


# -- dtypes, opsets, errors ----------------------------------------------------------------------


@pytest.mark.parametrize("weight_dtype", [np.float16, np.float32])
def test_fp16_conv_stays_fp16(weight_dtype):
    """fp16 x (with an fp16 or, from iOS17, fp32 weight): float64 sums, rounded once to fp16."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 7)).astype(np.float16)
    weight = (rng.standard_normal((4, 2, 3, 3)) / 3).astype(weight_dtype)
    bias = rng.standard_normal(4).astype(weight_dtype)
    kwargs = dict(weight=weight, bias=bias, groups=2, pad_type="same_lower", strides=[1, 2])
    out = run_one_op(lambda v: mb.conv(x=v, **kwargs), x)
    assert out.dtype == np.float16
    pads = same_pads([6, 7], [3, 3], [1, 2], lower=True)
    x_t = F.pad(f64(x), torch_pad_arg(pads))
    expected = F.conv2d(x_t, f64(weight), f64(bias), stride=(1, 2), groups=2).numpy()
    np.testing.assert_array_equal(out, expected.astype(np.float16))


@pytest.mark.parametrize("op", ["max_pool", "avg_pool", "l2_pool"])
def test_fp16_pools_stay_fp16(op):
    x = np.random.default_rng(4).standard_normal((1, 3, 5, 6)).astype(np.float16)
    kwargs = dict(kernel_sizes=[2, 3], strides=[1, 2], pad_type="same")
    out = run_one_op(lambda v: getattr(mb, op)(x=v, **kwargs), x)
    assert out.dtype == np.float16
    case = dict(
        op=op, rank=2, ceil_mode=False, pad_type="same", kernels=[2, 3], strides=[1, 2], custom=None, sizes=[5, 6]
    )
    np.testing.assert_array_equal(out, torch_pool(case, x).astype(np.float16))


@pytest.mark.parametrize("opset", [ct.target.iOS15, ct.target.iOS16, ct.target.iOS17, ct.target.iOS18])
def test_kernels_serve_every_opset(opset):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 7)).astype(np.float32)
    weight = rng.standard_normal((2, 2, 3)).astype(np.float32)
    conv = lambda v: mb.conv(x=v, weight=weight, pad_type="same", strides=[2])  # noqa: E731
    out = run_one_op(conv, x, opset=opset)
    expected = F.conv1d(F.pad(torch.from_numpy(x), (1, 1)), torch.from_numpy(weight), stride=2)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-5, atol=1e-6)
    pool = lambda v: mb.avg_pool(x=v, kernel_sizes=[2], pad_type="valid")  # noqa: E731
    out = run_one_op(pool, x, opset=opset)
    np.testing.assert_allclose(out, F.avg_pool1d(torch.from_numpy(x), 2, 1).numpy(), rtol=1e-6)


def test_pool_window_of_only_padding_raises_naming_the_op():
    x = np.ones((1, 1, 4), np.float32)

    def build(v):
        return mb.max_pool(x=v, kernel_sizes=[2], strides=[1], pad_type="custom", pad=[2, 0], name="padded_pool")

    message = r"'padded_pool' of type 'max_pool'.*window 0 .*no element of x"
    with pytest.raises(UnsupportedOpError, match=message):
        run_one_op(build, x)


def test_ceil_mode_window_past_x_raises():
    """Kernel 1, stride 3, no padding: MIL keeps a third window, at 6 of a 5-long x."""
    x = np.ones((1, 1, 5), np.float32)

    def build(v):
        return mb.avg_pool(x=v, kernel_sizes=[1], strides=[3], pad_type="valid", ceil_mode=True, name="past")

    with pytest.raises(UnsupportedOpError, match=r"'past' of type 'avg_pool'.*window 2 "):
        run_one_op(build, x)


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "dilations", "pad"),
    [
        ((2, 12, 17, 19), (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
        ((1, 9, 23, 16), (3, 3), (2, 2), (1, 1), [1, 0, 1, 1]),
        ((1, 7, 20, 21), (3, 2), (1, 3), (2, 1), [0, 0, 0, 0]),
        ((1, 5, 6, 7, 8), (3, 3, 3), (1, 2, 1), (1, 1, 2), [1, 1, 0, 1, 2, 2]),
        ((1, 6, 13, 15), (3, 3), (2, 2), (2, 2), [2, 1, 0, 3]),
        ((1, 16, 40, 40), (3, 3), (2, 2), (1, 1), [0, 1, 0, 1]),
    ],
)
def test_depthwise_channels_last_sums_as_the_plain_loop(monkeypatch, shape, kernel, strides, dilations, pad):
    """A depthwise conv with short output rows runs channels-last in row blocks; with long rows, tap
    by tap in place. Both add each tap's product in the same order: the same bits."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    channels = shape[1]
    weight = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)

    def build(v):
        return mb.conv(
            x=v,
            weight=weight,
            bias=bias,
            groups=channels,
            strides=strides,
            dilations=dilations,
            pad_type="custom",
            pad=pad,
        )

    monkeypatch.setattr(conv_pool, "DEPTHWISE_BLOCK", 64)  # several row blocks
    blocked = run_one_op(build, x)
    monkeypatch.setattr(conv_pool, "LONG_ROWS", 1)  # every row counts as long: the plain loop
    plain = run_one_op(build, x)
    assert blocked.tobytes() == plain.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("strides", [(1, 1), (2, 2)])
def test_depthwise_channels_last_keeps_the_bits_of_specials(monkeypatch, dtype, strides):
    """-0, infinities, NaN and subnormals in x and the weight, fp16 and fp32: the channels-last
    path (its one copy of x split into stride phases, its taps as strided views) against the plain
    loop, bit for bit."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((1, 8, 12, 11)) * 3).astype(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dtype).tiny / 4, -1e-30], dtype)
    x.reshape(-1)[rng.choice(x.size, 60, replace=False)] = rng.choice(specials, 60)
    x[:, 3] = -0.0
    weight = rng.standard_normal((8, 1, 3, 3)).astype(dtype)
    weight[2] = -0.0
    weight[5, 0, 1, 1] = np.inf
    bias = np.array([-0.0, 0.0, -0.0, 1.5, np.nan, -2.0, -0.0, 0.25], dtype)

    def build(v):
        return mb.conv(x=v, weight=weight, bias=bias, groups=8, strides=strides, pad_type="same")

    monkeypatch.setattr(conv_pool, "DEPTHWISE_BLOCK", 32)  # several row blocks
    blocked = run_one_op(build, x)
    monkeypatch.setattr(conv_pool, "LONG_ROWS", 1)  # the plain loop
    plain = run_one_op(build, x)
    assert blocked.dtype == plain.dtype == dtype
    assert blocked.tobytes() == plain.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_depthwise_keeps_the_plain_loops_nan_where_two_nans_meet(monkeypatch, dtype):
    """inf times a zero weight makes numpy's default NaN (sign set); a NaN input times a weight
    keeps its own (sign clear): where both meet in one sum, the plain loop keeps the NaN it met
    first, which a fused multiply-add need not. The channels-last path gives the plain loop's bits."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 4, 10, 10)).astype(dtype)
    x[0, :, 3, 3] = np.inf
    x[0, :, 3, 4] = np.nan
    x[0, 1, 6, 6] = np.nan
    x[0, 1, 6, 7] = -np.inf
    weight = rng.standard_normal((4, 1, 3, 3)).astype(dtype)
    weight[:, 0, 1, 0] = 0.0  # inf at a tap whose weight is 0: inf * 0
    bias = rng.standard_normal(4).astype(dtype)

    def build(v):
        return mb.conv(x=v, weight=weight, bias=bias, groups=4, pad_type="same")

    fast = run_one_op(build, x)
    monkeypatch.setattr(conv_pool, "LONG_ROWS", 1)  # the plain loop
    plain = run_one_op(build, x)
    assert np.isnan(plain).sum() > 8 and np.signbit(plain[np.isnan(plain)]).any()
    assert fast.tobytes() == plain.tobytes()
