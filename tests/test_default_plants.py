"""The DEFAULT plants give each pass of coremltools' DEFAULT its pattern; failures get a class."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from hypothesis import HealthCheck, Phase, find, given, settings

from mil_passes.ir import iter_ops
from mil_passes.reference.interpreter import evaluate_vars
from mil_passes.testing.plants.default import (
    PASS_PLANTS,
    REACHED_BY_STATES,
    REACHED_UNPLANTED,
    UNREACHED,
    plants_for,
)
from mil_passes.testing.fuzz.failure_class import (
    CRASH,
    MISCOMPILE,
    PRECISION,
    changed_only_where_nonfinite,
    failure_class,
    removed_op_overflowed,
    within_rounding_of_removed_ops,
)
from mil_passes.testing.fuzz.fuzzer import check_verified, fuzz, strategy_for
from mil_passes.testing.plants.passes import PLANTS
from mil_passes.testing.strategies import plant_names, programs
from mil_passes.verify import OutputChange, PassRow

FIRST = settings(
    max_examples=40, database=None, deadline=None, phases=(Phase.generate,), suppress_health_check=list(HealthCheck)
)


def test_every_pass_of_default_is_planted_reached_or_listed_with_a_reason():
    distinct = set(PassPipeline.DEFAULT.passes)
    planted, reached, unreached = set(PASS_PLANTS), set(REACHED_UNPLANTED) | set(REACHED_BY_STATES), set(UNREACHED)
    assert distinct <= planted | reached | unreached
    newer = (planted | reached | unreached) - distinct  # coremltools 8.3 lacks guard_negative_gather_indices
    assert not newer & set(PASS_REGISTRY.passes)
    assert not planted & reached and not planted & unreached and not reached & unreached
    assert not set(REACHED_UNPLANTED) & set(REACHED_BY_STATES)
    assert all(reason.startswith("needs ") for reason in UNREACHED.values())


def test_a_coremltools_target_gets_its_plants_the_packages_and_the_mix():
    assert plants_for("common::fuse_gelu_exact") == (*PLANTS, "gelu_exact", "default_mix")
    assert plants_for("pipeline") == (*PLANTS, "default_mix")
    assert "rename_duplicate_temporaries" not in plants_for("common::fuse_prelu", unique_names=True)
    assert plant_names(plants_for("common::fuse_prelu")) == plants_for("common::fuse_prelu")
    assert strategy_for("common::fuse_gelu_exact") is not None and strategy_for("webnn::fold_shape_ops") is not None


@pytest.mark.parametrize("name", sorted(PASS_PLANTS))
def test_each_plant_gives_its_pass_work(name):
    """A small program with the pass's plants that the pass rewrites, without a failure."""
    strategy = programs(plant=PASS_PLANTS[name], max_ops=1, nested=False, name_pool=None)

    def rewrites(drawn) -> bool:
        try:
            return check_verified(drawn, name)
        except AssertionError:  # a coremltools bug the fuzzer reports (docs/coremltools-passes.md)
            return False

    assert find(strategy, rewrites, settings=FIRST).planted


def _row(status, outputs=(), name="common::fuse_gelu_exact", error=None):
    return PassRow(1, name, 0.0, 3, 1, status, {o.name: o for o in outputs}, error)


def _change(dtype_after="fp32", shape_after=(2,)):
    return OutputChange("y", "fp32", dtype_after, [2], list(shape_after), 1.0, 1.0, "changed")


def test_failure_classes_of_rows():
    assert failure_class(_row("raised", error="IndexError: x")) == CRASH
    assert failure_class(_row("invalid", error="validate() failed")) == MISCOMPILE
    assert failure_class(_row("changed", [_change("int32")], "common::add_fp16_cast")) == MISCOMPILE
    assert failure_class(_row("changed", [_change(shape_after=(3,))], "common::add_fp16_cast")) == MISCOMPILE
    assert failure_class(_row("changed", [_change()], "common::add_fp16_cast")) == PRECISION
    assert failure_class(_row("changed", [_change()])) == MISCOMPILE  # no programs: no excuse


