"""Hypothesis strategies for MIL: dtypes, shapes, tensor types, arrays and feeds, and programs.

``programs()`` draws random valid programs grown forward from the op table (``op_table.py``),
with the passes' patterns planted in (``plants.py``). It returns a :class:`DrawnProgram`: a
recipe whose ``build()`` makes a fresh, identical Program each call (what ``check_pass``
needs), and feeds for it. Its ``repr`` is the program in MIL text form with its feeds, which
is what hypothesis prints for a shrunk failing case.
"""

from __future__ import annotations

from typing import Any, Iterable

import coremltools as ct
import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic
from hypothesis import strategies as st

from .programs.grower import MAX_SYMBOL, SMALL_INT, Grower, shape_of
from .programs.growth import choose_outputs, grow_program
from .programs.ops import OP_TABLE
from .plants.default import DEFAULT_PLANTS
from .plants.passes import PLANTS
from .programs.recipe import DTYPES, DrawnProgram, InputDecl, Recipe, TensorType, function_of

INPUT_DTYPES = ("fp32", "fp16", "int32", "bool")
SYMBOLS = ("S0", "S1")
NAME_POOL = ("t", "t_bool", "y", "x0")
OP_TABLE_TYPES = tuple(entry.op_type for entry in OP_TABLE)
OPSETS = (ct.target.iOS15, ct.target.iOS16, ct.target.iOS17, ct.target.iOS18)

__all__ = [
    "dtypes",
    "shapes",
    "tensor_types",
    "arrays",
    "feeds_for",
    "feeds",
    "programs",
    "DrawnProgram",
    "TensorType",
    "plant_names",
]


# -- tensors and feeds ------------------------------------------------------------------------
def dtypes(opset: Any = ct.target.iOS17, *, inputs: bool = True) -> st.SearchStrategy[str]:
    """Dtype names: those a function input can have, or (``inputs=False``) every dtype that
    ``opset`` can hold (iOS17+ adds int8/uint8/int16/uint16, reached through ``cast``)."""
    names = INPUT_DTYPES if inputs or opset < ct.target.iOS17 else INPUT_DTYPES + SMALL_INT
    return st.sampled_from(names)


