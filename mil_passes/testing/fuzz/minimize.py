"""Shrink a program on which a pass changes the outputs, while it fails the same way.

The failure is what :func:`mil_passes.verify.verify_program` reports on one feed: the culprit
pass, its status, and (for ``changed``) whether an output's dtype, shape or values changed, or
(for ``raised``) the exception type. :func:`minimize` edits the :class:`Recipe` (the program as
data) and keeps an edit when the failure stays the same: run only the culprit pass, drop
outputs, drop ops whose outputs nothing reads, replace an op's outputs by new inputs or by consts
(the values the op computed on the feed), drop unused inputs, make symbolic dims concrete and
shrink input dims. It stops after ``max_checks`` candidates or ``seconds``, keeping the smallest
program so far (``stopped_early`` says so). :mod:`.reproducer` writes the result as a script.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Collection, Iterator, Sequence

import numpy as np
from coremltools.converters.mil.mil import Program, Var, types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

from ...reference.interpreter import evaluate_vars
from ...verify import PassRow, VerifyError, resolve_pipeline, verify_program
from ..programs.recipe import Arg, Branch, InputDecl, Recipe, Ref, Step, function_of, replay_step
from ..strategies import INPUT_DTYPES

MAX_CHECKS = 2000
MAX_SECONDS = 300.0  # per failure: the smallest program so far is kept after this


@dataclass(frozen=True)
class Signature:
    """How a program fails: the culprit pass, its status, and the kind of failure."""

    pass_name: str
    status: str
    kinds: frozenset[str]

    def same_as(self, other: "Signature | None") -> bool:
        """``other`` fails in this pass, with this status, in one of this failure's kinds."""
        return (
            other is not None
            and other.pass_name == self.pass_name
            and other.status == self.status
            and bool(self.kinds & other.kinds)
        )

    def __str__(self) -> str:
        return f"{self.pass_name} {self.status} ({', '.join(sorted(self.kinds))})"


def signature_of(row: PassRow | None) -> Signature | None:
    """The signature of a culprit row (None for no culprit)."""
    if row is None or not row.is_culprit:
        return None
    if row.status == "raised":
        kinds = frozenset({(row.error or "").split(":", 1)[0]})
    elif row.status == "changed" and row.error is not None:
        kinds = frozenset({"interface"})
    elif row.status == "changed":
        kinds = frozenset(_change_kind(o) for o in row.outputs.values() if o.status == "changed")
    else:
        kinds = frozenset({row.status})
    return Signature(row.name, row.status, kinds)


def _change_kind(change) -> str:
    if change.dtype_before != change.dtype_after:
        return "dtype"
    return "shape" if change.shape_before != change.shape_after else "values"


@dataclass
class Minimized:
    """A shrunk failing program: its recipe, its one feed, the passes that show the failure."""

    recipe: Recipe
    feeds: dict[str, np.ndarray]
    passes: list[str]
    signature: Signature
    row: PassRow
    checks: int
    stopped_early: bool = False  # out of time or checks before no smaller candidate was left
    seconds: float = 0.0

    @property
    def non_const_ops(self) -> int:
        prog = self.recipe.build()
        return sum(1 for op in prog.functions["main"].operations if op.op_type != "const")


def failure(recipe: Recipe, passes: Sequence[str] | PassPipeline, feeds: dict) -> PassRow | None:
    """The culprit row of ``passes`` on ``recipe``'s program and ``feeds``; None when it does not
    build, the interpreter cannot run it, or no pass is a culprit."""
    try:
        recipe.build()
        return verify_program(recipe.build, passes, feeds=[feeds]).culprit
    except VerifyError:
        return None
    except Exception:  # noqa: BLE001 - a candidate coremltools' builder rejects
        return None


def minimize(
    recipe: Recipe,
    pipeline: str | PassPipeline | Sequence[str],
    feeds_list: Sequence[dict[str, np.ndarray]],
    *,
    max_checks: int = MAX_CHECKS,
    seconds: float = MAX_SECONDS,
) -> Minimized | None:
    """Shrink ``recipe`` while ``pipeline`` fails on it the same way, for at most ``max_checks``
    candidates and ``seconds``; None if it does not fail."""
    resolved = resolve_pipeline(pipeline)
    for feeds in feeds_list:
        row = failure(recipe, resolved, feeds)
        if row is not None:
            break
    else:
        return None
    shrinker = _Shrinker(recipe, dict(feeds), resolved, row, max_checks, time.monotonic() + seconds)
    started = time.monotonic()
    shrinker.run()
    return Minimized(
        shrinker.recipe,
        shrinker.feeds,
        shrinker.passes,
        shrinker.signature,
        shrinker.row,
        shrinker.checks,
        shrinker.stopped_early,
        time.monotonic() - started,
    )


