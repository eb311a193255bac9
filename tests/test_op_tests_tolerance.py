"""Evidence for the MIL op-test failures documented as the tests' own problem (benchmarks/op_tests.py
CAUSES; docs/op-tests.md): with the fp32 backend and fp16 data, the tests' expectations round
differently from any fp16 program, while the interpreter gives the correctly rounded fp16 result of
the program it is given."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import run

FP32_TOLERANCE = {"rtol": 1e-5, "atol": 1e-4}  # run_compare_builder's defaults, which the fp32 backend keeps


def _within(got: np.ndarray, want: np.ndarray) -> bool:
    return np.allclose(got.astype(np.float64), np.asarray(want, np.float64), **FP32_TOLERANCE)


def test_l2_norm_stress_expectation_is_computed_in_fp16_arithmetic_with_an_epsilon_the_program_cannot_hold():
    """TestNormalizationL2Norm.test_builder_to_backend_stress (x_param_dtype fp16): the expectation
    squares and sums the fp16 data in fp16 and uses epsilon 5.7, the program holds fp16(5.7)."""
    from coremltools.converters.mil.mil.ops.tests.iOS14.test_normalization import TestNormalizationL2Norm

    rng = np.random.default_rng(0)
    test_agrees = 0
    for _ in range(20):
        x = rng.uniform(-1, 1, size=rng.integers(2, 6, size=3)).astype(np.float16)
        (got,) = run(lambda x: mb.l2_norm(x=x, epsilon=np.float16(5.7)), {"x": x}, opset=ct.target.iOS15)
        exact = TestNormalizationL2Norm._compute_l2_norm(x.astype(np.float64), float(np.float16(5.7)))
        np.testing.assert_array_equal(got, exact.astype(np.float16))  # correctly rounded, every time
        test_agrees += _within(got, TestNormalizationL2Norm._compute_l2_norm(x, 5.7))
    assert test_agrees < 10  # the test's own expectation misses most correctly rounded results


def test_conv_transpose_stress_expectation_comes_from_the_unrounded_fp32_data():
    """TestConvTranspose.test_builder_to_backend_stress (x_weight_dtype fp16): the expectation is torch
    on fp32 data, cast to fp16 afterwards; the program is given the data rounded to fp16."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.ConvTranspose2d(12, 3, (2, 4), stride=(1, 1), padding=(2, 3), bias=False)
    data = torch.randn(1, 12, 10, 14)
    weight16 = layer.weight.detach().numpy().astype(np.float16)
    x16 = data.numpy().astype(np.float16)
    (got,) = run(
        lambda x: mb.conv_transpose(x=x, weight=weight16, pad_type="custom", pad=[2, 2, 3, 3], strides=[1, 1]),
        {"x": x16},
    )
    as_tested = layer(data).detach().numpy().astype(np.float16)  # what the test expects
    on_program_data = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x16.astype(np.float64)),
        torch.from_numpy(weight16.astype(np.float64)),
        stride=(1, 1),
        padding=(2, 3),
    ).numpy()
    assert not _within(got, as_tested)
    ulp = np.spacing(np.abs(on_program_data).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got.astype(np.float64) - on_program_data) <= ulp)  # within an fp16 ulp of exact
    # within 2^-10 (an fp16 ulp at magnitude 1) of the test's value, or its relative 2^-10: inside the documented 2^-8
    difference = np.abs(got.astype(np.float64) - as_tested)
    assert np.all(difference <= 2.0**-10 * np.maximum(1.0, np.abs(as_tested.astype(np.float64))))


def test_fp16_outputs_at_the_fp32_tolerance_fail_by_their_own_rounding():
    """iOS18 TestGRU (dtype float16, precision fp32): the output is fp16, the expectation exact."""
    exact = np.float64(0.651486)  # from the failing case's report
    nearest = np.float16(exact)
    assert nearest == np.float16(0.6514)  # what the interpreter gave
    assert not _within(np.array([nearest]), np.array([exact]))
    assert abs(float(nearest) - exact) <= np.spacing(nearest) / 2


