"""webnn::rename_duplicate_temporaries — one name per definition, the interface untouched.

Given (a WebNN converter's ``logical_and(greater(x, y), less(x, z))``: each comparison's raw
bool and the cast back to bool before the logical op share the name ``{out}_bool``)::

    main(%x: (2, 2, fp32), %y: (2, 2, fp32), %z: (2, 2, fp32)) {
      block0() {
        %t_bool: (2, 2, bool) = greater(x=%x, y=%y, name="t_bool")
        %t: (2, 2, uint8) = cast(x=%t_bool, dtype="uint8", name="t")
        %u_bool: (2, 2, bool) = less(x=%x, y=%z, name="u_bool")
        %u: (2, 2, uint8) = cast(x=%u_bool, dtype="uint8", name="u")
        %t_bool: (2, 2, bool) = cast(x=%t, dtype="bool", name="t_bool")
        %u_bool: (2, 2, bool) = cast(x=%u, dtype="bool", name="u_bool")
        %out_bool: (2, 2, bool) = logical_and(x=%t_bool, y=%u_bool, name="out_bool")
        %out: (2, 2, uint8) = cast(x=%out_bool, dtype="uint8", name="out")
      } -> (%out)
    }

Result (the later definitions renamed; uses follow, they hold the var itself)::

        ...
        %t_bool_1: (2, 2, bool) = cast(x=%t, dtype="bool", name="t_bool_1")
        %u_bool_1: (2, 2, bool) = cast(x=%u, dtype="bool", name="u_bool_1")
        %out_bool: (2, 2, bool) = logical_and(x=%t_bool_1, y=%u_bool_1, name="out_bool")
        %out: (2, 2, uint8) = cast(x=%out_bool, dtype="uint8", name="out")

pymil links uses to definitions by object, so the program computes the same either way; the
saved ``.mlpackage`` links them by name, and with duplicates the reloaded model reads the wrong
definition without a word (docs/evidence.md §3). ``common::dedup_op_and_var_names`` fixes this only in
DEFAULT-based pipelines; this pass does it in any pipeline.

Rules:

- Scope is the whole program: every function's inputs, every op's outputs and every block input
  (``while_loop`` bodies included, nested blocks included). A ``while_loop``'s cond and body
  inputs at one position are one loop-carried value with one name (one var in pymil, two vars
  with one name once loaded from a ``.mlpackage``). Var names and op names are two
  namespaces, as in coremltools: an op may share its name with a var (usually its output).
- Function input and output names never change; an internal var that has one of them is renamed.
  Different functions may share interface names (each function is its own interface).
- Order: ``iter_blocks`` order (outer blocks before the blocks nested in them), each block's
  inputs before its ops. The first definition keeps its name; each later one gets the smallest
  suffix ``name_1``, ``name_2``, … that no var or op in the program uses, so an op and its output
  renamed together stay equal and the result is deterministic. A suffix keeps a valid MIL
  identifier valid.
- When an input and a different output (or two different outputs) of one function share a name,
  the interface cannot be kept: ``ValueError`` naming both, before anything is renamed.
"""

from __future__ import annotations

import logging
from typing import Iterable, NamedTuple

from coremltools.converters.mil.mil import Function, Operation, Program, Var
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass

from ..ir import FreshNames, iter_blocks, iter_ops, program_names
from ..rewriter import RewriteResult
from ..declaration import LintRule, PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="rename_duplicate_temporaries",
    summary="Make every var name and op name unique, keeping function input and output names.",
    slots=(Slot(10, None, "names first: later passes and the serializer resolve vars by name"),),
    rules=(
        LintRule(
            "duplicate-name",
            "error",
            "a name defined again where an earlier definition is visible",
            "a saved `.mlpackage` links uses to definitions by name: reloaded, it reads the wrong definition "
            "without a word (coremltools' `dedup_op_and_var_names` runs only in DEFAULT)",
        ),
    ),
)

logger = logging.getLogger("mil_passes")


class Rename(NamedTuple):
    """One renamed definition: ``kind`` is ``"var"`` or ``"op"``."""

    kind: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.kind} '{self.old}' -> '{self.new}'"


def _describe(var: Var) -> str:
    return f"'{var.name}' (output of op '{var.op.name}')" if var.op is not None else f"'{var.name}'"


