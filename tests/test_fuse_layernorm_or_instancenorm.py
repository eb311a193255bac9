"""webnn::fuse_layernorm_or_instancenorm: coremltools' pass, refusing a match whose ops another op
reads (coremltools raises there), fusing the rest exactly as coremltools does."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import mil_passes
from mil_passes.reference import evaluate
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.runner import run_pass, run_pipeline

PASS = "webnn::fuse_layernorm_or_instancenorm"
X = {"x": np.array([[1.0, -2.0, 3.0, 0.5], [0.0, 4.0, -1.0, 2.0]], np.float32)}


def layer_norm_pattern(*, shared_shift=True):
    """Pattern 1 (docs/reproducers/fuse_layernorm_shared_intermediate_raises.py's program)."""

    @mb.program(input_specs=[mb.TensorSpec((2, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        mean = mb.reduce_mean(x=x, axes=[-1], keep_dims=True)
        centred = mb.sub(x=x, y=mean)
        variance = mb.reduce_mean(x=mb.square(x=centred), axes=[-1], keep_dims=True)
        scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=1e-5)), y=np.ones(4, np.float32))
        shift = mb.sub(x=np.zeros(4, np.float32), y=mb.mul(x=mean, y=scale))
        y = mb.add(x=mb.mul(x=x, y=scale), y=shift, name="y")
        return (y, mb.relu(x=shift, name="other")) if shared_shift else y

    return prog


def test_coremltools_raises_on_a_shared_intermediate():
    """The bug the replacement answers (if coremltools fixes it, the replacement may go)."""
    with pytest.raises(ValueError, match="active output"):
        run_pass(layer_norm_pattern(), "common::fuse_layernorm_or_instancenorm")


def test_a_shared_intermediate_is_refused():
    after = check_pass(layer_norm_pattern, PASS, inputs=X)
    assert "layer_norm" not in op_counts(after)
    assert op_counts(after) == op_counts(layer_norm_pattern())


def test_an_unshared_pattern_is_fused_as_coremltools_fuses_it():
    ours, theirs = layer_norm_pattern(shared_shift=False), layer_norm_pattern(shared_shift=False)
    run_pass(ours, PASS)
    run_pass(theirs, "common::fuse_layernorm_or_instancenorm")
    assert op_counts(ours) == op_counts(theirs) and op_counts(ours)["layer_norm"] == 1
    layer_norms = [
        op for prog in (ours, theirs) for op in prog.functions["main"].operations if op.op_type == "layer_norm"
    ]
    assert [sorted((k, str(v.val)) for k, v in op.inputs.items()) for op in layer_norms[:1]] == [
        sorted((k, str(v.val)) for k, v in op.inputs.items()) for op in layer_norms[1:]
    ]


def test_the_pipeline_runs_it_in_place_of_coremltools_pass():
    names = list(mil_passes.pipeline().passes)
    assert "common::fuse_layernorm_or_instancenorm" not in names
    assert names.count(PASS) == list(ct.PassPipeline.DEFAULT.passes).count("common::fuse_layernorm_or_instancenorm")
    base = ct.PassPipeline.DEFAULT
    base.remove_passes({"common::add_fp16_cast"})
    after = layer_norm_pattern()
    run_pipeline(after, mil_passes.pipeline(base))  # DEFAULT raises here
    assert_equivalent(layer_norm_pattern(), after, X)


def variance_over_other_axes():
    """docs/reproducers/fuse_layernorm_variance_axes.py's program: mean over [-2, -1], variance
    over [-1]."""

    @mb.program(input_specs=[mb.TensorSpec((2, 3, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        mean = mb.reduce_mean(x=x, axes=[-2, -1], keep_dims=True)
        centred = mb.sub(x=x, y=mean)
        variance = mb.reduce_mean(x=mb.square(x=centred), axes=[-1], keep_dims=True)
        scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=np.float32(1e-5))), y=np.ones((3, 4), np.float32))
        shift = mb.sub(x=np.zeros((3, 4), np.float32), y=mb.mul(x=mean, y=scale))
        return mb.add(x=mb.mul(x=x, y=scale), y=shift, name="y")

    return prog


X3 = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4) ** 1.5 / 10}


def test_coremltools_fuses_a_variance_over_other_axes():
    """The miscompile the replacement answers (if coremltools fixes it, this fails)."""
    prog = variance_over_other_axes()
    run_pass(prog, "common::fuse_layernorm_or_instancenorm")
    assert op_counts(prog)["layer_norm"] == 1


def test_a_variance_over_other_axes_is_refused():
    after = check_pass(variance_over_other_axes, PASS, inputs=X3)
    assert "layer_norm" not in op_counts(after)


def pattern_1(shape, axes, gamma, beta):
    """Pattern 1 over ``axes`` of an fp32 ``shape`` input, with these gamma / beta consts."""

    @mb.program(input_specs=[mb.TensorSpec(shape)], opset_version=ct.target.iOS17)
    def prog(x):
        mean = mb.reduce_mean(x=x, axes=axes, keep_dims=True)
        variance = mb.reduce_mean(x=mb.square(x=mb.sub(x=x, y=mean)), axes=axes, keep_dims=True)
        scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=1e-5)), y=gamma)
        shift = mb.sub(x=beta, y=mb.mul(x=mean, y=scale))
        return mb.add(x=mb.mul(x=x, y=scale), y=shift, name="y")

    return prog