def test_crop_resize_ios16_expectation_7_899_is_a_typo_for_7_9():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    roi = np.array([0, 0.5, 1.8, 1.0, 0.3], np.float32).reshape(1, 1, 5, 1, 1)
    build = lambda x: mb.crop_resize(
        x=x,
        roi=roi,
        target_width=2,
        target_height=2,
        normalized_coordinates=True,
        box_coordinate_mode="CORNERS_HEIGHT_FIRST",
        sampling_mode="ALIGN_CORNERS",
    )
    (got,) = run(build, {"x": x}, opset=ct.target.iOS16)
    # row 1.5, column 0.9: halfway between 5.9 (row 1) and 9.9 (row 2)
    assert got[0, 0, 0, 0, 1] == pytest.approx(7.9, abs=1e-6)


def test_rnn_expectation_comes_from_the_unrounded_fp32_data():
    """iOS17 TestRNN (dtype float16, precision fp32): torch runs on the fp32 data, the program on the
    data, state and weights rounded to fp16; 64 inputs per step add up the rounding."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(50)
    layer = torch.nn.RNN(64, 16, 1, bias=True)
    x, h0 = torch.randn(8, 32, 64), torch.randn(1, 32, 16)
    w_ih, w_hh = (getattr(layer, name).detach().numpy().astype(np.float16) for name in ("weight_ih_l0", "weight_hh_l0"))
    bias = (layer.bias_ih_l0 + layer.bias_hh_l0).detach().numpy().astype(np.float16)
    x16, h16 = x.numpy().astype(np.float16), h0[0].numpy().astype(np.float16)
    out, _ = run(
        lambda x, h: mb.rnn(x=x, initial_h=h, weight_ih=w_ih, weight_hh=w_hh, bias=bias, output_sequence=True),
        {"x": x16, "h": h16},
        opset=ct.target.iOS17,
    )
    as_tested = layer(x, h0)[0].detach().numpy()  # what the test expects (fp32, unrounded data)
    h = h16.astype(np.float64)
    on_program_data = []
    for x_t in x16.astype(np.float64):  # float64 steps on the program's own fp16 data
        h = np.tanh(x_t @ w_ih.T.astype(np.float64) + h @ w_hh.T.astype(np.float64) + bias.astype(np.float64))
        on_program_data.append(h)
    ulp = np.spacing(np.abs(np.stack(on_program_data)).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(out.astype(np.float64) - np.stack(on_program_data)) <= ulp)  # within an fp16 ulp
    difference = np.abs(out.astype(np.float64) - as_tested)
    assert not _within(out, as_tested) and difference.max() <= 2.0**-8  # the documented bound


def test_compression_expectations_add_one_in_fp16_arithmetic():
    """iOS18 test_compression (lut_dtype fp16, precision fp32): the program adds the fp16 lookup
    values to an fp32 ones input in fp32; the test adds 1 to the fp16 values in numpy, in fp16."""
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_sparse
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(1)
    mask = rng.choice([0, 1], size=(4, 8), p=[0.3, 0.7]).astype(types.np_uint1_dtype)
    data = rng.integers(0, 4, size=int(mask.sum())).astype(types.nptype_from_builtin(types.uint2))
    lut = rng.random((1, 1, 4, 1)).astype(np.float16)
    ones = np.ones(int(mask.sum()), np.float32)

    def build(x):
        _, nonzero = mb.constexpr_lut_to_sparse(indices_mask=mask, indices_nonzero_data=data, lut=lut)
        return mb.add(x=x, y=mb.cast(x=nonzero, dtype="fp32"))

    (got,) = run(build, {"x": ones}, opset=ct.target.iOS18)
    values = constexpr_lut_to_sparse.decompress(mask, data, lut, None)[1]
    np.testing.assert_array_equal(got, values.astype(np.float32) + 1)  # exact in fp32
    as_tested = values + 1  # fp16 + int: rounded to fp16, half an fp16 ulp of [1, 2) at most
    assert as_tested.dtype == np.float16
    assert not _within(got, as_tested) and np.abs(got - as_tested.astype(np.float32)).max() <= 2.0**-11