def _culprit_pipeline(pipeline: PassPipeline, passes: list[str]) -> PassPipeline:
    result = PassPipeline(pass_names=passes, pipeline_name="minimized")
    result._pass_options = dict(getattr(pipeline, "_pass_options", {}))
    return result


class _Shrinker:
    def __init__(
        self, recipe: Recipe, feeds: dict, pipeline: PassPipeline, row: PassRow, max_checks: int, deadline: float
    ):
        self.recipe, self.feeds, self.row = recipe, feeds, row
        self.pipeline = pipeline
        self.passes = list(pipeline.passes[: row.index])
        signature = signature_of(row)
        assert signature is not None, "minimize() starts from a culprit row"
        self.signature = signature
        self.max_checks = max_checks
        self.deadline = deadline
        self.checks = 0
        self.stopped_early = False  # a candidate went untried: out of checks or time

    def accept(self, recipe: Recipe, feeds: dict, passes: list[str] | None = None) -> bool:
        if self.checks >= self.max_checks or time.monotonic() > self.deadline:
            self.stopped_early = True
            return False
        self.checks += 1
        passes = self.passes if passes is None else passes
        row = failure(recipe, _culprit_pipeline(self.pipeline, passes), feeds)
        if row is None or not self.signature.same_as(signature_of(row)):
            return False
        self.recipe, self.feeds, self.passes, self.row = recipe, feeds, passes, row
        return True

    def run(self) -> None:
        self.accept(self.recipe, self.feeds, self.passes[-1:])
        changed = True
        while changed and not self.stopped_early:
            changed = any(self.accept(recipe, feeds) for recipe, feeds in self.candidates())

    def candidates(self) -> Iterator[tuple[Recipe, dict]]:
        """Smaller programs, the biggest cuts first (each is tried until one is accepted)."""
        recipe, feeds = self.recipe, self.feeds
        for i in range(len(recipe.outputs)):
            if len(recipe.outputs) > 1:
                yield replace(recipe, outputs=recipe.outputs[:i] + recipe.outputs[i + 1 :]), feeds
        layout = _Layout(recipe)
        yield from _dead_steps_removed(recipe, layout, feeds)
        values = layout.values(feeds)
        for j in reversed(range(len(recipe.steps))):
            for by_input in (True, False):
                candidate = _step_replaced(recipe, layout, j, values, by_input)
                if candidate is not None:
                    yield candidate[0], {**feeds, **candidate[1]}
        yield from _inputs_dropped(recipe, layout, feeds)
        yield from _inputs_shrunk(recipe, feeds)


class _Layout:
    """Where each top-level step's vars sit in the replay's var list (inputs first)."""

    def __init__(self, recipe: Recipe):
        self.prog = Program()
        self.ranges: list[tuple[int, int]] = []
        with function_of(recipe.inputs, recipe.opset) as (func, vals):
            for step in recipe.steps:
                start = len(vals)
                replay_step(step, vals)
                self.ranges.append((start, len(vals)))
            func.set_outputs([vals[ref.index] for ref in recipe.outputs])
        self.prog.add_function("main", func)
        self.vals: list[Var] = vals
        self.used = _refs_used(recipe)

    def values(self, feeds: dict) -> dict[int, Any] | None:
        try:
            with np.errstate(all="ignore"):
                env = evaluate_vars(self.prog, feeds)
        except Exception:  # noqa: BLE001 - values are then unknown
            return None
        return {i: env[var] for i, var in enumerate(self.vals) if var in env}


def _refs_used(recipe: Recipe) -> set[int]:
    used = {ref.index for ref in recipe.outputs}

    def visit(arg) -> None:
        if isinstance(arg, Ref):
            used.add(arg.index)
        elif isinstance(arg, tuple):
            for item in arg:
                visit(item)

    def steps(items) -> None:
        for step in items:
            for arg in step.args.values():
                visit(arg)
            for branch in step.branches or ():
                steps(branch.steps)
                used.add(branch.output.index)

    steps(recipe.steps)
    return used


