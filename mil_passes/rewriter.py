"""The shared rewriter: one traversal of every block and batched replacement.

Passes express *match* and *rewrite*; this module does the rest:

- walks every block of every function, nested ``cond``/``while_loop`` bodies included;
- dispatches each op to the patterns registered for its type (a dict, not an ``if`` chain);
- collects var replacements and applies them in one batch: one ``set_inputs`` per consumer op
  and one removal sweep per block (coremltools' per-match ``replace_uses_of_var_after_op`` is
  quadratic on a ``stack`` of N rewritten windows, docs/evidence.md §3);
- removes what a rewrite left dead, and re-visits the ops it created or re-wired;
- keeps function output names, copies scope information to new ops, and hands out names that
  no var or op in the program uses yet.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, Hashable, Iterator, Mapping, Optional, TypeVar, Union, final

import numpy as np
from coremltools.converters.mil.mil import Block, Builder as mb, Function, Operation, Program, Var
from coremltools.converters.mil.mil import block as block_module
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass

from .ir import FreshNames, is_used, iter_blocks, iter_ops, program_names  # noqa: F401  (iter_blocks: re-exported)

logger = logging.getLogger("mil_passes")


@dataclass(frozen=True)
class Declined:
    """Why a pattern did not rewrite ``op`` (a value ``match`` returns; test it with ``isinstance``)."""

    op: Operation
    reason: str

    def __str__(self) -> str:
        return f"{self.op.op_type} '{self.op.name}': {self.reason}"


M = TypeVar("M")
T = TypeVar("T")


#: What ``rewrite`` returns: the new value of ``op.outputs[0]``; one entry per output of ``op``
#: (``None``: that output is kept); or a mapping from vars the match reached beyond ``op`` (a const
#: it reads, a cast that reads it) to their new values. The driver makes every reader read them.
Replacements = Union[Var, tuple[Optional[Var], ...], Mapping[Var, Var]]


class RewritePattern(ABC, Generic[M]):
    """One rule, a value without state: ``match`` is pure and returns a match of type ``M``, a
    :class:`Declined` (a candidate left unchanged, with the reason: logged, shown by ``--explain`` and
    by lint) or ``None`` (not a candidate at all: nothing to report); ``rewrite`` builds the new ops
    through the :class:`Rewriter` (``add``, ``const``, ``shared``) and returns the new values
    (:data:`Replacements`). What it will do, in the user's terms, is :attr:`cause` and
    :meth:`detail`, which :meth:`describe` joins into lint's message. Every match the rewrite is
    given changes the program. docs/writing-a-pass.md walks through one."""

    #: The op types the rewriter hands to ``match`` (a class constant, or a field of a pattern value).
    op_types: tuple[str, ...] = ()
    #: The lint rule a match of this pattern is reported under.
    rule: ClassVar[str] = ""
    #: What every match shares, said after the op's type and name: what the op does, then what the
    #: rewrite makes of it ("gathers by constant indices: ... slices run on the Neural Engine"). Lint
    #: groups matches repeated per layer under it ("": under the rule's own words).
    cause: ClassVar[str] = ""
    #: What every decline of this pattern shares, for lint's grouped report ("": each its own reason).
    declined_because: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "describe" in vars(cls) or callable(vars(cls).get("cause")):
            raise TypeError(
                f'{cls.__name__}: describe() is built from `cause = "..."` (what every match shares) and '
                "detail(op, match) (what differs); define those instead of describe()/cause() "
                "(docs/writing-a-pass.md)"
            )

    @abstractmethod
    def match(self, op: Operation) -> M | Declined | None:
        """Return what ``rewrite`` needs, a :class:`Declined`, or ``None`` (not a candidate)."""

    @abstractmethod
    def rewrite(self, op: Operation, match: M, rewriter: "Rewriter") -> Replacements:
        """Build the new ops (``rewriter.add``, ``rewriter.const``, ``rewriter.shared``) and return
        the new values (:data:`Replacements`)."""

    def detail(self, op: Operation, match: M) -> str:
        """What this match adds to :attr:`cause` (its operands, axes, sizes; "": nothing). Without a
        cause, all that is said after the op's type and name."""
        return ""

    @final
    def describe(self, op: Operation, match: M) -> str:
        """One line: what ``rewrite`` will do to ``op`` (without the pass's name): the op, then
        :attr:`cause`, then :meth:`detail` in parentheses (alone when there is no cause)."""
        detail = self.detail(op, match)
        said = f"{self.cause} ({detail})" if self.cause and detail else self.cause or detail
        return f"{op.op_type} '{op.name}' {said or f'is rewritten by {type(self).__name__}'}"