def _programs_pair(after_value: float):
    @mb.program(input_specs=[mb.TensorSpec((2,))])
    def before(x):
        return mb.mul(x=x, y=np.float32(0.0))  # NaN at ±inf

    @mb.program(input_specs=[mb.TensorSpec((2,))])
    def after(x):
        return mb.add(
            x=mb.mul(x=mb.relu(x=mb.mul(x=x, y=np.float32(-1.0))), y=np.float32(0.0)), y=np.float32(after_value)
        )

    return before, after


def test_a_change_only_where_the_original_was_not_finite_is_precision():
    feeds = [{"x": np.array([np.inf, 2.0], np.float32)}]
    before, after = _programs_pair(0.0)  # relu(-inf) * 0 = 0 where x * 0 was NaN; 0 elsewhere
    assert changed_only_where_nonfinite(before, after, feeds)
    assert failure_class(_row("changed", [_change()]), before, after, feeds) == PRECISION
    before, after = _programs_pair(1.0)  # a finite element changes too
    assert not changed_only_where_nonfinite(before, after, feeds)
    assert failure_class(_row("changed", [_change()]), before, after, feeds) == MISCOMPILE


def _normalized_pair(scale: float):
    """x / sqrt(x²) as written, and a fused sign(x) * scale (1.0: the same values unless x² overflows)."""

    @mb.program(input_specs=[mb.TensorSpec((2,))])
    def before(x):
        return mb.mul(x=x, y=mb.rsqrt(x=mb.square(x=x, name="squared"), name="inverse_norm"), name="y")

    @mb.program(input_specs=[mb.TensorSpec((2,))])
    def after(x):
        return mb.mul(x=mb.sign(x=x, name="fused"), y=np.float32(scale), name="y")

    return before, after


def test_a_fusion_that_avoids_an_overflow_of_the_ops_it_removed_is_precision():
    overflowing = [{"x": np.array([1e20, 2.0], np.float32)}]  # squared is inf: the written y is 0
    before, after = _normalized_pair(1.0)
    assert removed_op_overflowed(before, after, overflowing)
    assert not changed_only_where_nonfinite(before, after, overflowing)
    assert failure_class(_row("changed", [_change()]), before, after, overflowing) == PRECISION
    ordinary = [{"x": np.array([3.0, 2.0], np.float32)}]
    before, after = _normalized_pair(2.0)  # a real change, no overflow anywhere
    assert not removed_op_overflowed(before, after, ordinary)
    assert failure_class(_row("changed", [_change()]), before, after, ordinary) == MISCOMPILE


def _written_layer_norm(beta_shift: float = 0.0):
    """The layer norm of an int32 input cast to fp32, written as the fusion's pattern 1:
    ``x * scale + (beta - mean * scale)``."""
    gamma = np.array([0.75, 1.5, 0.6, 1.1], np.float32)
    beta = np.array([0.1, -0.2, 0.3, 0.05], np.float32) + np.float32(beta_shift)

    @mb.program(input_specs=[mb.TensorSpec((2, 4), dtype=types.int32)])
    def prog(i):
        x = mb.cast(x=i, dtype="fp32", name="x")
        mean = mb.reduce_mean(x=x, axes=[-1], keep_dims=True, name="mean")
        square = mb.square(x=mb.sub(x=x, y=mean, name="centred"), name="square")
        variance = mb.reduce_mean(x=square, axes=[-1], keep_dims=True, name="variance")
        inverse = mb.rsqrt(x=mb.add(x=variance, y=np.float32(1e-5), name="shifted"), name="inverse")
        scale = mb.mul(x=inverse, y=gamma, name="scale")
        shift = mb.sub(x=beta, y=mb.mul(x=mean, y=scale, name="mean_scaled"), name="shift")
        return mb.add(x=mb.mul(x=x, y=scale, name="x_scaled"), y=shift, name="y")

    return prog


