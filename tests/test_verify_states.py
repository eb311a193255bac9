"""verify, lint and optimize on stateful programs and packages (iOS18 states): stepping from zero
states, outputs and states compared per pass, the CLI's --steps, the JSON's states."""

import json

import numpy as np
import pytest
import coremltools as ct

import mil_passes
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass
from coremltools.converters.mil.mil.passes.pass_registry import register_pass

from mil_passes.cli import main
from pass_helpers import without_placement
from mil_passes.cli.main import DEFAULT_STEPS as CLI_DEFAULT_STEPS
from mil_passes.lint import lint
from mil_passes.package import io as mlpackage
from mil_passes.reference import evaluate_steps, make_state, predict
from mil_passes.stepping import SteppedFeed, random_stepped_feed, stepped_feed, stepped_values
from mil_passes.verify import DEFAULT_STEPS, verify_program

IOS18 = ct.target.iOS18


def delayed_window() -> Program:
    """``out = 2 * cache`` before the update; the cache keeps the last 4 of ``concat(cache, x)``:
    a change to the window shows in the state at step 1 and in the output from step 2 on."""

    @mb.program(
        input_specs=[mb.StateTensorSpec((1, 4), dtype=types.fp16), mb.TensorSpec((1, 2), dtype=types.fp16)],
        opset_version=IOS18,
    )
    def prog(cache, x):
        old = mb.read_state(input=cache)
        joined = mb.concat(values=[old, x], axis=-1)
        window = mb.slice_by_index(x=joined, begin=[0, 2], end=[1, 6], name="window")
        mb.coreml_update_state(state=cache, value=window)
        return mb.mul(x=old, y=np.float16(2), name="out")

    return prog


def stacked_layer_caches(frames: int = 7, cached: int = 8) -> Program:
    """The Neural Engine refusal on a state: per layer ``concat(cache[l], x)[..., 7:15]``, stacked
    and written back to the state ``cache [2, 1, 8, cached]``."""

    @mb.program(
        input_specs=[
            mb.StateTensorSpec((2, 1, 8, cached), dtype=types.fp16),
            mb.TensorSpec((1, 8, frames), dtype=types.fp16),
        ],
        opset_version=IOS18,
    )
    def prog(cache, x):
        caches = mb.read_state(input=cache)
        windows = []
        for layer in range(2):
            layer_cache = mb.slice_by_index(
                x=caches,
                begin=[layer, 0, 0, 0],
                end=[layer + 1, 1, 8, cached],
                squeeze_mask=[True, False, False, False],
            )
            joined = mb.concat(values=[layer_cache, x], axis=-1)
            windows.append(mb.slice_by_index(x=joined, begin=[0, 0, frames], end=[1, 8, frames + cached]))
        mb.coreml_update_state(state=cache, value=mb.stack(values=windows, axis=0))
        return mb.reduce_sum(x=mb.concat(values=windows, axis=-1), axes=[-1], name="out")

    return prog


@register_pass(namespace="verify_state_test")
class shift_state_window(AbstractGraphPass):
    """The window written to the state starts one element later (its width kept by wrapping)."""

    def apply(self, prog):
        block = prog.functions["main"]
        op = next(op for op in block.operations if op.op_type == "slice_by_index" and op.name == "window")
        with block:
            shifted = mb.concat(
                values=[
                    mb.slice_by_index(x=op.x, begin=[0, 3], end=[1, 6], before_op=op),
                    mb.slice_by_index(x=op.x, begin=[0, 0], end=[1, 1], before_op=op),
                ],
                axis=-1,
                before_op=op,
            )
        block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=shifted)
        block.remove_ops([op])


def test_the_cli_default_steps_is_verifys():
    assert CLI_DEFAULT_STEPS == DEFAULT_STEPS >= 4


def test_stepped_values_match_evaluate_steps_stacked():
    prog = delayed_window()
    feed = random_stepped_feed(prog, seed=3, steps=5)
    assert feed.steps == 5 and set(feed) == {"x", "cache"} and not feed["cache"].any()
    outputs, states = stepped_values(prog, feed)
    want, after = evaluate_steps(prog, [{"x": feed["x"][i]} for i in range(5)])
    np.testing.assert_array_equal(outputs[0], np.stack([w["out"] for w in want]))
    np.testing.assert_array_equal(states[0], np.stack([a["cache"] for a in after]))


def test_a_given_feed_is_given_at_every_step_and_renaming_keeps_the_steps():
    prog = delayed_window()
    feed = stepped_feed(prog, {"x": np.ones((1, 2), np.float16)}, 3)
    renamed = feed.renamed({"x": "y", "cache": "c"})
    assert isinstance(renamed, SteppedFeed) and renamed.steps == 3 and set(renamed) == {"y", "c"}
    assert len(feed["x"]) == 3


def test_a_pass_that_changes_only_the_state_update_is_named_with_the_state():
    verification = verify_program(delayed_window(), ["verify_state_test::shift_state_window"], feeds=2)
    row = verification.culprit
    assert verification.steps == DEFAULT_STEPS
    assert row is not None and row.states["cache"].status == "changed"
    assert row.outputs["out"].status == "changed"  # the output reads the state from step 2 on
    assert row.states["cache"].shape_before == [1, 4]  # the step axis is not shown