def feeds_for(shape):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


MISPLACED = {
    # docs/reproducers/fuse_layernorm_broadcast_gamma_instance_norm.py at fp32: the gamma widens x
    "gamma widens x": ((1, 1, 1, 1), [-2, -1], np.array([[0.5, 2.0]], np.float32), np.array([[0.1, -0.1]], np.float32)),
    # a gamma along W (not the channels): instance_norm takes it per channel (C == W == 2)
    "gamma along W": (
        (1, 2, 3, 2),
        [-2, -1],
        np.array([0.5, 2.0], np.float32).reshape(1, 1, 1, 2),
        np.array([0.1, -0.1], np.float32).reshape(1, 1, 1, 2),
    ),
}


@pytest.mark.parametrize("case", list(MISPLACED))
def test_coremltools_fuses_a_misplaced_gamma(case):
    """The bug the refusal answers (if coremltools fixes it, the refusal may go)."""
    shape, axes, gamma, beta = MISPLACED[case]
    prog = pattern_1(shape, axes, gamma, beta)
    run_pass(prog, "common::fuse_layernorm_or_instancenorm")
    assert op_counts(prog)["instance_norm"] == 1
    with pytest.raises(AssertionError):
        assert_equivalent(pattern_1(shape, axes, gamma, beta), prog, feeds_for(shape))


@pytest.mark.parametrize("case", list(MISPLACED))
def test_a_misplaced_gamma_is_refused(case):
    shape, axes, gamma, beta = MISPLACED[case]
    after = check_pass(lambda: pattern_1(shape, axes, gamma, beta), PASS, inputs=feeds_for(shape))
    assert op_counts(after) == op_counts(pattern_1(shape, axes, gamma, beta))


def test_a_per_channel_gamma_still_becomes_an_instance_norm():
    shape, gamma = (1, 2, 3, 2), np.array([0.5, 2.0], np.float32).reshape(1, 2, 1, 1)
    ours = pattern_1(shape, [-2, -1], gamma, gamma - 1)
    run_pass(ours, PASS)
    assert op_counts(ours)["instance_norm"] == 1
    assert_equivalent(pattern_1(shape, [-2, -1], gamma, gamma - 1), ours, feeds_for(shape), rtol=1e-5, atol=1e-6)


def fp16_layer_norm():
    """Pattern 1 written in fp16 ops over the last axis of a (2, 8) input."""

    @mb.program(input_specs=[mb.TensorSpec((2, 8), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        mean = mb.reduce_mean(x=x, axes=[-1], keep_dims=True)
        variance = mb.reduce_mean(x=mb.square(x=mb.sub(x=x, y=mean)), axes=[-1], keep_dims=True)
        scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=np.float16(1e-5))), y=np.ones(8, np.float16))
        shift = mb.sub(x=np.zeros(8, np.float16), y=mb.mul(x=mean, y=scale))
        return mb.add(x=mb.mul(x=x, y=scale), y=shift, name="y")

    return prog


# a mean large against the spread: the written fp16 ops cancel
X16 = {"x": (100 + 0.5 * np.random.default_rng(0).standard_normal((2, 8))).astype(np.float16)}


def test_coremltools_fusion_of_fp16_ops_changes_values_beyond_fp16_precision():
    """Why fp16 is refused: 6.6% of the output's scale, the fused op closer to the exact value."""
    written = evaluate(fp16_layer_norm(), X16)["y"].astype(np.float64)
    fused_prog = fp16_layer_norm()
    run_pass(fused_prog, "common::fuse_layernorm_or_instancenorm")
    assert op_counts(fused_prog)["layer_norm"] == 1
    fused = evaluate(fused_prog, X16)["y"].astype(np.float64)
    x = X16["x"].astype(np.float64)
    exact = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    assert np.abs(written - fused).max() > 0.05 * np.abs(fused).max()
    assert np.abs(fused - exact).max() < 1e-3 < np.abs(written - exact).max()


def test_fp16_ops_are_refused():
    after = check_pass(fp16_layer_norm, PASS, inputs=X16)
    assert op_counts(after) == op_counts(fp16_layer_norm())