@dataclass(frozen=True)
class Match:
    """What a pattern said of an op, found without rewriting: ``match`` is the pattern's match,
    or a :class:`Declined` (a candidate the pattern leaves unchanged)."""

    op: Operation
    pattern: RewritePattern
    match: Any

    @property
    def declined(self) -> bool:
        return isinstance(self.match, Declined)

    def describe(self) -> str:
        """What the rewrite will do, or why the op is left (a decline's reason)."""
        if isinstance(self.match, Declined):
            return str(self.match)
        return self.pattern.describe(self.op, self.match)

    @property
    def cause(self) -> str:
        """What the match shares with the pattern's others ("": the rule's own words)."""
        return self.pattern.cause


@dataclass
class RewriteResult:
    """What one application of a set of patterns did."""

    rewritten: int = 0
    removed_ops: int = 0
    declined: list[Declined] = field(default_factory=list)


def _ops_before(block: Block, anchor: Operation, stop: Operation | None) -> list[Operation]:
    """Ops between ``stop`` (exclusive) and ``anchor`` (exclusive), nearest first."""
    ops = block.operations
    if hasattr(ops, "op_to_node"):
        found, node = [], ops.op_to_node[anchor].prev
        while node is not None and node.op is not stop:
            found.append(node.op)
            node = node.prev
        return found
    index = ops.index(anchor)
    start = ops.index(stop) + 1 if stop is not None else 0
    return list(reversed(ops[start:index]))


def _previous_op(block: Block, anchor: Operation) -> Operation | None:
    ops = block.operations
    if hasattr(ops, "op_to_node"):
        prev = ops.op_to_node[anchor].prev
        return prev.op if prev is not None else None
    index = ops.index(anchor)
    return ops[index - 1] if index > 0 else None


@contextmanager
def _building_in(block: Block) -> Iterator[None]:
    """Make ``block`` the builder's current block. Unlike ``with block:``, leaving does not
    re-propagate non-replaceable vars over the whole block (``Block.__exit__``): that is O(block)
    per emit, quadratic over a pass; ``commit`` propagates once per function instead."""
    block_module.BLOCK_STACK.append(block)
    try:
        yield
    finally:
        block_module.BLOCK_STACK.pop()  # through the module: Block.__exit__ rebinds the list


