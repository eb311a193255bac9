"""The fuzzer's stateful programs (iOS18 states): windows on read_state, slice_update at run-time
positions, several states, states in cond and while_loop bodies; every package pass and the
pipeline keep outputs and states bit for bit over several steps."""

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass
from coremltools.converters.mil.mil.passes.pass_registry import register_pass
from hypothesis import given
from hypothesis import strategies as st

from mil_passes.ir import iter_ops
from mil_passes.reference import evaluate_steps
from mil_passes.testing.programs.recipe import program_text
from mil_passes.testing.plants.states import (
    KINDS,
    StatefulProgram,
    StatePlant,
    check_stateful,
    state_plants,
    stateful_programs,
)
from mil_passes.testing.fuzz.fuzzer import fuzz_stateful, main, stateful_targets

TARGETS = stateful_targets()


@register_pass(namespace="state_plants_test")
class write_one_later(AbstractGraphPass):
    """Every run-time slice_update position moves one element later (wrapping): wrong states."""

    def apply(self, prog):
        for op in list(iter_ops(prog)):
            if op.op_type == "slice_update" and op.begin.val is None:
                block = op.enclosing_block
                with block:
                    rolled = mb.concat(
                        values=[
                            mb.slice_by_index(
                                x=op.update, begin=[0, 0, 1], end=[0, 0, 0], end_mask=[True, True, True], before_op=op
                            ),
                            mb.slice_by_index(
                                x=op.update, begin=[0, 0, 0], end=[0, 0, 1], end_mask=[True, True, False], before_op=op
                            ),
                        ],
                        axis=-1,
                        before_op=op,
                    )
                    moved = mb.slice_update(x=op.x, update=rolled, begin=op.begin, end=op.end, before_op=op)
                block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=moved)
                block.remove_ops([op])


def _plant(kind, **changes):
    base = dict(
        kind=kind,
        channels=2,
        cached=5,
        frames=3,
        form=0,
        through_slice_update=False,
        const_piece=0,
        read_after=True,
    )
    base.update(changes)
    return StatePlant(window_start=base["frames"], **base)  # the window is the last K frames


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_builds_the_same_program_twice_and_steps(kind):
    drawn = StatefulProgram((_plant(kind), _plant("window", cached=4, frames=2)), "")
    assert program_text(drawn.build()) == program_text(drawn.build())
    outputs, states = evaluate_steps(drawn.build(), drawn.feeds(5, seed=1))
    assert len(outputs) == 5 and set(states[-1]) == {"state0", "state1"}
    assert any(np.any(s["state0"]) for s in states) or kind == "cond"


def test_the_window_keeps_the_last_frames_stream():
    drawn = StatefulProgram((_plant("window", cached=4, frames=3, through_slice_update=True),), "")
    feeds = drawn.feeds(3, seed=2)
    _, states = evaluate_steps(drawn.build(), feeds)
    stream = np.concatenate([np.zeros((1, 2, 4), np.float16)] + [f["x0"] for f in feeds], axis=-1)
    np.testing.assert_array_equal(states[-1]["state0"], stream[..., -4:])


def test_a_position_write_lands_at_the_position():
    drawn = StatefulProgram((_plant("position", cached=6, frames=2),), "")
    feed = {"x0": np.ones((1, 2, 2), np.float16), "position0": np.array([3], np.int32)}
    _, states = evaluate_steps(drawn.build(), [feed])
    np.testing.assert_array_equal(states[0]["state0"][0, 0], [0, 0, 0, 1, 1, 0])


def test_joined_windows_make_the_streaming_pattern():
    drawn = StatefulProgram((_plant("window"), _plant("window")), "stack")
    ops = [op.op_type for op in iter_ops(drawn.build())]
    assert ops.count("stack") == 1 and ops.count("read_state") == 4


def test_check_stateful_names_a_pass_that_writes_states_in_the_wrong_place():
    drawn = StatefulProgram((_plant("position", cached=6, frames=2, read_after=False),), "")
    with pytest.raises(AssertionError, match="step 1: output 'update0' differs"):
        check_stateful(drawn, "state_plants_test::write_one_later")


@given(st.data())
def test_every_kind_is_drawn(data):
    kind = data.draw(st.sampled_from(KINDS))
    assert data.draw(state_plants(kind)).kind == kind


@pytest.mark.parametrize("name", list(TARGETS))
@given(drawn=stateful_programs())
def test_every_package_pass_and_the_pipeline_keep_outputs_and_states_bit_for_bit(name, drawn):
    check_stateful(drawn, TARGETS[name], steps=4)


def test_fuzz_stateful_reports_programs_rewritten_and_no_failures():
    report = fuzz_stateful("webnn::concat_slice_to_slice_concat", "webnn::concat_slice_to_slice_concat", examples=20)
    assert (report.programs, report.failures) == (20, 0) and report.rewritten > 0


def test_a_written_value_also_read_is_what_prefer_state_in_downstream_rewrites():
    for kind in ("window", "position"):
        drawn = StatefulProgram((_plant(kind, value_read=True, read_after=False),), "")
        ops = [op.op_type for op in iter_ops(drawn.build())]
        assert ops.count("add") == 2 + (kind == "position")  # the old state, the value read (and end)
        assert check_stateful(drawn, "common::prefer_state_in_downstream")
        plain = StatefulProgram((_plant(kind, read_after=False),), "")
        assert not check_stateful(plain, "common::prefer_state_in_downstream")


def test_the_fuzzer_with_states_fuzzes_stateful_programs(capsys):
    assert main(["--states", "--pass", "concat_slice_to_slice_concat", "--examples", "3"]) == 0
    assert capsys.readouterr().out.startswith("states:webnn::concat_slice_to_slice_concat: 3 programs, 0 failures")
