"""webnn::dynamic_state_update_to_mask: a state written at run-time positions becomes a masked
blend of the whole state, every step's outputs and states bit for bit; what it leaves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops, op_counts
from mil_passes.lint import lint
from mil_passes.passes._position_masks import numpy_position
from mil_passes.passes.dynamic_state_update_to_mask import RuntimeStateWrite
from mil_passes.reference.state import evaluate_steps
from mil_passes.runner import run_pass
from mil_passes.testing.plants.states import StatefulProgram, check_stateful, state_plants
from pass_helpers import only_op

PASS = "webnn::dynamic_state_update_to_mask"
FP16 = types.fp16


@dataclass(frozen=True)
class Write:
    """A state of ``shape`` written at a run-time position on ``axis``: ``rows`` rows (0: the
    axis squeezed), the other axes' constant windows ``(start, stop)`` (None: masked, whole)."""

    shape: tuple[int, ...]
    axis: int
    rows: int
    windows: tuple[tuple[int, int] | None, ...]
    end_from_position: bool = True  # end = position + rows; else the end is masked (to the end)

    @property
    def update_shape(self) -> tuple[int, ...]:
        dims = []
        for axis, size in enumerate(self.shape):
            if axis == self.axis:
                if self.rows:
                    dims.append(self.rows)  # to the end: the position is size - rows
                continue
            window = self.windows[axis]
            dims.append(size if window is None else window[1] - window[0])
        return tuple(dims)

    def build(self):
        rank = len(self.shape)

        @mb.program(
            input_specs=[
                mb.StateTensorSpec(self.shape, dtype=FP16),
                mb.TensorSpec(self.update_shape, dtype=FP16),
                mb.TensorSpec((1,), dtype=types.int32),
            ],
            opset_version=ct.target.iOS18,
        )
        def prog(cache, update, position):
            old = mb.read_state(input=cache, name="old")
            starts = [0 if w is None else w[0] for w in self.windows]
            stops = [0 if w is None else w[1] for w in self.windows]
            begin = mb.concat(
                values=[np.array(starts[: self.axis], np.int32), position, np.array(starts[self.axis + 1 :], np.int32)],
                axis=0,
                name="begin",
            )
            stop = mb.add(x=position, y=np.int32(max(self.rows, 1)), name="stop")
            end = mb.concat(
                values=[np.array(stops[: self.axis], np.int32), stop, np.array(stops[self.axis + 1 :], np.int32)],
                axis=0,
                name="end",
            )
            masks = [w is None for w in self.windows]
            masks[self.axis] = False
            end_mask = list(masks)
            end_mask[self.axis] = not self.end_from_position
            written = mb.slice_update(
                x=old,
                update=update,
                begin=begin,
                end=end,
                begin_mask=masks,
                end_mask=end_mask,
                squeeze_mask=[a == self.axis and not self.rows for a in range(rank)],
                name="written",
            )
            mb.coreml_update_state(state=cache, value=written, name="update")
            return mb.mul(x=written, y=np.float16(2), name="doubled")

        return prog

    def feeds(self, positions: list[int], seed: int = 0) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        return [
            {
                "update": rng.standard_normal(self.update_shape).astype(np.float16),
                "position": np.array([p], np.int32),
            }
            for p in positions
        ]


def same_steps(write: Write, positions: list[int]) -> None:
    """The pass leaves no slice_update, and every step's output and state keep their bits."""
    before, after = write.build(), write.build()
    run_pass(after, PASS)
    after.validate()
    assert "slice_update" not in op_counts(after)
    feeds = write.feeds(positions)
    (want_out, want_states), (got_out, got_states) = evaluate_steps(before, feeds), evaluate_steps(after, feeds)
    for want, got in zip([*want_out, *want_states], [*got_out, *got_states]):
        for name in want:
            assert want[name].view(np.uint16).tolist() == got[name].view(np.uint16).tolist(), name


DOCSTRING = Write(shape=(1, 2, 16, 8), axis=2, rows=3, windows=(None, None, None, None))


def test_the_docstring_cache_is_written_with_the_same_bits_at_every_step():
    same_steps(DOCSTRING, [0, 3, 6, 13])


def test_one_new_row_is_placed_by_broadcasting_without_a_matmul():
    write = Write(shape=(1, 2, 16, 8), axis=2, rows=1, windows=(None,) * 4)
    same_steps(write, [0, 1, 2, 15])
    after = write.build()
    run_pass(after, PASS)
    assert "matmul" not in op_counts(after)


@pytest.mark.parametrize(
    "write, positions",
    [
        (Write((2, 1, 2, 16, 8), 3, 1, ((1, 2), None, None, None, None)), [0, 4, 9]),  # a layer of a rank-5 cache
        (Write((2, 1, 2, 16, 8), 3, 4, ((0, 1), None, (0, 1), None, None)), [0, 4, 12]),
        (Write((3, 10), 1, 2, ((1, 3), None)), [0, 8, -5]),  # the last axis, a negative position
        (Write((6, 4, 3), 0, 2, (None, (1, 3), None)), [0, 4, -3]),  # a leading axis: transposed
        (Write((6, 4), 0, 0, (None, None)), [0, 5, -1]),  # a squeezed axis
        (Write((6, 4), 0, 2, (None, None), end_from_position=False), [4]),  # to the end
        (Write((1, 2100), 1, 3, (None, None)), [0, 2048, -4]),  # too long for fp16: positions in int32
        (Write((2100, 1), 0, 0, (None, None)), [0, 2099, -2100]),
    ],
)
def test_windows_of_every_kind_keep_their_bits(write, positions):
    same_steps(write, positions)


