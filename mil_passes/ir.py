"""Walking a MIL program: every block and op, the names in use, fresh names, op counts.

The bottom layer of the package: passes, lint, the package reader and the interpreter's callers
all walk programs through these functions.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from coremltools.converters.mil.mil import Block, Operation, Program, Var
from coremltools.converters.mil.mil.var import InternalVar


def iter_blocks(prog_or_block: Program | Block) -> Iterator[Block]:
    """Every block, outer before inner: functions, then nested blocks in op order."""
    roots = list(prog_or_block.functions.values()) if isinstance(prog_or_block, Program) else [prog_or_block]
    stack = list(reversed(roots))
    while stack:
        block = stack.pop()
        yield block
        nested = [b for op in block.operations for b in op.blocks]
        stack.extend(reversed(nested))


def iter_ops(prog_or_block: Program | Block) -> Iterator[Operation]:
    """Every op of every block, in block order (outer blocks first)."""
    for block in iter_blocks(prog_or_block):
        yield from list(block.operations)


def iter_proto_ops(spec) -> Iterator:
    """Every op of an ML Program's protobuf (``spec``, a Model message): all functions, all block
    specializations, nested blocks included."""

    def visit(block) -> Iterator:
        for op in block.operations:
            yield op
            for nested in op.blocks:
                yield from visit(nested)

    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            yield from visit(block)


def program_names(prog: Program) -> set[str]:
    """All op names and var names used anywhere in ``prog``."""
    names: set[str] = set()
    for func in prog.functions.values():
        names.update(func.inputs.keys())
    for block in iter_blocks(prog):
        inputs = block.inputs.values() if isinstance(block.inputs, dict) else block.inputs
        names.update(var.name for var in inputs)
        for op in block.operations:
            names.add(op.name)
            for out in op.outputs:
                names.add(out.name)
    return names


class FreshNames:
    """Names not in ``taken`` (which it extends): ``base`` itself, or the smallest free ``base_1``,
    ``base_2``, … Names are only ever added, so each base's search resumes where it last
    stopped: linear in the names handed out, where starting at ``_1`` each time is quadratic in
    how often one base recurs (10,000 ops all named ``t``)."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self._next_suffix: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        """``base`` if it is free, else :meth:`suffixed`."""
        if base in self.taken:
            return self.suffixed(base)
        self.taken.add(base)
        return base

    def suffixed(self, base: str) -> str:
        """The smallest free ``base_N`` (N ≥ 1)."""
        suffix = self._next_suffix.get(base, 1)
        while f"{base}_{suffix}" in self.taken:
            suffix += 1
        self._next_suffix[base] = suffix + 1
        name = f"{base}_{suffix}"
        self.taken.add(name)
        return name


def op_counts(prog: Program | Block) -> Counter:
    """How many ops of each type ``prog`` holds, nested blocks included (consts excluded)."""
    return Counter(op.op_type for op in iter_ops(prog) if op.op_type != "const")


def is_used(var: Var) -> bool:
    """Does any op or block output read ``var``?"""
    return bool(var.child_ops or var.consuming_blocks)


def input_vars(op: Operation) -> list[Var]:
    """The vars ``op`` takes as inputs, lists flattened (``op.inputs`` without building it: an
    internal var is no input)."""
    flat: list[Var] = []
    for value in op._input_vars.values():
        if isinstance(value, (list, tuple)):
            flat.extend(value)
        elif value is not None and not isinstance(value, InternalVar):
            flat.append(value)
    return flat
