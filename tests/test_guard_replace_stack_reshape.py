"""webnn::guard_replace_stack_reshape: a stack that is also an output no longer makes
common::replace_stack_reshape raise; the reshape still becomes a concat (against torch too)."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

import mil_passes
from mil_passes.reference import evaluate
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_replace_stack_reshape"
FUSION = "common::replace_stack_reshape"
RNG = np.random.default_rng(0)
FEEDS = {"a": RNG.standard_normal((1, 5, 3)).astype(np.float32), "b": RNG.standard_normal((1, 5, 3)).astype(np.float32)}


def stack_then_reshape(*, stack_is_output=True):
    """docs/reproducers/replace_stack_reshape_stack_output_raises.py's program."""

    @mb.program(input_specs=[mb.TensorSpec((1, 5, 3)), mb.TensorSpec((1, 5, 3))], opset_version=ct.target.iOS17)
    def prog(a, b):
        stacked = mb.stack(values=(a, b), axis=1, name="stacked")
        out = mb.reshape(x=stacked, shape=[1, 10, 3], name="out")
        return (out, stacked) if stack_is_output else out

    return prog


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="output"):
        run_pass(stack_then_reshape(), FUSION)


def test_a_returned_stack_keeps_its_values_and_the_reshape_becomes_a_concat():
    after = check_pass(stack_then_reshape, PASS, inputs=FEEDS)
    assert op_counts(after)["stack"] == 2
    run_pass(after, FUSION)
    assert op_counts(after)["stack"] == 1 and op_counts(after)["concat"] == 1
    assert "reshape" not in op_counts(after)
    assert_equivalent(stack_then_reshape(), after, FEEDS)


def test_a_stack_read_by_the_reshape_alone_is_left_to_the_pass():
    prog = stack_then_reshape(stack_is_output=False)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before


torch = pytest.importorskip("torch", reason="torch is the oracle of the conversion")


class StackAndMerge(torch.nn.Module):
    def forward(self, a, b):
        stacked = torch.stack([a, b], dim=1)
        return stacked.reshape(1, 10, 3), stacked


def test_the_pipeline_converts_it_and_equals_torch():
    traced = torch.jit.trace(StackAndMerge().eval(), (torch.from_numpy(FEEDS["a"]), torch.from_numpy(FEEDS["b"])))
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name=n, shape=(1, 5, 3)) for n in ("a", "b")],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        pass_pipeline=mil_passes.pipeline(),
        skip_model_load=True,
    )
    got = list(evaluate(model._mil_program, FEEDS).values())
    want = [t.numpy() for t in StackAndMerge()(torch.from_numpy(FEEDS["a"]), torch.from_numpy(FEEDS["b"]))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