@pytest.mark.parametrize("rows", [1, 3])
def test_a_rank5_cache_is_blended_in_rank_4(rows):
    """A [layers, 1, heads, context, dim] cache: its singleton axis merges, so the blend is rank 4."""
    write = Write((2, 1, 2, 16, 8), 3, rows, ((1, 2), None, None, None, None))
    same_steps(write, [0, 5, 12])
    prog = write.build()
    run_pass(prog, PASS)
    blend = [op for op in iter_ops(prog) if op.op_type in ("mul", "add", "sub", "matmul") and op.outputs[0].rank == 5]
    assert blend == [op for op in iter_ops(prog) if op.name == "doubled"]  # the program's own output op


def test_every_layer_shares_one_mask():
    """Two writes at the same run-time offset (k and v of a layer) build the mask once."""

    @mb.program(
        input_specs=[
            mb.StateTensorSpec((1, 16, 4), dtype=FP16),
            mb.StateTensorSpec((1, 16, 4), dtype=FP16),
            mb.TensorSpec((1, 1, 4), dtype=FP16),
            mb.TensorSpec((1,), dtype=types.int32),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(k_cache, v_cache, k, position):
        begin = mb.concat(values=[np.zeros(1, np.int32), position, np.zeros(1, np.int32)], axis=0)
        end = mb.concat(values=[np.ones(1, np.int32), mb.add(x=position, y=np.int32(1)), [4]], axis=0)
        outputs = []
        for cache in (k_cache, v_cache):
            written = mb.slice_update(x=mb.read_state(input=cache), update=k, begin=begin, end=end)
            outputs.append(mb.coreml_update_state(state=cache, value=written))
        return tuple(mb.identity(x=o) for o in outputs)

    run_pass(prog, PASS)
    counts = op_counts(prog)
    assert counts["clip"] == 2 and counts["sub"] == 3 and "slice_update" not in counts  # one mask, one 1 - m


def test_numpy_positions():
    assert [numpy_position(b, 8, False) for b in (-9, -8, -1, 0, 7, 8, 9)] == [0, 0, 7, 0, 7, 8, 8]
    assert [numpy_position(b, 8, True) for b in (-8, -1, 0, 7)] == [0, 7, 0, 7]


def refusal(shape=(1, 8, 4), dtype=FP16, stride=None, second_runtime=False):
    @mb.program(
        input_specs=[
            mb.StateTensorSpec(shape, dtype=dtype),
            mb.TensorSpec((1, 2, 4), dtype=dtype),
            mb.TensorSpec((1,), dtype=types.int32),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(cache, update, position):
        first = position if second_runtime else np.zeros(1, np.int32)
        begin = mb.concat(values=[np.zeros(1, np.int32), position, first], axis=0)
        end = mb.concat(values=[np.ones(1, np.int32), mb.add(x=position, y=np.int32(2)), [4]], axis=0)
        kwargs = {} if stride is None else {"stride": np.array(stride, np.int32)}
        written = mb.slice_update(x=mb.read_state(input=cache), update=update, begin=begin, end=end, **kwargs)
        return mb.coreml_update_state(state=cache, value=written)

    return RuntimeStateWrite().match(only_op(prog, "slice_update"))


def test_refusals_say_why():
    assert "strided write" in refusal(shape=(1, 16, 4), stride=[1, 2, 1]).reason
    assert "axes 1 and 2" in refusal(second_runtime=True).reason
    assert "integer state" in refusal(dtype=types.int32).reason


def test_a_tensor_that_is_no_state_is_not_a_candidate():
    @mb.program(
        input_specs=[mb.TensorSpec((1, 8, 4)), mb.TensorSpec((1, 2, 4)), mb.TensorSpec((1,), dtype=types.int32)],
        opset_version=ct.target.iOS18,
    )
    def prog(x, update, position):
        begin = mb.concat(values=[np.zeros(1, np.int32), position, np.zeros(1, np.int32)], axis=0)
        end = mb.concat(values=[np.ones(1, np.int32), mb.add(x=position, y=np.int32(2)), [4]], axis=0)
        return mb.slice_update(x=x, update=update, begin=begin, end=end)

    assert RuntimeStateWrite().match(only_op(prog, "slice_update")) is None


def test_lint_names_the_pass():
    (finding,) = [f for f in lint(DOCSTRING.build()) if f.rule == "ane-dynamic-state-update"]
    assert finding.fix == PASS


@st.composite
def writes(draw) -> tuple[Write, list[int]]:
    rank = draw(st.integers(2, 5))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    axis = draw(st.integers(0, rank - 1))
    size = draw(st.integers(2, 9))
    shape = shape[:axis] + (size,) + shape[axis + 1 :]
    windows = []
    for a, dim in enumerate(shape):
        if a == axis or draw(st.booleans()):
            windows.append(None)
            continue
        start = draw(st.integers(0, dim - 1))
        windows.append((start, draw(st.integers(start + 1, dim))))
    rows = draw(st.integers(0, size))
    positions = []
    for _ in range(draw(st.integers(1, 3))):
        count = max(rows, 1)
        position = draw(st.integers(0, size - count))
        if count < size and draw(st.booleans()):  # from the end: begin and end both negative
            position = draw(st.integers(-size, -count - 1))
        positions.append(position)
    return Write(shape, axis, rows, tuple(windows)), positions


@given(writes())
def test_random_writes_keep_their_bits(drawn):
    write, positions = drawn
    same_steps(write, positions)


@settings(max_examples=15)
@given(state_plants(kind="position"))
def test_the_fuzzers_position_plant_keeps_its_bits_and_no_run_time_write_is_left(plant):
    drawn = StatefulProgram((plant,), "")
    assert check_stateful(drawn, PASS)
    prog = drawn.build()
    run_pass(prog, PASS)
    assert "slice_update" not in op_counts(prog)
