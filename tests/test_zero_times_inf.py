"""lint's nan-zero-times-inf: a used mul of an infinite constant by a value that can be 0 is an error."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.lint import lint
from mil_passes.lint.catalog import RULES
from mil_passes.lint.zero_times_inf import RULE, zero_times_inf_findings

FP16 = types.fp16
MINUS_INF = np.float16(-np.inf)


def masked_softmax(factor, sentinel=MINUS_INF, through_fill=False, dtype=FP16):
    @mb.program(input_specs=[mb.TensorSpec((2, 4), dtype=dtype)], opset_version=ct.target.iOS17)
    def prog(scores):
        value = sentinel
        if through_fill:
            value = mb.fill(shape=np.array([2, 4], np.int32), value=sentinel, name="filled")
        inverted = scores if factor is None else factor
        mask = mb.mul(x=inverted, y=value, name="mask")
        return mb.softmax(x=mb.add(x=scores, y=mask), axis=-1)

    return prog


def test_a_run_time_factor_times_minus_inf_is_an_error_the_pass_fixes():
    (finding,) = [f for f in lint(masked_softmax(None)) if f.rule == RULE]
    assert finding.severity == "error" and finding.op == "mask"
    assert "NaN on every device" in finding.message and finding.fix == "webnn::finite_mask_sentinels"


def test_a_fill_of_minus_inf_is_followed():
    (finding,) = zero_times_inf_findings(masked_softmax(np.triu(np.ones((2, 4), np.float16)), through_fill=True))
    assert finding.op == "mask" and "'filled_value" in finding.message


@pytest.mark.parametrize(
    "factor, sentinel",
    [
        (np.ones((2, 4), np.float16), np.float16(-np.inf)),  # a const factor without a zero
        (None, np.float16(-40000)),  # a finite sentinel
    ],
)
def test_no_error_where_no_zero_meets_an_infinity(factor, sentinel):
    assert zero_times_inf_findings(masked_softmax(factor, sentinel)) == []


def test_an_infinity_the_pass_cannot_replace_has_no_fix():
    @mb.program(input_specs=[mb.TensorSpec((2, 4), dtype=FP16)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.mul(x=x, y=np.float16(np.inf), name="scaled")  # an output, not a softmax's mask

    (finding,) = zero_times_inf_findings(prog)
    assert finding.fix is None


def test_the_rule_is_in_the_catalogue_as_an_error():
    assert RULES[RULE].severity == "error" and RULES[RULE].fix == "webnn::finite_mask_sentinels"
