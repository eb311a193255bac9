"""The DEFAULT plants give each pass of coremltools' DEFAULT its pattern; failures get a class."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from hypothesis import HealthCheck, Phase, find, given, settings

from mil_passes.ir import iter_ops
from mil_passes.testing.default_plants import (
    PASS_PLANTS,
    REACHED_BY_STATES,
    REACHED_UNPLANTED,
    UNREACHED,
    plants_for,
)
from mil_passes.testing.failure_class import (
    CRASH,
    MISCOMPILE,
    PRECISION,
    changed_only_where_nonfinite,
    failure_class,
    removed_op_overflowed,
)
from mil_passes.testing.fuzz import check_verified, fuzz, strategy_for
from mil_passes.testing.plants import PLANTS
from mil_passes.testing.strategies import plant_names, programs
from mil_passes.verify import OutputChange, PassRow

FIRST = settings(
    max_examples=40, database=None, deadline=None, phases=(Phase.generate,), suppress_health_check=list(HealthCheck)
)


def test_every_pass_of_default_is_planted_reached_or_listed_with_a_reason():
    distinct = set(PassPipeline.DEFAULT.passes)
    planted, reached, unreached = set(PASS_PLANTS), set(REACHED_UNPLANTED) | set(REACHED_BY_STATES), set(UNREACHED)
    assert planted | reached | unreached == distinct
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