class Rewriter:
    """Builds new ops, records replacements, and applies them in batches (``commit``)."""

    def __init__(self, prog: Program):
        self.prog = prog
        self._names = program_names(prog)
        self._fresh = FreshNames(self._names)
        self._replacements: dict[Var, Var] = {}
        self._created: list[Operation] = []
        self._roots: list[Operation] = []
        self._consts: dict[tuple, Var] = {}
        self._shared: dict[Hashable, Any] = {}
        #: The op being rewritten: :meth:`add` builds right before it (the driver sets it).
        self.anchor: Operation | None = None

    # -- building -------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """``base`` if no var or op has it yet, else ``base_1``, ``base_2``, …"""
        return self._fresh.fresh(base)

    def add(self, op_type: str, name: str | None = None, **inputs: Any) -> Any:
        """Build ``op_type`` right before the op being rewritten and return its output var(s);
        ``name`` is a hint (default: the rewritten op's name), made unique."""
        if self.anchor is None:
            raise RuntimeError("add() builds at the op being rewritten: call it from a pattern's rewrite")
        return self.emit(self.anchor, op_type, name or self.anchor.name, **inputs)

    def const(self, value: Any, name: str = "const") -> Var:
        """A const of ``value`` first in the function of the op being rewritten: one per value
        (dtype, shape and bytes) and function in a run, so patterns share their constants."""
        if self.anchor is None:
            raise RuntimeError("const() builds in the function of the op being rewritten: call it from a rewrite")
        array = np.asarray(value)
        block = self.anchor.enclosing_block
        while block.outer_op is not None:
            block = block.outer_op.enclosing_block
        key = (block, type(value), array.dtype.str, array.shape, array.tobytes())
        var = self._consts.get(key)
        if var is None or var.op.enclosing_block is None:
            var = self.emit(block.operations[0], "const", name, val=value)
            self._consts[key] = var
        return var

    def shared(self, key: Hashable, build: Callable[[], T]) -> T:
        """``build()`` the first time ``key`` is asked for in this run and block, the same value
        after: what several rewrites read (a position mask every layer's write shares), built
        (``add``) before the first op that asks for it. ``key`` holds all the value depends on."""
        if self.anchor is None:
            raise RuntimeError("shared() builds at the op being rewritten: call it from a rewrite")
        scoped = (self.anchor.enclosing_block, key)
        if scoped not in self._shared:
            self._shared[scoped] = build()
        return self._shared[scoped]

    def emit(self, anchor: Operation, op_type: str, name: str, **inputs: Any) -> Any:
        """Build ``op_type`` right before ``anchor`` and return its output var(s).

        ``name`` is a hint; the op gets a unique name derived from it.
        """
        block = anchor.enclosing_block
        before = _previous_op(block, anchor)
        with _building_in(block):
            result = getattr(mb, op_type)(**inputs, before_op=anchor, name=self.unique_name(name))
        for op in _ops_before(block, anchor, before):
            self._created.append(op)
            self._names.add(op.name)
            self._names.update(out.name for out in op.outputs)
        return result

    # -- replacing ------------------------------------------------------------------------
    def replace(self, old: Var, new: Var) -> None:
        """From the next ``commit`` on, every use of ``old`` reads ``new`` (recorded twice: once;
        ``old`` replaced by two vars: ``ValueError``)."""
        if old is new or self._replacements.get(old) is new:
            return
        if old in self._replacements:
            raise ValueError(f"var '{old.name}' is replaced twice")
        self._replacements[old] = new
        if old.op is not None:
            self._roots.append(old.op)

    def replace_op(self, op: Operation, new_values: Replacements) -> None:
        """Record what a rewrite of ``op`` returned (:data:`Replacements`: one var for the first
        output, one entry per output with ``None`` for an output that stays, or a mapping)."""
        if isinstance(new_values, Var):
            new_values = (new_values,)
        pairs = new_values.items() if isinstance(new_values, Mapping) else zip(op.outputs, new_values)
        for old, new in pairs:
            if new is not None:
                self.replace(old, new)

    def _resolve(self, var: Var) -> Var:
        seen = 0
        while var in self._replacements:
            var = self._replacements[var]
            seen += 1
            if seen > len(self._replacements):
                raise ValueError("cyclic replacement")
        return var

    def commit(self) -> tuple[int, list[Operation]]:
        """Apply all recorded replacements; remove dead ops.

        Returns the number of removed ops and the ops to visit again: those created since the
        last commit and those whose inputs changed.
        """
        replacements = {old: self._resolve(old) for old in self._replacements}
        touched: list[Operation] = list(self._created)
        consumers: dict[Operation, None] = {}
        for old in replacements:
            for child in old.child_ops:
                consumers[child] = None
        for consumer in consumers:
            changed = {}
            for key, value in consumer.inputs.items():
                if isinstance(value, (list, tuple)):
                    if any(v in replacements for v in value):
                        changed[key] = tuple(replacements.get(v, v) for v in value)
                elif value in replacements:
                    changed[key] = replacements[value]
            if changed:
                consumer.set_inputs(**changed)
                touched.append(consumer)
        for old, new in replacements.items():
            Block._copy_scope_info(old, new)
            self._replace_block_outputs(old, new)
        removed = self._remove_dead(self._roots)
        if replacements or self._created:
            for func in self.prog.functions.values():
                func._propagate_nonreplaceable_vars()
        self._replacements.clear()
        self._created.clear()
        self._roots.clear()
        return removed, [op for op in touched if op.enclosing_block is not None]

    def _replace_block_outputs(self, old: Var, new: Var) -> None:
        for block in list(old.consuming_blocks):
            if isinstance(block, Function):
                new = self._named_output(block, old, new)
            block._outputs = [new if v is old else v for v in block._outputs]
            old.consuming_blocks.remove(block)
            if block not in new.consuming_blocks:
                new.consuming_blocks.append(block)

    def _named_output(self, func: Function, old: Var, new: Var) -> Var:
        """The var that takes over function output ``old``: it must carry ``old``'s name."""
        keeps_own_name = new.op is None or new in func.outputs or new.name in func.inputs
        if keeps_own_name:
            anchor = old.op
            new = self.emit(anchor, "identity", old.name + "_out", x=new)
            Block._copy_scope_info(old, new)  # made after commit's copies; torch needs its scope
        name = old.name
        old.name = self.unique_name(name + "_replaced")
        new.name = name
        return new

    def _remove_dead(self, roots: list[Operation]) -> int:
        """Remove ``roots`` and the producers that feed only them, once they have no uses."""
        dead: dict[Block, dict[Operation, None]] = {}
        stack = list(roots)
        while stack:
            op = stack.pop()
            block = op.enclosing_block
            if block is None or op in dead.get(block, ()):
                continue
            if any(map(is_used, op.outputs)):
                continue
            dead.setdefault(block, {})[op] = None
            for var in op.get_flattened_inputs():
                var.remove_child_op(op)
                if var.op is not None and not var.child_ops:
                    stack.append(var.op)
        removed = 0
        for block, ops in dead.items():
            for op in ops:
                for inner in op.blocks:
                    _drop_block(inner)
                block.operations.remove(op)
                for internal in op.internal_inputs.values():
                    block._internal_vars.discard(internal)
                op.enclosing_block = None
                removed += 1
        return removed


