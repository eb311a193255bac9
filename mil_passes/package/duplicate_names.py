"""Names in an ML Program protobuf, read before coremltools' loader sees them.

MIL links a use to a definition by name. A converter that defines one name twice (the WebNN
``{out}_bool`` temporaries, docs/evidence.md §2) leaves the meaning to whoever reads the file:
coremltools' loader keeps one entry per name and overrides it silently, and a package saved
from the result reads the wrong definition once reloaded (docs/evidence.md §3).

:func:`fix_duplicate_names` makes every name mean one thing, in place:

- A name is defined twice when a definition (a function input, a block input, an op output)
  reuses a name defined earlier in the same block or in a block enclosing it. Sibling blocks
  (the two branches of a ``cond``, a ``while_loop``'s cond and body, whose inputs share names
  by convention) do not clash.
- Each use reads the definition that precedes it (the nearest visible one), as the loader does.
- The function's inputs, and the definitions its outputs read, keep their names (the model's
  interface); among the other definitions of a clashing name the first keeps it. Every other
  definition gets the smallest free ``name_1``, ``name_2``, …, its uses follow, and an op whose
  name was its output's name is renamed with it.
- A finding ``duplicate-name`` (error) per clashing name says what was renamed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..lint.findings import Finding
from ..ir import FreshNames
from .milproto import op_name


class InterfaceClash(ValueError):
    """One function's input and output are different values with one name: nothing can be renamed."""


class UndefinedName(ValueError):
    """An op reads a name no earlier definition gives."""


@dataclass
class _Definition:
    name: str
    scope: tuple[int, ...]  # block ids from the function's top block inward
    label: str  # how a message names the definer
    interface: bool = False


def _op_label(op) -> str:
    name = op_name(op) or (op.outputs[0].name if op.outputs else "")
    return f"{op.type} '{name}'"


def _setop_name(op, name: str) -> None:
    op.attributes["name"].immediateValue.tensor.strings.values[0] = name


class _Collector:
    """Walk 1: every definition in the loader's order, with its scope."""

    def __init__(self) -> None:
        self.definitions: list[_Definition] = []
        self.next_block = 0

    def function(self, function, block) -> None:
        for value in function.inputs:
            self.definitions.append(_Definition(value.name, (), f"input '{value.name}'"))
        self.block(block, (), top=True)

    def block(self, block, scope: tuple[int, ...], top: bool = False) -> None:
        if not top:
            for value in block.inputs:
                self.definitions.append(_Definition(value.name, scope, f"block input '{value.name}'"))
        for op in block.operations:
            for nested in op.blocks:
                self.next_block += 1
                self.block(nested, scope + (self.next_block,))
            for value in op.outputs:
                self.definitions.append(_Definition(value.name, scope, _op_label(op)))


def _clashing(definitions: list[_Definition], indices: list[int]) -> list[int]:
    """Those of ``indices`` (definitions of one name) that another one's scope encloses or
    shares or that enclose another one: linear in the definitions times the nesting depth."""
    at_scope = Counter(definitions[i].scope for i in indices)
    at_or_below = Counter(
        definitions[i].scope[:depth] for i in indices for depth in range(len(definitions[i].scope) + 1)
    )
    return [
        i
        for i in indices
        if at_or_below[definitions[i].scope] > 1
        or any(at_scope[definitions[i].scope[:depth]] for depth in range(len(definitions[i].scope)))
    ]


