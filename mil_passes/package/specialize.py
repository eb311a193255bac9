"""``specialize``: a model with flexible inputs (``RangeDim``) fixed to the shapes given.

One shape for an input fixes it: the model's function takes that shape, the shape arithmetic
folds (``webnn::fold_shape_ops``, then ``common::const_elimination`` under its guard, then dead
code goes), and the description says the one shape. Several shapes make the input
``EnumeratedShapes`` (the first is the default): the program is kept, the description lists the
shapes. Nothing else of the interface changes (names, types, other inputs, outputs, states,
metadata). Apple runs a ``RangeDim`` model on the Neural Engine only at its default shape
(developer.apple.com/forums/thread/724930) and recommends ``EnumeratedShapes`` (coremltools'
flexible-inputs guide): the cure of ``ane-range-shape``.

Bad requests raise :class:`SpecializeError` (a :class:`PackageError`: one line, exit 2) before
anything is written: an unknown input, a state, an input that is not flexible, a shape of the
wrong rank or outside the input's range (or not one of its enumerated shapes). The write is
whole or nothing, as ``optimize``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from coremltools import proto
from coremltools.converters.mil.mil import Program

from ..ir import iter_ops
from ..runner import run_pass
from .atomic import replacing
from .files import PackageError
from .io import Package, build_program, read, write_new
from .optimize import check_paths

Shape = tuple[int, ...]
#: What runs after the inputs are fixed: the shape arithmetic folds, then what it made constant
#: (a causal mask's range_1d, fill, band_part) under const_elimination's guard, and what only
#: they read goes.
FOLDING = (
    "webnn::fold_shape_ops",
    "webnn::guard_const_elimination",
    "common::const_elimination",
    "common::dead_code_elimination",
)


class SpecializeError(PackageError):
    """A shape request the model cannot take (said in one line)."""


@dataclass
class SpecializeRun:
    """What ``specialize`` did: the paths, each input's shapes, the program's ops before and
    after (how many), and the wall time."""

    source: Path
    output: Path
    shapes: dict[str, list[Shape]]
    ops_before: int
    ops_after: int
    seconds: float


def parse_shape(text: str) -> tuple[str, Shape]:
    """``NAME=D0,D1,…`` as ``(NAME, (D0, D1, …))``; :class:`SpecializeError` if it is not one."""
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 1 for d in shape):
        raise SpecializeError(f"--shape '{text}': write NAME=D0,D1,… with sizes of at least 1")
    return name, shape


def shapes_by_input(texts: Sequence[str]) -> dict[str, list[Shape]]:
    """The ``--shape`` options grouped by input, in the order given (a repeat counted once)."""
    shapes: dict[str, list[Shape]] = {}
    for text in texts:
        name, shape = parse_shape(text)
        if shape not in shapes.setdefault(name, []):
            shapes[name].append(shape)
    return shapes


def allowed(feature, shape: Shape) -> str | None:
    """Why ``shape`` is not a shape the described input ``feature`` takes (None: it is)."""
    array = feature.type.multiArrayType
    if array.HasField("shapeRange"):
        ranges = [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges]
        if len(shape) != len(ranges):
            return f"has rank {len(ranges)}, not {len(shape)}"
        for axis, (size, (lower, upper)) in enumerate(zip(shape, ranges)):
            if size < lower or (upper >= 0 and size > upper):
                return f"takes {lower}–{'any' if upper < 0 else upper} on axis {axis}, not {size}"
        return None
    enumerated = [tuple(s.shape) for s in array.enumeratedShapes.shapes]
    if enumerated and len(shape) != len(enumerated[0]):
        return f"has rank {len(enumerated[0])}, not {len(shape)}"
    if shape not in enumerated:
        return f"takes only the shapes {', '.join('x'.join(map(str, s)) for s in enumerated)}"
    return None


def check_request(spec, shapes: Mapping[str, Sequence[Shape]]) -> None:
    """Raise :class:`SpecializeError` for the first shape the model's description refuses."""
    if not shapes:
        raise SpecializeError("give at least one --shape NAME=D0,D1,…")
    features = {feature.name: feature for feature in spec.description.input}
    states = {feature.name for feature in spec.description.state}
    for name, wanted in shapes.items():
        if name in states:
            raise SpecializeError(f"input '{name}' is a state; states have one shape already")
        feature = features.get(name)
        if feature is None:
            known = ", ".join(sorted(features)) or "none"
            raise SpecializeError(f"the model has no input '{name}' (inputs: {known})")
        array = feature.type.multiArrayType
        if not feature.type.HasField("multiArrayType") or array.WhichOneof("ShapeFlexibility") is None:
            raise SpecializeError(f"input '{name}' is not flexible: it has one shape already")
        for shape in wanted:
            problem = allowed(feature, shape)
            if problem is not None:
                raise SpecializeError(f"input '{name}' {problem} ({'x'.join(map(str, shape))} asked)")


def specialized_spec(spec, shapes: Mapping[str, Sequence[Shape]]):
    """A copy of ``spec`` whose described inputs take ``shapes`` (one: fixed, several:
    enumerated), and whose function inputs of one shape have it."""
    result = proto.Model_pb2.Model()
    result.CopyFrom(spec)
    for feature in result.description.input:
        wanted = shapes.get(feature.name)
        if not wanted:
            continue
        array = feature.type.multiArrayType
        array.ClearField("ShapeFlexibility")
        del array.shape[:]
        array.shape.extend(wanted[0])
        if len(wanted) > 1:
            for shape in wanted:
                array.enumeratedShapes.shapes.add().shape.extend(shape)
    fixed = {name: wanted[0] for name, wanted in shapes.items() if len(wanted) == 1}
    for function in result.mlProgram.functions.values():
        for named in function.inputs:
            if named.name in fixed:
                dims = named.type.tensorType.dimensions
                for dim, size in zip(dims, fixed[named.name]):
                    dim.ClearField("dimension")
                    dim.constant.size = size
    return result


def specialize_program(
    package: Package, shapes: Mapping[str, Sequence[Shape]]
) -> tuple[Program, "proto.Model_pb2.Model"]:
    """The program of ``package`` with ``shapes`` applied and its shape arithmetic folded, and
    the protobuf whose description it is written with."""
    check_request(package.spec, shapes)
    spec = specialized_spec(package.spec, shapes)
    program = build_program(spec, package)
    for name in FOLDING:
        run_pass(program, name)
    program.validate()
    return program, spec


def specialize_package(
    source: str | Path,
    output: str | Path,
    shapes: Mapping[str, Sequence[Shape]],
    *,
    force: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> SpecializeRun:
    """Read ``source``, fix its flexible inputs to ``shapes``, write ``output``; nothing is
    written unless every step succeeds (the package is written beside ``output``, read back,
    then renamed into place)."""
    start = time.perf_counter()
    step = on_step or (lambda label: None)  # noqa: E731
    source, output = Path(source), Path(output)
    check_paths(source, output, force=force)
    step("read")
    package = read(source)
    ops_before = _op_total(package.program)
    step("specialize")
    program, spec = specialize_program(package, shapes)
    with replacing(output) as staged:
        step("write")
        write_new(program, staged, like=spec)
        step("check")
        written = read(staged)
    return SpecializeRun(
        source,
        output,
        {name: list(wanted) for name, wanted in shapes.items()},
        ops_before,
        _op_total(written.program),
        time.perf_counter() - start,
    )


def _op_total(program: Program) -> int:
    return sum(1 for op in iter_ops(program) if op.op_type != "const")