@st.composite
def shapes(
    draw,
    *,
    min_rank: int = 1,
    max_rank: int = 4,
    max_side: int = 6,
    max_elements: int = 64,
    symbols: tuple[str, ...] = (),
) -> tuple[int | str, ...]:
    """A shape; with ``symbols``, some dims are those symbols (counted at ``MAX_SYMBOL``)."""
    dims: list[int | str] = []
    budget = max_elements
    for _ in range(draw(st.integers(min_rank, max_rank))):
        if symbols and budget >= MAX_SYMBOL and draw(st.integers(0, 2)) == 0:
            dims.append(draw(st.sampled_from(symbols)))
            budget //= MAX_SYMBOL
        else:
            side = draw(st.integers(1, max(1, min(max_side, budget))))
            dims.append(side)
            budget = max(1, budget // side)
    return tuple(dims)


def tensor_types(
    opset: Any = ct.target.iOS17, *, symbols: tuple[str, ...] = (), **shape_options: Any
) -> st.SearchStrategy[TensorType]:
    """Input tensor types: a dtype from :func:`dtypes` and a shape from :func:`shapes`."""
    return st.builds(TensorType, dtypes(opset), shapes(symbols=symbols, **shape_options))


def _special(dtype: np.dtype) -> tuple:
    if np.issubdtype(dtype, np.floating):
        finfo = np.finfo(dtype)
        return (
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            np.inf,
            -np.inf,
            np.nan,
            float(finfo.max),
            -float(finfo.max),
            float(finfo.smallest_subnormal),
        )
    if np.issubdtype(dtype, np.integer):
        iinfo = np.iinfo(dtype)
        return (0, 1, int(iinfo.max), int(iinfo.min))
    return (False, True)


@st.composite
def arrays(draw, dtype: str, shape: tuple[int, ...], *, special: bool = True, start: int = 0) -> np.ndarray:
    """An array of ``dtype`` (a MIL dtype name) and ``shape``.

    A quarter hold ``start``, ``start + 1``, … in order (what a failing case shrinks to: each
    moved element shows where it came from; give each array its own ``start``); the rest are
    random small values from a drawn seed, and with ``special`` a quarter of all arrays also
    hold ±0, ±inf, NaN, the extremes and a subnormal.
    """
    np_dtype = np.dtype(DTYPES[dtype])
    mode = draw(st.integers(0, 3 if special else 2))
    size = int(np.prod(shape, dtype=np.int64))
    if mode == 0:
        values: np.ndarray = np.arange(start, start + size)
        if np_dtype == np.bool_:
            values = values % 2 == 1
        return values.astype(np_dtype).reshape(shape)  # small ints wrap around
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if np_dtype == np.bool_:
        values = rng.integers(0, 2, size) == 1
    elif np.issubdtype(np_dtype, np.floating):
        values = rng.standard_normal(size) * 4
    else:
        values = rng.integers(0 if np.issubdtype(np_dtype, np.unsignedinteger) else -8, 10, size)
    values = values.astype(np_dtype)
    if mode == 3:
        extremes = np.array(_special(np_dtype), dtype=np_dtype)
        where = rng.random(size) < 0.3
        values[where] = rng.choice(extremes, int(where.sum()))
    return values.reshape(shape)


@st.composite
def feeds_for(draw, types_by_name: dict[str, TensorType], *, sizes: dict[str, int] | None = None):
    """Feeds for inputs of the given types; symbols get ``sizes`` or sizes 1..MAX_SYMBOL."""
    chosen = dict(sizes or {})
    result = {}
    for index, (name, tensor_type) in enumerate(types_by_name.items()):
        for symbol in tensor_type.symbols:
            if symbol not in chosen:
                chosen[symbol] = draw(st.integers(1, MAX_SYMBOL))
        shape = tuple(chosen[d] if isinstance(d, str) else d for d in tensor_type.shape)
        result[name] = draw(arrays(tensor_type.dtype, shape, start=100 * index))
    return result


def feeds(prog: Program, *, function: str = "main", sizes: dict[str, int] | None = None):
    """Feeds for ``prog``'s inputs (symbolic dims get ``sizes[str(dim)]`` or a drawn size)."""
    inputs = prog.functions[function].inputs
    typed = {
        name: TensorType(
            types.builtin_to_string(var.dtype),
            tuple(str(d) if is_symbolic(d) else int(d) for d in shape_of(var)),
        )
        for name, var in inputs.items()
    }
    return feeds_for(typed, sizes=sizes)


# -- programs ---------------------------------------------------------------------------------
def plant_names(plant: bool | Iterable[str] | None) -> tuple[str, ...]:
    """The plants ``programs(plant=...)`` uses: all (True), none (False/None), or those named."""
    if plant is True:
        return tuple(PLANTS)
    if not plant:
        return ()
    names = tuple(name.split("::")[-1] for name in plant)
    unknown = [n for n in names if n not in PLANTS and n not in DEFAULT_PLANTS]
    if unknown:
        raise ValueError(f"no plant for pass {unknown[0]!r}; plants exist for: {', '.join(PLANTS)}")
    return names


def programs(
    opset: Any = ct.target.iOS17,
    *,
    max_ops: int = 10,
    symbolic: bool = True,
    nested: bool = True,
    name_pool: tuple[str, ...] | None = NAME_POOL,
    plant: bool | Iterable[str] | None = True,
    max_outputs: int = 4,
    ops: Iterable[str] | None = None,
) -> st.SearchStrategy[DrawnProgram]:
    """Random valid programs of up to ``max_ops`` ops from the table (about half that on
    average; plants add a few more).

    ``symbolic``: a third of the programs get symbolic input dims (and a second feed with
    other sizes); ``nested``: ``cond`` blocks (in about a quarter), nested up to two deep;
    ``name_pool``: one op in eight takes a name from this pool, so names collide; ``plant``:
    each pass's pattern goes into about 60% of the programs; ``max_outputs``: unused vars are
    the outputs, plant results first, and in a third of the programs also a var used inside;
    ``ops``: draw only these op types from the table (plants and ``cond`` still add theirs).
    """
    if opset not in OPSETS:
        raise ValueError(f"opset must be one of iOS15..iOS18, got {opset}")
    wanted = set(OP_TABLE_TYPES if ops is None else ops)
    unknown = sorted(wanted - set(OP_TABLE_TYPES))
    if unknown or not wanted:
        raise ValueError(f"no op-table entry for {unknown}; the table has: {', '.join(OP_TABLE_TYPES)}")
    table = tuple(entry for entry in OP_TABLE if entry.op_type in wanted)
    options = (max_ops, symbolic, nested, tuple(name_pool or ()), plant_names(plant), max_outputs, table)
    return _programs(opset, *options)


@st.composite
def _input_decls(draw, use_symbols: bool) -> tuple[InputDecl, ...]:
    symbols = SYMBOLS if use_symbols else ()
    first = draw(shapes(symbols=symbols))
    decls = []
    for i in range(draw(st.integers(1, 3))):
        shape = first if i == 0 or draw(st.booleans()) else draw(shapes(symbols=symbols))
        dtype = draw(st.sampled_from(("fp32", "fp32", *INPUT_DTYPES[1:])))
        decls.append(InputDecl(dtype, shape, f"x{i}"))
    return tuple(decls)


@st.composite
def _programs(draw, opset, max_ops, symbolic, nested, name_pool, plants, max_outputs, table) -> DrawnProgram:
    inputs = draw(_input_decls(symbolic and draw(st.booleans())))
    with function_of(inputs, opset) as (func, vals):
        consts = iter(range(-10, -(10**6), -10))  # consts below 0, feeds from 0: never alike

        def const(dtype: str, shape: tuple) -> np.ndarray:
            return draw(arrays(dtype, shape, start=next(consts)))

        g = Grower(draw, opset, vals, const, name_pool, table)
        planted = grow_program(g, max_ops, nested, plants)
        outputs = choose_outputs(g, len(inputs), max_outputs)
        func.set_outputs([g.var(ref) for ref in outputs])
    recipe = Recipe(opset, inputs, g.steps, outputs)
    typed = {d.name: d for d in inputs}
    feed_list = [draw(feeds_for(typed))]
    first = feed_list[0]
    sizes = {d: n for decl in inputs for d, n in zip(decl.shape, first[decl.name].shape) if isinstance(d, str)}
    if sizes:  # a second feed with every symbolic size changed (1→2→3→4→1)
        feed_list.append(draw(feeds_for(typed, sizes={d: n % MAX_SYMBOL + 1 for d, n in sizes.items()})))
    return DrawnProgram(recipe, feed_list, tuple(planted))