def _rebuilt(
    recipe: Recipe,
    layout: _Layout,
    *,
    drop: Collection[int] = frozenset(),
    replaced: dict[int, Any] | None = None,
    new_inputs: Sequence[tuple[int, InputDecl]] = (),
    keep_inputs: Sequence[int] | None = None,
) -> Recipe | None:
    """``recipe`` without the steps ``drop``; var ``i`` in ``replaced`` becomes that const value,
    and each ``(i, decl)`` of ``new_inputs`` a new input. None when a dropped var is still read."""
    replaced = dict(replaced or {})
    keep_inputs = range(len(recipe.inputs)) if keep_inputs is None else keep_inputs
    index: dict[int, Arg] = {}
    count = 0
    for i in keep_inputs:
        index[i], count = Ref(count), count + 1
    for i, _ in new_inputs:
        index[i], count = Ref(count), count + 1
    for i, value in replaced.items():
        index[i] = value
    for j, (start, end) in enumerate(layout.ranges):
        if j in drop:
            continue
        for k in range(start, end):
            index.setdefault(k, Ref(count + k - start))
        count += end - start

    def arg(value):
        if isinstance(value, Ref):
            return index[value.index]
        if isinstance(value, tuple):
            return tuple(arg(item) for item in value)
        return value

    def step(s: Step) -> Step:
        branches = None
        if s.branches is not None:
            true_branch, false_branch = (Branch(tuple(step(x) for x in b.steps), arg(b.output)) for b in s.branches)
            branches = (true_branch, false_branch)
        return Step(s.op_type, s.name, {key: arg(value) for key, value in s.args.items()}, branches)

    try:
        steps = [step(s) for j, s in enumerate(recipe.steps) if j not in drop]
        outputs = [arg(ref) for ref in recipe.outputs]
    except KeyError:
        return None
    if not all(isinstance(ref, Ref) for ref in outputs):
        return None
    inputs = tuple(recipe.inputs[i] for i in keep_inputs) + tuple(decl for _, decl in new_inputs)
    return Recipe(recipe.opset, inputs, steps, outputs)


def _dead_steps_removed(recipe: Recipe, layout: _Layout, feeds: dict) -> Iterator[tuple[Recipe, dict]]:
    dead = {j for j, (start, end) in enumerate(layout.ranges) if not layout.used & set(range(start, end))}
    if dead:
        candidate = _rebuilt(recipe, layout, drop=dead)
        if candidate is not None:
            yield candidate, feeds


def _step_replaced(recipe: Recipe, layout: _Layout, j: int, values: dict | None, by_input: bool):
    """Step ``j`` dropped, each of its vars read elsewhere a new input (``by_input``) or a const."""
    if values is None:
        return None
    start, end = layout.ranges[j]
    read = sorted(layout.used & set(range(start, end)))
    if any(i not in values for i in read):
        return None
    names = {decl.name for decl in recipe.inputs}
    new_inputs, feeds, consts = [], {}, {}
    for i in read:
        value = np.asarray(values[i])
        dtype = _dtype_name(layout.vals[i])
        if by_input and dtype in INPUT_DTYPES and value.ndim > 0:
            name = _fresh(f"x{len(names)}", names)
            new_inputs.append((i, InputDecl(dtype, tuple(int(d) for d in value.shape), name)))
            feeds[name] = value
        else:
            consts[i] = value
    if by_input and not new_inputs:
        return None
    candidate = _rebuilt(recipe, layout, drop={j}, replaced=consts, new_inputs=new_inputs)
    return None if candidate is None else (candidate, feeds)


def _dtype_name(var: Var) -> str:
    return types.builtin_to_string(var.dtype)


def _fresh(base: str, taken: set[str]) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _inputs_dropped(recipe: Recipe, layout: _Layout, feeds: dict) -> Iterator[tuple[Recipe, dict]]:
    for i, decl in enumerate(recipe.inputs):
        if i in layout.used:
            continue
        keep = [k for k in range(len(recipe.inputs)) if k != i]
        candidate = _rebuilt(recipe, layout, keep_inputs=keep)
        if candidate is not None:
            yield candidate, {k: v for k, v in feeds.items() if k != decl.name}


def _inputs_shrunk(recipe: Recipe, feeds: dict) -> Iterator[tuple[Recipe, dict]]:
    """Symbolic dims made the fed size; then each dim of each input halved, then 1."""
    sizes: dict[int | str, int] = {
        d: feeds[decl.name].shape[a] for decl in recipe.inputs for a, d in enumerate(decl.shape) if isinstance(d, str)
    }
    if sizes:
        concrete = tuple(replace(decl, shape=tuple(sizes.get(d, d) for d in decl.shape)) for decl in recipe.inputs)
        yield replace(recipe, inputs=concrete), feeds
    for i, decl in enumerate(recipe.inputs):
        for axis, dim in enumerate(decl.shape):
            if isinstance(dim, str) or dim <= 1:
                continue
            for size in dict.fromkeys((dim // 2, 1)):
                shape = decl.shape[:axis] + (size,) + decl.shape[axis + 1 :]
                inputs = recipe.inputs[:i] + (replace(decl, shape=shape),) + recipe.inputs[i + 1 :]
                value = np.take(feeds[decl.name], np.arange(size), axis=axis)
                yield replace(recipe, inputs=inputs), {**feeds, decl.name: value}


def expected_outputs(recipe: Recipe, feeds: dict) -> dict[str, np.ndarray]:
    """The outputs of ``recipe``'s program on ``feeds`` under the reference interpreter."""
    from ...reference import evaluate

    with np.errstate(all="ignore"):
        return evaluate(recipe.build(), feeds)
