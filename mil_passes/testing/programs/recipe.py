"""A drawn program as data: the steps that build it, replayed with coremltools' builder.

``check_pass`` needs a ``build()`` that makes a fresh, identical Program on every call (a
Program cannot be deep-copied). A :class:`Recipe` fixes every random choice; :func:`build`
replays it. Every op and const gets an explicit name and symbolic dims are named, so two
builds print the same MIL text.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, Program, Var, types
from coremltools.converters.mil.mil.program import Symbol, get_existing_symbol
from coremltools.converters.mil.mil.types.symbolic import k_used_symbols

from ...ir import iter_ops

DTYPES: dict[str, Any] = {
    "fp32": np.float32,
    "fp16": np.float16,
    "int32": np.int32,
    "bool": np.bool_,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
}


@dataclass(frozen=True)
class Ref:
    """A var of the program, by its position among the vars the replay has made."""

    index: int


Arg = Union[Ref, np.ndarray, str, tuple]
#: A tensor input drawn for an op: a var of the program, or a const value.
Operand = Union[Ref, np.ndarray]


@dataclass(frozen=True)
class Branch:
    """A nested block: its steps and the var it returns."""

    steps: tuple["Step", ...]
    output: Ref


@dataclass(frozen=True)
class Step:
    """One op: its type, name and arguments (vars, const values, or tuples of those)."""

    op_type: str
    name: str
    args: dict[str, Arg]
    branches: tuple[Branch, Branch] | None = None  # cond only: (true, false)


def symbol(name: str) -> Symbol:
    """The symbolic dim called ``name`` (coremltools allows one Symbol per name per process)."""
    return get_existing_symbol(name) if name in k_used_symbols else Symbol(name)


@dataclass(frozen=True)
class TensorType:
    """A tensor type: dtype name (``"fp32"``, ``"uint8"``, …) and shape (a ``str`` dim is a symbol)."""

    dtype: str
    shape: tuple[int | str, ...]

    def spec(self) -> Any:
        """coremltools' ``TensorSpec`` for this type (symbols become named ``Symbol`` dims)."""
        shape = tuple(symbol(d) if isinstance(d, str) else d for d in self.shape)
        return mb.TensorSpec(shape=shape, dtype=types.numpy_type_to_builtin_type(DTYPES[self.dtype]))

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(d for d in self.shape if isinstance(d, str))


@dataclass(frozen=True)
class InputDecl(TensorType):
    """A function input: a tensor type and a name."""

    name: str = "x"


@dataclass
class Recipe:
    """Everything needed to build one program."""

    opset: Any
    inputs: tuple[InputDecl, ...]
    steps: list[Step] = field(default_factory=list)
    outputs: list[Ref] = field(default_factory=list)

    def build(self) -> Program:
        """A fresh Program; every call prints the same."""
        prog = Program()
        with function_of(self.inputs, self.opset) as (func, vals):
            for step in self.steps:
                replay_step(step, vals)
            func.set_outputs([vals[ref.index] for ref in self.outputs])
        prog.add_function("main", func)
        return prog


@contextmanager
def function_of(inputs: tuple[InputDecl, ...], opset: Any) -> Iterator[tuple[Function, list[Var]]]:
    """Open a Function with ``inputs``; yield it and the list of vars (inputs first)."""
    with Function({d.name: d.spec() for d in inputs}, opset_version=opset) as func:
        yield func, [func.inputs[d.name] for d in inputs]


def const_value(value: Any, name: str) -> Var:
    """A named const op holding ``value`` (0-d bools and int32s as Python scalars, which is
    what coremltools' value inference expects)."""
    if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0:
        value = np.asarray(value)
        value = value.item() if value.dtype in (np.bool_, np.int32) else value[()]
    return mb.const(val=value, name=name)


def _resolve(arg: Arg, vals: list[Var], name: str) -> Any:
    if isinstance(arg, Ref):
        return vals[arg.index]
    if isinstance(arg, tuple):
        return tuple(_resolve(a, vals, f"{name}_{i}") for i, a in enumerate(arg))
    return const_value(arg, name)


def replay_step(step: Step, vals: list[Var]) -> list[Var]:
    """Build ``step`` in the current block; append its outputs to ``vals`` and return them."""
    args = {key: _resolve(arg, vals, f"{step.name}_{key}") for key, arg in step.args.items()}
    if step.op_type == "cond":
        if step.branches is None:
            raise ValueError(f"cond step '{step.name}' has no branches")
        true_branch, false_branch = step.branches
        result = mb.cond(
            **args,
            _true_fn=lambda: _replay_branch(true_branch, vals),
            _false_fn=lambda: _replay_branch(false_branch, vals),
            name=step.name,
        )
    else:
        result = getattr(mb, step.op_type)(**args, name=step.name)
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    vals.extend(outputs)
    return outputs


def _replay_branch(branch: Branch, vals: list[Var]) -> Var:
    for step in branch.steps:
        replay_step(step, vals)
    return vals[branch.output.index]


_BLOCK_COUNTER = re.compile(r"^(\s*)block\d+\(", re.MULTILINE)
_FRESH_SYMBOL = re.compile(r"\bis\d+\b")


def program_text(prog: Program) -> str:
    """``prog`` in MIL text form without process-wide counters (``block7()``, and symbols
    coremltools makes up such as ``is1207``, renumbered in order of appearance), so two
    builds of one recipe print the same."""
    text = _BLOCK_COUNTER.sub(r"\1block(", str(prog))
    fresh: dict[str, str] = {}
    return _FRESH_SYMBOL.sub(lambda m: fresh.setdefault(m.group(0), f"is{len(fresh)}"), text)


def count_steps(steps: list[Step] | tuple[Step, ...]) -> int:
    """Ops in ``steps``, nested blocks included."""
    total = 0
    for step in steps:
        total += 1
        for branch in step.branches or ():
            total += count_steps(branch.steps)
    return total


@dataclass
class DrawnProgram:
    """A drawn program: ``build()`` makes it afresh; ``feeds`` holds one dict per size choice."""

    recipe: Recipe
    feeds: list[dict[str, np.ndarray]]
    planted: tuple[str, ...] = field(default=())
    _reference: Program | None = field(default=None, repr=False, compare=False)

    def build(self) -> Program:
        """A fresh Program (pass this, not a built Program, to ``check_pass``)."""
        return self.recipe.build()

    def reference(self) -> Program:
        """One build kept for reading and evaluating (never hand it to a pass)."""
        if self._reference is None:
            self._reference = self.build()
        return self._reference

    def __iter__(self):  # ``build, feeds_list = drawn``
        return iter((self.build, self.feeds))

    @property
    def op_count(self) -> int:
        return count_steps(self.recipe.steps)

    def _repr_pretty_(self, printer, cycle) -> None:  # how hypothesis prints a failing case
        printer.text(repr(self))

    def __repr__(self) -> str:
        prog = self.reference()
        text = program_text(prog).strip()
        lines = [text]
        named = [op for op in iter_ops(prog) if op.op_type == "const" and f"%{op.name}" in text]
        if named:
            lines.append("consts:")
            lines += [f"  {op.name}: {_show(op.outputs[0].val)}" for op in named]
        for i, feed in enumerate(self.feeds):
            lines.append(f"feeds[{i}]:")
            lines += [f"  {name}: {_show(value)}" for name, value in feed.items()]
        return "\n".join(lines)


def _show(value: Any) -> str:
    value = np.asarray(value)
    text = np.array2string(value, separator=", ", threshold=64).replace("\n", " ")
    return f"{value.dtype}{list(value.shape)} = {text}"