def test_one_step_sees_the_state_change_before_any_output_does():
    row = verify_program(delayed_window(), ["verify_state_test::shift_state_window"], feeds=2, steps=1).rows[0]
    assert (row.outputs["out"].status, row.states["cache"].status, row.status) == ("same", "changed", "changed")
    assert row.reason().startswith("state 'cache' changed by up to ")


def test_a_stateful_program_that_fails_on_a_random_feed_is_a_one_line_error():
    @mb.program(
        input_specs=[
            mb.StateTensorSpec((1, 2), dtype=types.fp16),
            mb.TensorSpec((1, 1), dtype=types.fp16),
            mb.TensorSpec((1,), dtype=types.int32),
        ],
        opset_version=IOS18,
    )
    def prog(cache, x, pos):  # positions 0-5 are drawn; past 1 the write falls outside the cache
        begin = mb.concat(values=[np.zeros(1, np.int32), pos], axis=0)
        old = mb.read_state(input=cache)
        written = mb.slice_update(x=old, update=x, begin=begin, end=mb.add(x=begin, y=np.array([1, 1], np.int32)))
        return mb.coreml_update_state(state=cache, value=written)

    from mil_passes.verify import VerifyError

    with pytest.raises(VerifyError, match="the program fails on a random feed before any pass: ValueError: "):
        verify_program(prog, "default", feeds=3)


def test_the_pipeline_keeps_outputs_and_states_of_stateful_programs():
    for prog in (delayed_window(), stacked_layer_caches()):
        verification = verify_program(prog, "mil_passes", feeds=2)
        assert verification.culprit is None
        assert all(row.status in ("same", "precision") for row in verification.rows)
        assert all(row.states for row in verification.rows)


def test_steps_must_be_positive():
    from mil_passes.verify import VerifyError

    with pytest.raises(VerifyError, match="steps must be at least 1, got 0"):
        verify_program(delayed_window(), "default", steps=0)


def test_lint_sees_the_refused_window_on_a_state_and_the_pipeline_fixes_it():
    findings = lint(stacked_layer_caches())
    assert [f.severity for f in findings if f.rule == "ane-refused-slice-of-concat"].count("error") == 2
    model = ct.convert(
        stacked_layer_caches(),
        convert_to="mlprogram",
        minimum_deployment_target=IOS18,
        pass_pipeline=mil_passes.pipeline(),
        skip_model_load=True,
    )
    assert not [f for f in without_placement(lint(model._mil_program)) if f.severity == "error"]
    assert "ane-refused-slice-of-concat" not in {f.rule for f in lint(model._mil_program)}


# -- the commands on saved stateful packages --------------------------------------------------


@pytest.fixture(scope="module")
def stacked_package(tmp_path_factory):
    return mlpackage.save(stacked_layer_caches(), tmp_path_factory.mktemp("states") / "stacked.mlpackage")


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_verify_steps_a_stateful_package(capsys, stacked_package):
    status, out, err = run(capsys, "verify", stacked_package, "--pipeline", "mil_passes", "--feeds", "2")
    assert status == 0 and err == ""
    assert "state cache fp16[2, 1, 8, 8]" in out
    assert "stateful: 4 steps per feed from zero states; outputs and states compared" in out
    assert out.splitlines()[-1].startswith("no pass changed the outputs")


def test_cli_verify_json_has_steps_and_states(capsys, stacked_package):
    status, out, _ = run(capsys, "verify", stacked_package, "--json", "--steps", "2", "--feeds", "1")
    document = json.loads(out)
    assert status == 0 and document["steps"] == 2 and document["schema"] == "mil-passes/verify/1"
    first = document["passes"][0]
    assert set(first["states"]) == {"cache"} and first["states"]["cache"]["shape_before"] == [2, 1, 8, 8]


def test_cli_lint_and_optimize_keep_states_and_their_interface(capsys, stacked_package, tmp_path):
    status, out, _ = run(capsys, "lint", stacked_package, "--all")
    assert status == 1 and out.count("error: [ane-refused-slice-of-concat]") == 2
    fixed = tmp_path / "fixed.mlpackage"
    status, out, _ = run(capsys, "optimize", stacked_package, "-o", fixed, "--quiet")
    assert status == 1  # written; the 8-wide state stays an error (ane-state-width)
    status, out, _ = run(capsys, "lint", fixed, "--json")
    errors = {f["rule"] for f in json.loads(out)["findings"] if f["severity"] == "error"}
    assert status == 1 and errors == {"ane-state-width"}
    before, after = (ct.models.MLModel(str(p), skip_model_load=True) for p in (stacked_package, fixed))
    assert before.get_spec().description.state == after.get_spec().description.state
    assert before.get_spec().description.input == after.get_spec().description.input
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 8, 7)).astype(np.float16)} for _ in range(6)]
    states = [make_state(model) for model in (before, after)]
    for feed in feeds:
        got = [predict(model, feed, state=state)["out"] for model, state in zip((before, after), states)]
        np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(states[0].read_state("cache"), states[1].read_state("cache"))
