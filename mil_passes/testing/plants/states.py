"""Stateful programs for the fuzzer: states (iOS18) read, windowed, updated at run-time positions,
several at once, and inside ``cond`` / ``while_loop`` bodies.

A :class:`StatefulProgram` is drawn by :func:`stateful_programs` as data (every random choice
fixed), so :meth:`StatefulProgram.build` makes a fresh, identical Program on every call. Each
:class:`StatePlant` keeps one fp16 state ``[1, C, K]`` with its own stream input ``[1, C, T]``:

- ``window``: ``read_state → concat(state, x[, const]) → slice_by_index`` (the last ``K``, or a
  window written with a positive start, a negative one, masks), written back directly or through
  torch's ``slice_update`` of the whole state; windows of equal shape are sometimes ``stack``ed
  or ``concat``ed into an output (the streaming-cache pattern the Neural Engine refuses);
- ``position``: ``slice_update`` of the state at a run-time position ``pos`` (an int32 input
  drawn in range at each step), the KV-cache write;
- ``cond``: the window update inside a ``cond`` on a bool input (the other branch writes ``x``'s
  sum broadcast, or nothing but a read);
- ``loop``: a ``while_loop`` on an int32 count that rolls the state by ``T`` per iteration.

The value a ``window`` or ``position`` plant writes is now and then read by another op too (an
output), the pattern ``common::prefer_state_in_downstream`` rewrites.

:func:`check_stateful` runs a pass (or a pipeline) on one build and compares it with another over
several steps from zero states: every step's outputs and states, bit for bit.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, Program, types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from hypothesis import strategies as st

from ...reference.state import evaluate_steps
from ...runner import run_pass, run_pipeline
from ..programs.recipe import program_text

__all__ = [
    "StatePlant",
    "StatefulProgram",
    "stateful_programs",
    "check_stateful",
    "KINDS",
    "STATE_PASSES",
]

KINDS = ("window", "position", "cond", "loop")
#: The package's passes whose pattern needs a state: ``programs()`` draws none, so the fuzzer
#: gives them these stateful programs (the ``position`` plant is their planted form).
STATE_PASSES: tuple[str, ...] = ("dynamic_state_update_to_mask",)
_EXTRA_INPUT = {"position": "position", "cond": "flag", "loop": "count"}  # a plant's input beside x


@dataclass(frozen=True)
class StatePlant:
    """One state and what the program does with it."""

    kind: str
    channels: int
    cached: int  # K: the state's last axis
    frames: int  # T: new frames per step
    window_start: int  # where the window starts in concat(state, x[, const]) (window kind)
    form: int  # 0: begin -K with end_mask, 1: positive begin, 2: negative begin and end
    through_slice_update: bool  # the window written by slice_update of the whole state
    const_piece: int  # 0: none, else the width of a const joined after x
    read_after: bool  # the state read again after the update, as an output
    value_read: bool = False  # the value written also read by another op, an output (window, position)


@dataclass(frozen=True)
class StatefulProgram:
    """A drawn stateful program: its plants, and whether equal windows are joined into an output."""

    plants: tuple[StatePlant, ...]
    join: str  # "", "stack" or "concat"

    def build(self) -> Program:
        """A fresh Program (iOS18); every call prints the same."""
        specs: dict[str, Any] = {}
        for index, plant in enumerate(self.plants):
            specs[f"state{index}"] = mb.StateTensorSpec((1, plant.channels, plant.cached), dtype=types.fp16)
            specs[f"x{index}"] = mb.TensorSpec((1, plant.channels, plant.frames), dtype=types.fp16)
            if plant.kind in ("position", "loop"):
                specs[f"{_EXTRA_INPUT[plant.kind]}{index}"] = mb.TensorSpec((1,), dtype=types.int32)
            elif plant.kind == "cond":
                specs[f"flag{index}"] = mb.TensorSpec((1,), dtype=types.bool)
        prog = Program()
        with Function(specs, opset_version=_ios18()) as func:
            outputs: list[Any] = []
            windows: list[Any] = []
            for index, plant in enumerate(self.plants):
                outputs += _plant(plant, index, func.inputs, windows)
            if self.join and len(windows) > 1 and len({tuple(w.shape) for w in windows}) == 1:
                join = mb.stack if self.join == "stack" else mb.concat
                outputs.append(join(values=windows, axis=0 if self.join == "stack" else -1, name="joined_windows"))
            func.set_outputs(outputs)
        prog.add_function("main", func)
        return prog

    def input_names(self) -> list[str]:
        names = []
        for index, plant in enumerate(self.plants):
            names += [f"state{index}", f"x{index}"]
            if plant.kind in _EXTRA_INPUT:
                names.append(f"{_EXTRA_INPUT[plant.kind]}{index}")
        return names

    def feeds(self, steps: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
        """Inputs of ``steps`` steps: fp16 normal frames, positions in range, bools, counts 0-2."""
        rng = np.random.default_rng(seed)
        feeds = []
        for _ in range(steps):
            feed: dict[str, np.ndarray] = {}
            for index, plant in enumerate(self.plants):
                feed[f"x{index}"] = rng.standard_normal((1, plant.channels, plant.frames)).astype(np.float16)
                if plant.kind == "position":
                    feed[f"position{index}"] = rng.integers(0, plant.cached - plant.frames + 1, (1,)).astype(np.int32)
                elif plant.kind == "cond":
                    feed[f"flag{index}"] = rng.integers(0, 2, (1,)).astype(np.bool_)
                elif plant.kind == "loop":
                    feed[f"count{index}"] = rng.integers(0, 3, (1,)).astype(np.int32)
            feeds.append(feed)
        return feeds


def _ios18():
    import coremltools as ct

    return ct.target.iOS18


def _window(plant: StatePlant, index: int, old, x):
    pieces = [old, x]
    if plant.const_piece:
        value = np.full((1, plant.channels, plant.const_piece), 0.5 + index, np.float16)
        pieces.append(mb.const(val=value, name=f"piece{index}"))
    total = plant.cached + plant.frames + plant.const_piece
    joined = mb.concat(values=pieces, axis=-1, name=f"joined{index}")
    start, width = plant.window_start, plant.cached
    if plant.form == 0 and start + width == total:
        return mb.slice_by_index(
            x=joined, begin=[0, 0, -width], end=[0, 0, 0], end_mask=[True, True, True], name=f"window{index}"
        )
    if plant.form == 2:
        return mb.slice_by_index(
            x=joined, begin=[0, 0, start - total], end=[1, plant.channels, start + width], name=f"window{index}"
        )
    return mb.slice_by_index(
        x=joined, begin=[0, 0, start], end=[1, plant.channels, start + width], name=f"window{index}"
    )


def _write(plant: StatePlant, index: int, state, old, value):
    if plant.through_slice_update:  # torch's ``cache[:, :, :] = value``
        value = mb.slice_update(
            x=old,
            update=value,
            begin=[0, 0, 0],
            end=[0, 0, 0],
            end_mask=[True, True, True],
            name=f"assign{index}",
        )
    return mb.coreml_update_state(state=state, value=value, name=f"update{index}")


def _plant(plant: StatePlant, index: int, inputs: dict, windows: list) -> list:
    state, x = inputs[f"state{index}"], inputs[f"x{index}"]
    old = mb.read_state(input=state, name=f"read{index}")
    outputs = []
    if plant.kind == "window":
        window = _window(plant, index, old, x)
        windows.append(window)
        outputs.append(_write(plant, index, state, old, window))
        if plant.value_read:  # prefer_state_in_downstream reads it from the update instead
            outputs.append(mb.add(x=window, y=np.float16(0), name=f"window_read{index}"))
    elif plant.kind == "position":
        position = inputs[f"position{index}"]
        begin = mb.concat(
            values=[mb.const(val=np.zeros(2, np.int32), name=f"leading{index}"), position], axis=0, name=f"begin{index}"
        )
        end = mb.add(x=begin, y=mb.shape(x=x, name=f"extent{index}"), name=f"end{index}")  # fold_shape_ops' work
        written = mb.slice_update(x=old, update=x, begin=begin, end=end, name=f"at_position{index}")
        outputs.append(mb.coreml_update_state(state=state, value=written, name=f"update{index}"))
        if plant.value_read:
            outputs.append(mb.add(x=written, y=np.float16(0), name=f"written_read{index}"))
    elif plant.kind == "cond":
        pred = mb.squeeze(x=inputs[f"flag{index}"], name=f"pred{index}")

        def then_branch():
            return _write(plant, index, state, old, _window(plant, index, old, x))

        def else_branch():
            return mb.identity(x=old, name=f"kept{index}")

        outputs.append(mb.cond(pred=pred, _true_fn=then_branch, _false_fn=else_branch, name=f"branch{index}"))
    else:  # loop: roll the state by T per iteration
        count = mb.squeeze(x=inputs[f"count{index}"], name=f"iterations{index}")

        def keep_going(i):
            return mb.less(x=i, y=count, name=f"more{index}")

        def roll(i):
            current = mb.read_state(input=state, name=f"current{index}")
            rolled = mb.concat(values=[current, x], axis=-1, name=f"rolled{index}")
            window = mb.slice_by_index(
                x=rolled,
                begin=[0, 0, -plant.cached],
                end=[0, 0, 0],
                end_mask=[True, True, True],
                name=f"rolled_window{index}",
            )
            mb.coreml_update_state(state=state, value=window, name=f"rolled_update{index}")
            return (mb.add(x=i, y=np.int32(1), name=f"next{index}"),)

        iterations = mb.while_loop(
            _cond=keep_going,
            _body=roll,
            loop_vars=(mb.const(val=np.int32(0), name=f"first{index}"),),
            name=f"loop{index}",
        )
        outputs.append(iterations[0] if isinstance(iterations, (list, tuple)) else iterations)
    outputs.append(mb.add(x=old, y=np.float16(0), name=f"old{index}"))  # the state before the step
    if plant.read_after:
        outputs.append(mb.read_state(input=state, name=f"read_after{index}"))
    return outputs


@st.composite
def state_plants(draw, kind: str | None = None) -> StatePlant:
    """One plant; ``kind`` one of :data:`KINDS` or drawn."""
    kind = kind or draw(st.sampled_from(KINDS))
    channels = draw(st.sampled_from((1, 2, 3)))
    cached = draw(st.integers(1, 10))
    frames = draw(st.integers(1, cached if kind == "position" else 9))
    const_piece = draw(st.sampled_from((0, 0, 1, 3))) if kind in ("window", "cond") else 0
    total = cached + frames + const_piece
    start = draw(st.sampled_from((frames, total - cached, draw(st.integers(0, total - cached)))))
    return StatePlant(
        kind=kind,
        channels=channels,
        cached=cached,
        frames=frames,
        window_start=start,
        form=draw(st.integers(0, 2)),
        through_slice_update=draw(st.booleans()),
        const_piece=const_piece,
        read_after=draw(st.booleans()),
        value_read=draw(st.booleans()),
    )


@st.composite
def stateful_programs(draw, max_states: int = 3) -> StatefulProgram:
    """A program with 1 to ``max_states`` states, each planted by :func:`state_plants`."""
    plants = tuple(draw(st.lists(state_plants(), min_size=1, max_size=max_states)))
    return StatefulProgram(plants, draw(st.sampled_from(("", "stack", "concat"))))


def check_stateful(drawn: StatefulProgram, target: str | PassPipeline, steps: int = 4, seed: int = 0) -> bool:
    """Run ``target`` on one build and compare it with another over ``steps`` steps from zero
    states: the same inputs, states and outputs (by name), every step's outputs and the states
    after every step bit for bit. Returns whether the program printed differently after."""
    before, after = drawn.build(), drawn.build()
    with contextlib.redirect_stderr(io.StringIO()):  # a pipeline draws a progress bar
        run_pipeline(after, target) if isinstance(target, PassPipeline) else run_pass(after, target)
    after.validate()
    want_inputs, got_inputs = (list(p.functions["main"].inputs) for p in (before, after))
    if want_inputs != got_inputs:
        raise AssertionError(f"inputs and states changed: {want_inputs} -> {got_inputs}")
    feeds = drawn.feeds(steps, seed)
    want_out, want_states = evaluate_steps(before, feeds)
    got_out, got_states = evaluate_steps(after, feeds)
    for step in range(steps):
        for kind, want, got in (
            ("output", want_out[step], got_out[step]),
            ("state", want_states[step], got_states[step]),
        ):
            if list(want) != list(got):
                raise AssertionError(f"step {step + 1}: {kind}s {list(want)} became {list(got)}")
            for name in want:
                if not _same_bits(want[name], got[name]):
                    raise AssertionError(
                        f"step {step + 1}: {kind} '{name}' differs: want {want[name].tolist()}, "
                        f"got {got[name].tolist()}"
                    )
    return program_text(after) != program_text(before)


def _same_bits(want: np.ndarray, got: np.ndarray) -> bool:
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return False
    return bool(np.array_equal(np.ascontiguousarray(want).view(np.uint8), np.ascontiguousarray(got).view(np.uint8)))
