"""Grow a program forward, one op at a time, while recording the recipe that rebuilds it.

Each op is built right away with coremltools' builder (so its output type is coremltools' own
inference, and an op it would reject fails here, at draw time) and recorded as a :class:`Step`.
The op table and the pattern plants add ops only through :meth:`Grower.emit`.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic
from hypothesis import reject, strategies as st

from .recipe import Branch, Ref, Step, replay_step
from .type_domains import accepted_dtypes

MAX_SYMBOL = 4  # the largest size a symbolic dim takes in drawn feeds
MAX_ELEMENTS = 256  # no drawn tensor is larger (symbolic dims counted at MAX_SYMBOL)

FLOAT = ("fp32", "fp16")
NUMERIC = FLOAT + ("int32",)
BASIC = NUMERIC + ("bool",)
SMALL_INT = ("int8", "uint8", "int16", "uint16")


def dtype_of(var: Var) -> str:
    """The dtype name of a tensor or scalar var (``"fp32"``, ``"bool"``, …)."""
    return types.builtin_to_string(var.dtype)


def shape_of(var: Var) -> tuple:
    """The shape of a var, ``()`` for a scalar."""
    return tuple(var.shape) if types.is_tensor(var.sym_type) else ()


def is_static(dim: Any) -> bool:
    return not is_symbolic(dim)


def numel(shape: tuple) -> int:
    """Elements of ``shape``, symbolic dims counted at :data:`MAX_SYMBOL`."""
    return int(np.prod([int(d) if is_static(d) else MAX_SYMBOL for d in shape], dtype=np.int64))


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """The broadcast of two shapes, or None unless each pair of dims is equal or holds a 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if is_static(x) and x == 1:
            out.append(y)
        elif (is_static(y) and y == 1) or x == y:
            out.append(x)
        else:
            return None
    return tuple(reversed(out))


