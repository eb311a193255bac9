"""The fuzz's *repaired* programs: outputs NaN or infinite before a pass and finite after, from a
pass that declares it may do that.

A pass whose declaration sets ``may_repair`` (:class:`~mil_passes.declaration.PassDeclaration`;
``webnn::finite_mask_sentinels``: a softmax row masked whole is NaN with ±inf sentinels, finite
with ±40000) may make an output finite where it was NaN or infinite, at the positions
:func:`~mil_passes.verify.repaired_positions` finds (verify's own definition); every other
position stays bit for bit. The same change from a pass that does not declare it is a
miscompile: a data-movement pass that turns a NaN into a number is wrong. A pipeline is checked
pass by pass, so a repair is accepted only from the pass that made it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from ...reference.equivalence import assert_same_interface, compare_output
from ...runner import run_pass
from ...verify import repaired_positions
from ..programs.recipe import DrawnProgram, program_text
from .failure_class import feed_for, outputs_of

REPAIRED = "repaired"  # verify's status of the same name


def may_repair(name: str) -> bool:
    """Whether the registered pass ``name`` declares it may make NaN or infinite outputs finite."""
    declaration = getattr(PASS_REGISTRY[name], "declaration", None)
    return bool(getattr(declaration, "may_repair", False))


def passes_of(target: str | PassPipeline) -> list[str]:
    """The passes ``target`` runs, in order: the pass itself, or a pipeline's."""
    return list(target.passes) if isinstance(target, PassPipeline) else [target]


def check_repairs(drawn: DrawnProgram, target: str | PassPipeline) -> tuple[Program, int]:
    """``check_pass``'s checks of ``target`` on ``drawn``, with declared repairs allowed.

    Each pass runs in turn (with the pipeline's options) and leaves a program that validates; on
    every feed its outputs equal the previous pass's bit for bit, except, for a pass that may
    repair, where a NaN or infinite value became finite. Then the interface is the drawn one's
    and a second run of ``target`` changes nothing. Returns the program after and how many
    output values were repaired; raises AssertionError (a miscompile) otherwise.
    """
    before, prog = drawn.reference(), drawn.build()
    options = target if isinstance(target, PassPipeline) else None
    printed = program_text(prog)
    outputs = [outputs_of(prog, feed) for feed in drawn.feeds]
    repaired = 0
    for name in passes_of(target):
        run_pass(prog, name, options)
        prog.validate()
        if program_text(prog) == printed:
            continue  # the pass changed nothing: the outputs stand
        printed = program_text(prog)
        got = [outputs_of(prog, feed_for(before, prog, feed)) for feed in drawn.feeds]
        repaired += _compare(name, outputs, got, prog)
        outputs = got
    if list(prog.functions) != list(before.functions):
        raise AssertionError(f"functions changed: before {list(before.functions)}, after {list(prog.functions)}")
    assert_same_interface(before, prog)
    once = str(prog)
    for name in passes_of(target):
        run_pass(prog, name, options)
    if str(prog) != once:
        raise AssertionError(f"{target} is not idempotent: a second run changed\n{once}\ninto\n{str(prog)}")
    return prog, repaired


def _compare(name: str, want: Sequence[list[np.ndarray]], got: Sequence[list[np.ndarray]], prog: Program) -> int:
    """How many values of ``got`` (outputs per feed) are repairs of ``want``'s, when the pass
    ``name`` may repair (else none); AssertionError naming the pass where any other value differs."""
    allowed = may_repair(name)
    names = [var.name for var in prog.functions["main"].outputs]
    repaired = 0
    for feed_want, feed_got in zip(want, got):
        for output, w, g in zip(names, feed_want, feed_got):
            mask = repaired_positions(w, g) if allowed else np.zeros(np.shape(w), dtype=bool)
            try:
                compare_output(output, w, np.where(mask, w, g) if mask.any() else g, 0, 0)
            except AssertionError as error:
                raise AssertionError(f"{name}: {error}") from None
            repaired += int(mask.sum())
    return repaired