def _drop_block(block: Block) -> None:
    """Detach every op of a block that goes away with its enclosing op."""
    for out in block.outputs:
        if block in out.consuming_blocks:
            out.consuming_blocks.remove(block)
    block._outputs = []
    for op in list(block.operations):
        for inner in op.blocks:
            _drop_block(inner)
        for var in op.get_flattened_inputs():
            if op in var.child_ops:
                var.remove_child_op(op)
        op.enclosing_block = None


def _dispatch(patterns: list[RewritePattern] | tuple[RewritePattern, ...]) -> dict[str, list[RewritePattern]]:
    dispatch: dict[str, list[RewritePattern]] = {}
    for pattern in patterns:
        for op_type in pattern.op_types:
            dispatch.setdefault(op_type, []).append(pattern)
    return dispatch


def _first_match(op: Operation, candidates: list[RewritePattern]) -> tuple[Match | None, list[Match]]:
    """The first pattern (in order) that matches ``op``, and the declines met before it."""
    declines: list[Match] = []
    for pattern in candidates:
        match = pattern.match(op)
        if match is None:
            continue
        if isinstance(match, Declined):
            declines.append(Match(op, pattern, match))
            continue
        return Match(op, pattern, match), declines
    return None, declines


def find_matches(
    prog: Program, patterns: list[RewritePattern] | tuple[RewritePattern, ...]
) -> tuple[list[Match], list[Match]]:
    """What :func:`apply_patterns` would rewrite first, without rewriting: every op's first
    match, and the declines of ops no pattern matched. ``prog`` is not changed. The patterns
    change ``prog`` exactly when the list of matches is not empty."""
    dispatch = _dispatch(patterns)
    matches: list[Match] = []
    declined: list[Match] = []
    for op in iter_ops(prog):
        candidates = dispatch.get(op.op_type)
        if not candidates:
            continue
        found, declines = _first_match(op, candidates)
        if found is not None:
            matches.append(found)
        else:
            declined.extend(declines)
    return matches, declined


def apply_patterns(
    prog: Program, patterns: list[RewritePattern] | tuple[RewritePattern, ...], *, pass_name: str
) -> RewriteResult:
    """Run ``patterns`` over every op of ``prog`` until nothing more matches."""
    dispatch = _dispatch(patterns)
    result = RewriteResult()
    declines: dict[Operation, list[Declined]] = {}
    rewriter = Rewriter(prog)
    worklist = [op for op in iter_ops(prog) if op.op_type in dispatch]
    while worklist:
        for op in worklist:
            if op.enclosing_block is None:
                continue
            declines.pop(op, None)
            found, declined = _first_match(op, dispatch.get(op.op_type, []))
            if found is not None:
                rewriter.anchor = op
                replacements = found.pattern.rewrite(op, found.match, rewriter)
                if not isinstance(replacements, (Var, tuple, Mapping)):
                    raise TypeError(
                        f"{type(found.pattern).__name__}.rewrite returned {replacements!r}, not the new values"
                    )
                rewriter.replace_op(op, replacements)
                rewriter.anchor = None
                result.rewritten += 1
            elif declined:
                declines[op] = [m.match for m in declined]
        removed, touched = rewriter.commit()
        result.removed_ops += removed
        revisit: dict[Operation, None] = {}
        for op in touched:
            if op.op_type in dispatch:
                revisit[op] = None
            for inner in op.blocks:
                for nested in iter_ops(inner):
                    if nested.op_type in dispatch:
                        revisit[nested] = None
        worklist = list(revisit)
    result.declined = [d for op, found in declines.items() if op.enclosing_block is not None for d in found]
    for decline in result.declined:
        logger.debug("%s left %s", pass_name, decline)
    return result


class PatternPass(AbstractGraphPass):
    """A graph pass made of rewrite patterns. Subclasses set ``name`` and ``patterns()``."""

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self.last_result: RewriteResult | None = None

    @abstractmethod
    def patterns(self) -> list[RewritePattern]:
        """The rules of this pass."""

    def apply(self, prog: Program) -> None:
        self.last_result = apply_patterns(prog, self.patterns(), pass_name=self.name)

    def find_matches(self, prog: Program) -> tuple[list[Match], list[Match]]:
        """What this pass would rewrite first, and what it would decline; ``prog`` unchanged."""
        return find_matches(prog, self.patterns())