def _interface_vars(prog: Program) -> list[Var]:
    """Every function's input and output vars; raises when one function's names clash."""
    interface: list[Var] = []
    for func_name, func in prog.functions.items():
        inputs = func.inputs
        outputs: dict[str, Var] = {}
        for out in func.outputs:
            same_input = inputs.get(out.name)
            if same_input is not None and same_input is not out:
                raise ValueError(
                    f"function '{func_name}': input '{out.name}' and output {_describe(out)} are "
                    "different values with one name; renaming either would change the interface"
                )
            other = outputs.setdefault(out.name, out)
            if other is not out:
                raise ValueError(
                    f"function '{func_name}': outputs {_describe(other)} and {_describe(out)} are "
                    "different values with one name; renaming either would change the interface"
                )
        interface.extend(inputs.values())
        interface.extend(func.outputs)
    return interface


def _loop_input_followers(prog: Program) -> dict[Var, list[Var]]:
    """Cond-block input → the body-block inputs at the same position that carry its name.

    pymil's ``while_loop`` shares one var between its two blocks; a program loaded from a
    ``.mlpackage`` has two vars with one name there. Both are one loop-carried value and keep
    one name, so a round trip makes no new renames.
    """
    followers: dict[Var, list[Var]] = {}
    for op in iter_ops(prog):
        if op.op_type != "while_loop":
            continue
        cond_block, body_block = op.blocks
        for cond_input, body_input in zip(cond_block.inputs, body_block.inputs):
            if body_input is not cond_input and body_input.name == cond_input.name:
                followers.setdefault(cond_input, []).append(body_input)
    return followers


def _definitions(prog: Program, skip: set[Var]) -> tuple[list[Var], list[Operation]]:
    """Every var (but ``skip``) and op of ``prog`` once, in the order that decides who keeps
    a name: ``iter_blocks`` order, each block's inputs before its ops."""
    defined: dict[Var, None] = {}
    ops: list[Operation] = []
    for block in iter_blocks(prog):
        inputs = block.inputs.values() if isinstance(block, Function) else block.inputs
        defined.update(dict.fromkeys(v for v in inputs if v not in skip))
        for op in block.operations:
            ops.append(op)
            defined.update(dict.fromkeys(op.outputs))
    return list(defined), ops


def _dedup(
    kind: str,
    items: Iterable[Var | Operation],
    claimed: set[str],
    keep: set,
    taken: set[str],
) -> list[tuple[Var | Operation, Rename]]:
    """The renames that give every item a name not yet claimed; ``keep`` items never change.
    ``taken`` holds every name in use (both namespaces) and grows with each new name. Pure: the
    items keep their names."""
    renames = []
    fresh = FreshNames(taken)
    for item in items:
        if item.name is None or item in keep:
            continue
        name = item.name
        if name in claimed:
            name = fresh.suffixed(item.name)
            renames.append((item, Rename(kind, item.name, name)))
        claimed.add(name)
    return renames


def plan_renames(prog: Program) -> list[tuple[Var | Operation, Rename]]:
    """What :func:`rename_duplicates` would rename, in order, without renaming anything.

    Raises ``ValueError`` when an input and a different output of a function share a name.
    """
    return _plan(prog, _loop_input_followers(prog))


def _plan(prog: Program, followers: dict[Var, list[Var]]) -> list[tuple[Var | Operation, Rename]]:
    interface = _interface_vars(prog)
    variables, ops = _definitions(prog, {v for group in followers.values() for v in group})
    all_names = program_names(prog)
    interface_names = {v.name for v in interface}
    planned = _dedup("var", variables, set(interface_names), set(interface), set(all_names))
    planned += _dedup("op", ops, set(), set(), set(all_names))
    return planned


def rename_duplicates(prog: Program) -> list[Rename]:
    """Give every var and every op of ``prog`` a name of its own; return what was renamed."""
    followers = _loop_input_followers(prog)
    planned = _plan(prog, followers)
    for item, rename in planned:
        item.name = rename.new
        for follower in followers.get(item, ()):
            follower.name = rename.new
        logger.debug("rename_duplicate_temporaries: %s", rename)
    return [rename for _, rename in planned]


@register(DECLARATION)
class RenameDuplicateTemporaries(AbstractGraphPass):
    """What ``DECLARATION`` declares, as a pass.

    After ``apply``, ``self.renames`` lists the renames as ``Rename(kind, old, new)``, and
    ``self.last_result`` counts them, as every pass of the package reports.
    """

    def __init__(self) -> None:
        self.renames: list[Rename] = []
        self.last_result: RewriteResult | None = None

    def apply(self, prog: Program) -> None:
        self.renames = rename_duplicates(prog)
        self.last_result = RewriteResult(rewritten=len(self.renames))
