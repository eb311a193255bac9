"""webnn::finite_mask_sentinels: an fp16 ±inf mask sentinel becomes ±40000; the softmax is the same
where a row keeps a position, finite where 0 * -inf was NaN; what it leaves; random programs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops
from mil_passes.lint import lint
from mil_passes.passes.finite_mask_sentinels import SENTINEL, InfiniteMaskSentinel
from mil_passes.reference import evaluate
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing.strategies import programs
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pass
from pass_helpers import would_rewrite, evaluates, only_op

PASS = "webnn::finite_mask_sentinels"
FP16 = types.fp16
SHAPE = (1, 2, 3, 4)


def padding_mask_program(sentinel=-np.inf, dtype=FP16, also_output=False):
    """The docstring's example: ``softmax(scores + (1 - mask) * sentinel)``."""

    @mb.program(
        input_specs=[mb.TensorSpec(SHAPE, dtype=dtype), mb.TensorSpec((1, 1, 1, 4), dtype=dtype)],
        opset_version=ct.target.iOS17,
    )
    def prog(scores, mask):
        np_dtype = np.float16 if dtype == FP16 else np.float32
        inverted = mb.sub(x=np_dtype(1), y=mask, name="inverted")
        additive = mb.mul(x=inverted, y=np.array(sentinel, np_dtype), name="additive")
        probs = mb.softmax(x=mb.add(x=scores, y=additive, name="masked"), axis=-1, name="probs")
        return (probs, additive) if also_output else probs

    return prog


def feeds(rng, keep):
    return {"scores": rng.standard_normal(SHAPE).astype(np.float16), "mask": np.asarray(keep, np.float16)}


def torch_softmax(scores, keep):
    """What the fp32 model computes: finfo(float32).min as the sentinel, in fp32."""
    logits = scores.astype(np.float32) + (1 - np.asarray(keep, np.float32)) * np.finfo(np.float32).min
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def test_the_docstring_example_is_nan_before_and_agrees_with_fp32_after():
    prog = padding_mask_program()
    keep = [[[[1, 1, 0, 0]]]]
    inputs = feeds(np.random.default_rng(0), keep)
    (before,) = evaluate(prog, inputs).values()
    assert np.isnan(before).all()  # 0 * -inf at every kept position
    run_pass(prog, PASS)
    (after,) = evaluate(prog, inputs).values()
    np.testing.assert_allclose(after, torch_softmax(inputs["scores"], keep), atol=1e-3)
    assert op_counts(prog) == {"sub": 1, "mul": 1, "add": 1, "softmax": 1}
    assert float(only_op(prog, "mul").y.val) == -SENTINEL


def additive_mask_program(mask_value):
    @mb.program(input_specs=[mb.TensorSpec(SHAPE, dtype=FP16)], opset_version=ct.target.iOS17)
    def prog(scores):
        return mb.softmax(x=mb.add(x=scores, y=mask_value, name="masked"), axis=-1, name="probs")

    return prog


@given(st.integers(0, 2**16), st.floats(-300, 300))
@settings(max_examples=30)
def test_an_additive_minus_inf_mask_gives_the_same_bits_where_a_row_keeps_a_position(seed, shift):
    rng = np.random.default_rng(seed)
    masked = rng.random((1, 1, 3, 4)) < 0.5
    masked[..., rng.integers(0, 4)] = False
    mask = np.where(masked, -np.inf, 0).astype(np.float16)
    scores = (rng.standard_normal(SHAPE) * 30 + shift).astype(np.float16)
    check_pass(lambda: additive_mask_program(mask), PASS, inputs={"scores": scores})


def test_a_row_masked_whole_is_finite_instead_of_nan():
    prog = additive_mask_program(np.full((1, 1, 1, 4), -np.inf, np.float16))
    scores = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float16)
    assert np.isnan(next(iter(evaluate(prog, {"scores": scores}).values()))).all()
    run_pass(prog, PASS)
    (after,) = evaluate(prog, {"scores": scores}).values()
    assert np.isfinite(after).all()


def test_a_fill_of_minus_inf_times_a_causal_mask_qwen2s_form():
    @mb.program(input_specs=[mb.TensorSpec((1, 1, 4, 4), dtype=FP16)], opset_version=ct.target.iOS17)
    def prog(scores):
        upper = np.triu(np.ones((4, 4), np.float16), 1)
        causal = mb.mul(x=mb.fill(shape=np.array([4, 4], np.int32), value=np.float16(-np.inf)), y=upper)
        mask = mb.expand_dims(x=mb.expand_dims(x=causal, axes=[0]), axes=[1])
        return mb.softmax(x=mb.add(x=scores, y=mask), axis=-1, name="probs")

    scores = np.random.default_rng(2).standard_normal((1, 1, 4, 4)).astype(np.float16)
    assert np.isnan(next(iter(evaluate(prog, {"scores": scores}).values()))).any()
    run_pass(prog, PASS)
    (after,) = evaluate(prog, {"scores": scores}).values()
    want = torch_softmax(scores, np.tril(np.ones((4, 4))))
    np.testing.assert_allclose(after, want, atol=1e-3)


def test_a_sentinel_whose_value_reaches_an_output_is_refused():
    prog = padding_mask_program(also_output=True)
    match = InfiniteMaskSentinel().match(only_op(prog, "softmax"))
    assert isinstance(match, Declined) and "it is an output" in match.reason


def test_a_sentinel_read_by_more_than_the_mask_is_refused():
    @mb.program(input_specs=[mb.TensorSpec(SHAPE, dtype=FP16)], opset_version=ct.target.iOS17)
    def prog(scores):
        inf = mb.mul(x=scores, y=np.float16(-np.inf), name="scaled")
        return mb.softmax(x=mb.add(x=scores, y=inf), axis=-1), mb.reduce_max(x=inf, axes=[-1])

    match = InfiniteMaskSentinel().match(only_op(prog, "softmax"))
    assert isinstance(match, Declined) and "reduce_max" in match.reason


@pytest.mark.parametrize(
    "sentinel, dtype", [(-np.inf, types.fp32), (-40000.0, FP16), (float(np.finfo(np.float32).min), types.fp32)]
)
def test_fp32_masks_and_finite_fp16_sentinels_are_not_candidates(sentinel, dtype):
    prog = padding_mask_program(sentinel, dtype)
    assert InfiniteMaskSentinel().match(only_op(prog, "softmax")) is None


def test_lint_names_the_pass_on_the_softmax():
    findings = [f for f in lint(padding_mask_program()) if f.rule == "ane-neg-inf-const"]
    assert [f.fix for f in findings] == [PASS]
    assert findings[0].op == "probs"


@given(programs(plant=[PASS]))
def test_random_programs_with_the_plant_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [op for op in iter_ops(after) if op.op_type == "softmax" and would_rewrite(InfiniteMaskSentinel(), op)]
