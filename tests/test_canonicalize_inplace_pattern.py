"""webnn::canonicalize_inplace_pattern: coremltools' pass, accepting an op two passes rewrote."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.scope import ScopeInfo, ScopeSource

import mil_passes
from mil_passes.passes.canonicalize_inplace_pattern import single_pass_scopes
from mil_passes.reference.state import evaluate_steps
from mil_passes.runner import run_pass
from mil_passes.testing.plants.states import StatePlant, StatefulProgram, check_stateful

PASS = "webnn::canonicalize_inplace_pattern"
# The fuzzer's program: a window lying in the const part of concat(read_state(s), x, c), written back.
CONST_WINDOW = StatefulProgram(
    plants=(
        StatePlant(
            kind="window", channels=2, cached=1, frames=6, window_start=9, form=0,
            through_slice_update=False, const_piece=3, read_after=False, value_read=False,
        ),
    ),
    join="",
)  # fmt: skip
BEFORE = ["webnn::concat_slice_to_slice_concat", "common::const_elimination"]


def test_coremltools_raises_on_a_value_two_passes_rewrote():
    """The bug the replacement answers (if coremltools fixes it, the replacement may go)."""
    with pytest.raises(ValueError, match="scope cannot have len > 1"):
        check_stateful(CONST_WINDOW, PassPipeline([*BEFORE, "common::canonicalize_inplace_pattern"], "repro"))


def test_the_replacement_keeps_outputs_and_states_bit_for_bit():
    assert check_stateful(CONST_WINDOW, PassPipeline([*BEFORE, PASS], "repro"))


def written_late():
    """coreml_update_state of a mul's value written after an unrelated op: the pass moves it up."""

    @mb.program(
        input_specs=[mb.StateTensorSpec((1, 3), dtype=types.fp16), mb.TensorSpec((1, 3), dtype=types.fp16)],
        opset_version=ct.target.iOS18,
    )
    def prog(state, x):
        product = mb.mul(x=mb.read_state(input=state), y=x)
        other = mb.relu(x=x, name="other")
        mb.coreml_update_state(state=state, value=product)
        return mb.add(x=product, y=other, name="y")

    return prog


def order(prog) -> list[str]:
    return [op.op_type for op in prog.functions["main"].operations if op.op_type != "const"]


def test_it_moves_the_update_as_coremltools_does():
    ours, theirs = written_late(), written_late()
    run_pass(ours, PASS)
    run_pass(theirs, "common::canonicalize_inplace_pattern")
    assert order(ours) == order(theirs) == ["read_state", "mul", "coreml_update_state", "relu", "add"]
    feeds = [{"x": np.full((1, 3), v, np.float16)} for v in (1.0, 2.0, 3.0)]
    assert [o["y"].tolist() for o in evaluate_steps(ours, feeds)[0]] == [
        o["y"].tolist() for o in evaluate_steps(written_late(), feeds)[0]
    ]


def test_single_pass_scopes_keeps_the_last_pass_and_every_other_source():
    prog = written_late()
    mul = next(op for op in prog.functions["main"].operations if op.op_type == "mul")
    mul.scopes = {ScopeSource.COREMLTOOLS_GRAPH_PASS: ["a", "b"], ScopeSource.TORCHSCRIPT_MODULE_TYPE: ["M"]}
    scopes = single_pass_scopes(mul)
    assert [(s.source, s.data) for s in scopes] == [
        (ScopeSource.COREMLTOOLS_GRAPH_PASS, ["b"]),
        (ScopeSource.TORCHSCRIPT_MODULE_TYPE, ["M"]),
    ]
    assert all(isinstance(s, ScopeInfo) for s in scopes)


def test_the_pipeline_runs_it_in_place_of_coremltools_pass():
    names = list(mil_passes.pipeline().passes)
    assert "common::canonicalize_inplace_pattern" not in names
    assert names.count(PASS) == list(ct.PassPipeline.DEFAULT.passes).count("common::canonicalize_inplace_pattern")
    assert check_stateful(CONST_WINDOW, mil_passes.pipeline())