class _Renamer:
    """Walk 2 (same order as walk 1): rename definitions, point each use at the definition before it."""

    def __init__(self, new_names: list[str], function_name: str) -> None:
        self.new_names = new_names
        self.index = 0
        self.function_name = function_name

    def define(self, value, chain: list[dict[str, str]], op=None) -> None:
        old, new = value.name, self.new_names[self.index]
        self.index += 1
        chain[-1][old] = new
        if new != old:
            value.name = new
            if op is not None and op_name(op) == old:
                _setop_name(op, new)

    def resolve(self, name: str, chain: list[dict[str, str]], reader: str) -> str:
        for scope in reversed(chain):
            if name in scope:
                return scope[name]
        raise UndefinedName(
            f"{reader} reads '{name}', which nothing defines before it in function '{self.function_name}'"
        )

    def function(self, function, block) -> None:
        chain: list[dict[str, str]] = [{}]
        for value in function.inputs:
            self.define(value, chain)
        self.block(block, chain, top=True)

    def block(self, block, chain: list[dict[str, str]], top: bool = False) -> None:
        if not top:
            chain = chain + [{}]
            for value in block.inputs:
                self.define(value, chain)
        for op in block.operations:
            for argument in op.inputs.values():
                for binding in argument.arguments:
                    if binding.WhichOneof("binding") == "name":
                        binding.name = self.resolve(binding.name, chain, _op_label(op))
            for nested in op.blocks:
                self.block(nested, chain)
            for value in op.outputs:
                self.define(value, chain, op)
        outputs = [self.resolve(name, chain, "a block output") for name in block.outputs]
        del block.outputs[:]
        block.outputs.extend(outputs)


def _keepers(definitions: list[_Definition], outputs: list[str], function_name: str) -> None:
    """Mark the function's inputs and the top-level definitions its outputs read."""
    top_level: dict[str, list[_Definition]] = {}
    for definition in definitions:
        if definition.scope == ():
            top_level.setdefault(definition.name, []).append(definition)
            definition.interface = definition.label.startswith("input ")
    for output in outputs:
        last = top_level.get(output)
        if not last:
            continue
        reader = last[-1]
        clash = next((d for d in last[:-1] if d.interface), None)
        if clash is not None and clash.label.startswith("input "):
            raise InterfaceClash(
                f"function '{function_name}': input '{output}' and the output {reader.label} are "
                "different values with one name; renaming either would change the model's interface"
            )
        reader.interface = True


def fix_duplicate_names(spec) -> list[Finding]:
    """Give every definition of ``spec``'s ML Program a name its scope does not reuse (in place).

    Returns one ``duplicate-name`` finding per clashing name. Raises :class:`InterfaceClash`
    when a function's interface cannot keep its names and :class:`UndefinedName` when an op
    reads a name nothing defines before it.
    """
    program = spec.mlProgram
    walks = []
    taken: set[str] = set()
    for function_name, function in program.functions.items():
        block = function.block_specializations[function.opset]
        collector = _Collector()
        collector.function(function, block)
        walks.append((function_name, function, block, collector.definitions))
        taken.update(d.name for d in collector.definitions)
        taken.update(_all_op_names(block))
    findings = []
    fresh = FreshNames(taken)
    for function_name, function, block, definitions in walks:
        _keepers(definitions, list(block.outputs), function_name)
        new_names = [d.name for d in definitions]
        by_name: dict[str, list[int]] = {}
        for index, definition in enumerate(definitions):
            by_name.setdefault(definition.name, []).append(index)
        for name, indices in by_name.items():
            involved = _clashing(definitions, indices) if len(indices) > 1 else []
            if not involved:
                continue
            keeper = next((i for i in involved if definitions[i].interface), involved[0])
            renamed = []
            for i in involved:
                if i != keeper:
                    new_names[i] = fresh.suffixed(name)
                    renamed.append(f"{definitions[i].label} -> '{new_names[i]}'")
            labels = ", ".join(definitions[i].label for i in involved)
            findings.append(
                Finding(
                    "duplicate-name",
                    "error",
                    _finding_op(definitions, involved, keeper),
                    f"'{name}' is defined {len(involved)} times in function '{function_name}' ({labels}); "
                    f"coremltools' loader keeps one and a saved package may read the wrong one. "
                    f"Each use now reads the definition before it: renamed {', '.join(renamed)}",
                    function=function_name if len(program.functions) > 1 else None,
                )
            )
        _Renamer(new_names, function_name).function(function, block)
    return findings


def _finding_op(definitions: list[_Definition], involved: list[int], keeper: int) -> str:
    first_renamed = next(i for i in involved if i != keeper)
    label = definitions[first_renamed].label
    return label.split("'")[1] if "'" in label else definitions[first_renamed].name


def _all_op_names(block) -> set[str]:
    names = set()
    for op in block.operations:
        name = op_name(op)
        if name is not None:
            names.add(name)
        for nested in op.blocks:
            names |= _all_op_names(nested)
            names.update(value.name for value in nested.inputs)
    return names