class Grower:
    """The program being drawn: live vars, visible scopes, and the recorded steps."""

    def __init__(
        self,
        draw: Callable,
        opset: Any,
        vals: list[Var],
        const: Callable[[str, tuple], Any],
        name_pool: tuple[str, ...] = (),
        table: tuple = (),
    ):
        self.draw = draw
        self.opset = opset
        self.vals = vals
        self.const_strategy = const
        self.name_pool = name_pool
        self.scopes: list[list[Ref]] = [[Ref(i) for i in range(len(vals))]]
        self.blocks: list[list[Step]] = [[]]
        self.used: set[Ref] = set()
        self.shape_refs: set[Ref] = set()  # outputs of `shape`: valid fill/reshape targets
        self.keep: list[Ref] = []  # plant results that should stay live
        self.table = table  # the op-table entries to draw from
        self._count = 0

    # -- what exists --------------------------------------------------------------------------
    @property
    def ios17(self) -> bool:
        return self.opset >= ct.target.iOS17

    def dtypes(self, op_type: str, input_name: str = "x") -> tuple[str, ...]:
        """The dtypes ``op_type``'s input ``input_name`` accepts in this program's opset."""
        return accepted_dtypes(op_type, input_name, self.opset)

    @property
    def steps(self) -> list[Step]:
        return self.blocks[0]

    def var(self, ref: Ref) -> Var:
        return self.vals[ref.index]

    def visible(self) -> list[Ref]:
        return [ref for scope in self.scopes for ref in scope]

    def outer(self) -> list[Ref]:
        """Vars visible from the innermost block that it did not make itself."""
        return [ref for scope in self.scopes[:-1] for ref in scope]

    def local(self) -> list[Ref]:
        return list(self.scopes[-1])

    def pick(self, accepts: Callable[[Var], bool], among: list[Ref] | None = None) -> Ref | None:
        """A visible var for which ``accepts(var)`` holds, or None."""
        refs = self.visible() if among is None else among
        fits = [ref for ref in refs if accepts(self.var(ref))]
        return self.choose(fits[::-1]) if fits else None  # shrinks toward the newest var

    # -- drawing (indices from cached integer strategies: cheap, and they shrink to the first) -
    def choose(self, options):
        """One of ``options``."""
        options = tuple(options)
        return options[self.draw(st.integers(0, len(options) - 1))]

    def chance(self, n: int) -> bool:
        """True one time in ``n`` (shrinks to False)."""
        return self.draw(st.integers(0, n - 1)) == n - 1

    def shuffle(self, items) -> list:
        """``items`` in a drawn order (shrinks to the given order)."""
        rest, out = list(items), []
        while rest:
            out.append(rest.pop(self.draw(st.integers(0, len(rest) - 1))))
        return out

    def subset(self, items, min_size: int, max_size: int) -> list:
        """Between ``min_size`` and ``max_size`` distinct items, in their given order."""
        items = list(items)
        size = self.draw(st.integers(min_size, max_size))
        picked = set(self.shuffle(range(len(items)))[:size])
        return [item for i, item in enumerate(items) if i in picked]

    def const(self, dtype: str, shape: tuple) -> np.ndarray:
        """A drawn const value of ``dtype`` and ``shape``."""
        return self.const_strategy(dtype, tuple(int(d) for d in shape))

    def ints(self, values, dtype=np.int32) -> np.ndarray:
        return np.asarray(values, dtype=dtype)

    def maybe(self, body: Callable[[], Any], chances: int = 1) -> bool:
        """Run ``body`` or not (each chance about even), as one optional element: shrinking
        deletes its draws as a whole, so the draws after it keep their meaning."""
        optional = st.lists(_side_effect(body), max_size=1)
        return any(self.draw(optional) for _ in range(chances))

    def name(self, op_type: str) -> str:
        """A unique name, or now and then one from the name pool (names then collide)."""
        self._count += 1
        if self.name_pool and self.chance(8):
            return self.choose(self.name_pool)
        return f"{op_type}_{self._count}"

    # -- building -----------------------------------------------------------------------------
    def emit(self, op_type: str, args: dict[str, Any], name: str | None = None) -> list[Ref]:
        """Build the op now, record it, and return refs to its outputs."""
        step = Step(op_type, name or self.name(op_type), args)
        start = len(self.vals)
        try:
            replay_step(step, self.vals)
        except Exception as error:
            # coremltools' value inference breaks on some folded values (a 1-element tensor
            # folded to a Python float, then np.where or a reduction trips on it): draw again.
            # A type check or type inference that fails is the generator's defect: raised.
            if _in_value_inference(error) and any(self.var(ref).val is not None for ref in _refs_in(args)):
                reject()
            raise
        return self._record(step, start)

    def emit_cond(self, pred: Ref, true_fn: Callable[[], Ref], false_fn: Callable[[Var], Ref]) -> list[Ref]:
        """A ``cond``: ``true_fn`` grows the true block; ``false_fn(true_output)`` the false one."""
        name = self.name("cond")
        branches: list[Branch] = []
        outputs: list[Var] = []

        def grow(fn):
            def body():
                self.scopes.append([])
                self.blocks.append([])
                try:
                    out = fn(outputs[0]) if outputs else fn()
                finally:
                    self.scopes.pop()
                    steps = self.blocks.pop()
                branches.append(Branch(tuple(steps), out))
                self.used.add(out)
                outputs.append(self.var(out))
                return self.var(out)

            return body

        result = mb.cond(pred=self.var(pred), _true_fn=grow(true_fn), _false_fn=grow(false_fn), name=name)
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        start = len(self.vals)
        self.vals.extend(results)
        return self._record(Step("cond", name, {"pred": pred}, (branches[0], branches[1])), start)

    def _record(self, step: Step, start: int) -> list[Ref]:
        self.blocks[-1].append(step)
        self.used.update(_refs_in(step.args))
        refs = [Ref(i) for i in range(start, len(self.vals))]
        self.scopes[-1].extend(refs)
        if step.op_type == "shape":
            self.shape_refs.update(refs)
        return refs


def _in_value_inference(error: BaseException) -> bool:
    """``error`` was raised inside an op's ``value_inference`` (coremltools folding a value)."""
    return any(frame.name == "value_inference" for frame in traceback.extract_tb(error.__traceback__))


def _side_effect(body: Callable[[], Any]) -> st.SearchStrategy[bool]:
    return st.builds(lambda: body() or True)


def _refs_in(args: dict[str, Any]) -> set[Ref]:
    found: set[Ref] = set()
    for value in args.values():
        items = value if isinstance(value, tuple) else (value,)
        found.update(item for item in items if isinstance(item, Ref))
    return found