NEAR_INT32_MIN = {"i": np.array([[0, 300, 900, 1200], [7, 2000, 600, 100]], np.int32) + np.iinfo(np.int32).min}
ORDINARY_INTS = {"i": np.array([[3, -4, 10, 2], [1, 2, 3, 5]], np.int32)}


def test_a_fusion_that_avoids_the_cancellation_of_the_written_ops_is_precision():
    """At x ≈ -2³¹ (fp32's ulp is 256) the written x*scale + (beta - mean*scale) cancels values of
    ~2·10⁹ and is off by up to 0.48 from the fused layer_norm; one ulp on x moves it as much."""
    before, after = _written_layer_norm(), _written_layer_norm()
    PASS_REGISTRY["webnn::fuse_layernorm_or_instancenorm"](after)
    assert "layer_norm" in {op.op_type for op in after.functions["main"].operations}
    row = _row("changed", [_change()], "webnn::fuse_layernorm_or_instancenorm")
    assert not changed_only_where_nonfinite(before, after, [NEAR_INT32_MIN])  # a real change
    assert within_rounding_of_removed_ops(before, after, [NEAR_INT32_MIN, ORDINARY_INTS])
    assert failure_class(row, before, after, [NEAR_INT32_MIN, ORDINARY_INTS]) == PRECISION
    wrong = _written_layer_norm(beta_shift=0.01)  # a fusion that got beta wrong by 0.01
    PASS_REGISTRY["webnn::fuse_layernorm_or_instancenorm"](wrong)
    assert not within_rounding_of_removed_ops(before, wrong, [ORDINARY_INTS])
    assert failure_class(row, before, wrong, [NEAR_INT32_MIN, ORDINARY_INTS]) == MISCOMPILE


def test_the_perturbed_evaluation_moves_only_the_vars_it_replaces():
    before = _written_layer_norm()
    values = evaluate_vars(before, ORDINARY_INTS)
    x = next(op.outputs[0] for op in before.functions["main"].operations if op.name == "x")
    nudged = {x: np.nextafter(values[x], np.float32(np.inf))}
    moved = evaluate_vars(before, ORDINARY_INTS, replacing=nudged)
    assert moved[x] is nudged[x] and not np.array_equal(moved[x], values[x])
    (y,) = before.functions["main"].outputs
    assert 0 < np.abs(moved[y] - values[y]).max() < 1e-5  # well-conditioned: an ulp moves y by about an ulp
    assert np.array_equal(evaluate_vars(before, ORDINARY_INTS)[y], values[y])


@pytest.mark.parametrize(
    ("plant", "op_types"),
    [
        ("conv_batchnorm", {"batch_norm"}),
        ("stack_reshape", {"stack", "reshape"}),
        ("stack_split_squeeze", {"stack", "split", "squeeze"}),
        ("dequantize_quantize", {"dequantize", "quantize"}),
        ("pad_pad", {"pad"}),
    ],
)
def test_a_focused_plant_draws_its_branch_whenever_it_is_planted(plant, op_types):
    strategy = programs(plant=(plant,), max_ops=1, nested=False, name_pool=None)

    @settings(FIRST, max_examples=15)
    @given(strategy)
    def planted_branch(drawn):
        ops = {op.op_type for op in iter_ops(drawn.build())}
        assert plant not in drawn.planted or op_types <= ops

    planted_branch()


def test_the_passes_one_branch_reaches_get_the_focused_plant():
    assert PASS_PLANTS["common::fuse_conv_batchnorm"] == ("conv_batchnorm",)
    assert PASS_PLANTS["common::replace_stack_reshape"] == ("stack_reshape",)
    assert PASS_PLANTS["common::dequantize_quantize_pair_elimination"] == ("dequantize_quantize",)


@pytest.mark.parametrize("name", REACHED_BY_STATES)
def test_the_passes_that_need_states_rewrite_stateful_programs(name):
    report = fuzz(f"states:{name}", name, examples=15, at=0)
    assert report.failures == 0 and report.rewritten > 0, report.line()
