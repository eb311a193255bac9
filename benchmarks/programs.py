"""The programs the benchmarks measure: streaming-cache stacks, a deeply nested program, torch models.

Each builder program comes in two forms: ``match=True``, where every window is a slice of a
concat's output (``webnn::concat_slice_to_slice_concat`` rewrites each), and ``match=False``,
where the same values are cut from the concat's inputs and no pass of the package has anything
to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types

from mil_passes.examples import streaming_cache_program
from mil_passes.ir import iter_ops
from mil_passes.testing import random_inputs

#: Channels of the streaming program: small, so that weights do not dominate time and memory.
STREAMING_CHANNELS = 8
NESTED_CHANNELS = 8
NESTED_FRAMES = 4
#: Elementwise ops per level of the nested program, besides its window and its control flow.
NESTED_OPS_PER_LEVEL = 20


@dataclass(frozen=True)
class ProgramSpec:
    """A program to build: ``family`` "streaming" (``size`` layers) or "nested" (``size`` levels)."""

    family: str
    size: int
    match: bool

    @property
    def label(self) -> str:
        unit = "layers" if self.family == "streaming" else "levels"
        return f"{self.family} {self.size:,} {unit}"

    def build(self) -> Program:
        if self.family == "streaming":
            return streaming_cache_program(
                layers=self.size, channels=STREAMING_CHANNELS, windows_on_inputs=not self.match
            )
        if self.family == "nested":
            return nested_program(self.size, match=self.match)
        raise ValueError(f"unknown program family '{self.family}' (streaming, nested)")

    def inputs(self, prog: Program) -> dict[str, np.ndarray]:
        """Inputs for the reference interpreter; the nested program's loops run once each."""
        feeds = random_inputs(prog, seed=0)
        if self.family == "nested":
            feeds["steps"] = np.ones((1,), np.int32)
        return feeds


def op_count(prog: Program) -> int:
    """Every op of every block, consts included: what a sweep over the program visits."""
    return sum(1 for _ in iter_ops(prog))


def nested_program(
    levels: int,
    match: bool,
    ops_per_level: int = NESTED_OPS_PER_LEVEL,
    channels: int = NESTED_CHANNELS,
    frames: int = NESTED_FRAMES,
) -> Program:
    """``levels`` levels, each a ``while_loop`` whose body holds a ``cond`` holding the next level.

    Inputs ``x [1, C, T]`` and ``steps [1]`` (int32; 1 runs every loop once). Each level::

        %h      = add/mul chain of %entry                      # ops_per_level ops
        %window = slice_by_index(x=concat(values=(%entry, %h), axis=-1),
                                 begin=[0, 0, -(T + 1)], ...)          # match=True: [1, C, T + 1]
                  concat(values=(slice_by_index(x=%entry, begin=[0, 0, T - 1], ...), %h))  # match=False
        %out    = add(x=%h, y=reduce_sum(x=%window, axes=[-1], keep_dims=True))
        %_, %next = while_loop(i < steps) { cond(i < steps) { next level of %out } else { %out } }

    The loop counter starts from ``steps * 0``, not a const: a const counter changes value in
    the body and makes coremltools build the body twice, so building would take 2**levels.
    """
    if levels < 1 or ops_per_level < 1:
        raise ValueError("levels and ops_per_level must be at least 1")
    specs = [
        mb.TensorSpec((1, channels, frames), dtype=types.fp32),
        mb.TensorSpec((1,), dtype=types.int32),
    ]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
    def program(x, steps):
        def level(entry, depth: int):
            h = entry
            for j in range(ops_per_level):
                op = mb.add if j % 2 == 0 else mb.mul
                h = op(x=h, y=np.float32(1.0 if j % 2 == 0 else 0.5), name=f"level{depth}_op{j}")
            if match:
                joined = mb.concat(values=(entry, h), axis=-1, name=f"level{depth}_joined")
                window = mb.slice_by_index(
                    x=joined,
                    begin=[0, 0, -(frames + 1)],
                    end=[0, 0, 0],
                    end_mask=[True, True, True],
                    name=f"level{depth}_window",
                )
            else:
                kept = mb.slice_by_index(
                    x=entry,
                    begin=[0, 0, frames - 1],
                    end=[0, 0, 0],
                    end_mask=[True, True, True],
                    name=f"level{depth}_kept",
                )
                window = mb.concat(values=(kept, h), axis=-1, name=f"level{depth}_window")
            total = mb.reduce_sum(x=window, axes=[-1], keep_dims=True, name=f"level{depth}_sum")
            out = mb.add(x=h, y=total, name=f"level{depth}_out")
            if depth + 1 == levels:
                return out

            def loop_cond(i, carried):
                return mb.less(x=i, y=steps)

            def loop_body(i, carried):
                inner = mb.cond(
                    pred=mb.less(x=i, y=steps),
                    _true_fn=lambda: level(carried, depth + 1),
                    _false_fn=lambda: mb.identity(x=carried),
                )
                return mb.add(x=i, y=np.int32(1)), inner

            counter = mb.mul(x=steps, y=np.int32(0), name=f"level{depth}_counter")
            _, result = mb.while_loop(_cond=loop_cond, _body=loop_body, loop_vars=(counter, out))
            return result

        return level(x, 0)

    return program


@dataclass(frozen=True)
class TorchWorkload:
    """A torch case of the test suite, instantiated, with its example inputs."""

    name: str
    case: object
    module: object
    examples: list


def torch_workloads(names: list[str] | None = None) -> list[TorchWorkload]:
    """The torch-converted models of the test suite (``mil_passes.testing.models.torch_modules.CASES``)."""
    from mil_passes.testing.models.torch_modules import CASES

    known = {case.name: case for case in CASES}
    unknown = [name for name in names or () if name not in known]
    if unknown:
        raise ValueError(f"unknown torch case '{unknown[0]}' (known: {', '.join(known)})")
    chosen = [known[name] for name in names] if names else list(CASES)
    return [
        TorchWorkload(case.name, case, case.instantiate(), case.example_inputs(np.random.default_rng(0)))
        for case in chosen
    ]
