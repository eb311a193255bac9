"""Evaluate a pymil Program with numpy: the numeric truth of this package on Linux.

The program is never mutated (no ``deepcopy`` either: it recurses too deep on ~1,000-op
programs). Values are kept per Var in a dict; nested blocks share it. Each op is computed by a
hand-written kernel (``kernels/``) when there is one, else by the op's own coremltools
``value_inference`` run on a read-only stand-in of the op. Results are cast to the declared
dtype and their shapes are checked against the declared types.
"""

from __future__ import annotations

import functools
import weakref

from collections.abc import Mapping
from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Block, Operation, Program, Var, types
from coremltools.converters.mil.mil.var import InternalVar
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic

from ..ir import input_vars, iter_blocks
from .decoded import DECODED_OPS, decoded
from .errors import UnsupportedOpError
from .kernels import KERNELS, load_families
from .kernels.state import StateCell

load_families()

MAX_LOOP_ITERATIONS = 1_000_000


def describe_type(var: Var) -> str:
    """MIL's text form of a var's type, e.g. ``tensor<fp32, [1, is0, 8]>``."""
    sym_type = var.sym_type
    if types.is_state(sym_type):
        dims = ", ".join(str(d) for d in var.shape)
        return f"state<tensor<{types.builtin_to_string(var.dtype)}, [{dims}]>>"
    if types.is_tensor(sym_type):
        dims = ", ".join(str(d) for d in var.shape)
        return f"tensor<{types.builtin_to_string(var.dtype)}, [{dims}]>"
    return types.builtin_to_string(sym_type) if sym_type is not None else "unknown"


def numpy_dtype(var: Var) -> np.dtype:
    """The numpy dtype of a tensor or scalar var."""
    return np.dtype(types.nptype_from_builtin(var.dtype))


def evaluate(
    prog: Program,
    inputs: Mapping[str, Any],
    function: str = "main",
    *,
    states: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Run ``function`` of ``prog`` on ``inputs``; return its outputs keyed by output name.

    ``states`` (a stateful function's state inputs, iOS18): each state's value by name, an array
    (read, not changed) or a :class:`~mil_passes.reference.kernels.state.StateCell` (updated in
    place, as Core ML updates an ``MLState``); a state not given starts at zero.
    :func:`mil_passes.reference.state.evaluate_step` returns the new states too.

    Raises ``TypeError`` for a non-Program, ``ValueError`` for missing, extra, mis-shaped or
    mis-typed inputs or states, and :class:`UnsupportedOpError` for an op without a kernel.
    """
    values = output_values(prog, inputs, function, states=states)
    return {var.name: value for var, value in zip(prog.functions[function].outputs, values)}


def output_values(
    prog: Program,
    inputs: Mapping[str, Any],
    function: str = "main",
    *,
    states: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Like :func:`evaluate`, but the outputs as a list in the function's order (one var may be
    two outputs). Each intermediate value is dropped after the last op that reads it."""
    func = _function(prog, function)
    env: dict[Var, Any] = {}
    _bind_inputs(func, inputs, env)
    bind_states(func, states, env)
    _run_block(func, env, _releases(func))
    return [env[var] for var in func.outputs]


def evaluate_vars(
    prog: Program,
    inputs: Mapping[str, Any],
    function: str = "main",
    *,
    states: Mapping[str, Any] | None = None,
    replacing: Mapping[Var, Any] | None = None,
) -> dict[Var, Any]:
    """Like :func:`evaluate`, but the value of every var computed (inputs, consts, op outputs,
    and the vars of the nested blocks that ran), keyed by Var; a state input's value is its
    :class:`~mil_passes.reference.kernels.state.StateCell`.

    ``replacing`` gives values that the rest of the function reads in place of what an input or
    an op of the function's own block (not a nested one) holds for these vars, as a perturbation
    for an estimate of rounding error; unchecked, as an op's own output would be."""
    func = _function(prog, function)
    env: dict[Var, Any] = {}
    _bind_inputs(func, inputs, env)
    bind_states(func, states, env)
    if replacing:
        env.update((var, value) for var, value in replacing.items() if var in env)
    _run_block(func, env, replacing=replacing or None)
    return env


def _function(prog: Program, function: str):
    if not isinstance(prog, Program):
        raise TypeError(f"evaluate() needs a coremltools MIL Program, got {type(prog).__name__}")
    if function not in prog.functions:
        names = ", ".join(sorted(prog.functions))
        raise ValueError(f"program has no function '{function}' (it has: {names})")
    return prog.functions[function]


def _bind_inputs(func, feeds: Mapping[str, Any], env: dict) -> None:
    if not isinstance(feeds, Mapping):
        raise TypeError(f"inputs must be a mapping from input name to array, got {type(feeds).__name__}")
    expected = {name: var for name, var in func.inputs.items() if not types.is_state(var.sym_type)}
    for name, var in expected.items():
        if name not in feeds:
            raise ValueError(f"missing input '{name}': expected {describe_type(var)}")
    for name in feeds:
        if name not in expected:
            if name in func.inputs:
                raise ValueError(f"'{name}' is a state, not an input: pass it in states=")
            known = ", ".join(expected) or "none"
            raise ValueError(f"unexpected input '{name}': the function's inputs are {known}")
    sizes: dict[Any, tuple[int, str]] = {}
    for name, var in expected.items():
        value = np.asarray(feeds[name])
        want = numpy_dtype(var)
        if value.dtype != want:
            raise ValueError(f"input '{name}' has dtype {value.dtype}: expected {describe_type(var)}")
        shape = tuple(var.shape)
        if value.ndim != len(shape):
            raise ValueError(f"input '{name}' has shape {value.shape}: expected {describe_type(var)}")
        for axis, (dim, size) in enumerate(zip(shape, value.shape)):
            if is_symbolic(dim):
                seen = sizes.setdefault(dim, (size, name))
                if seen[0] != size:
                    raise ValueError(
                        f"input '{name}' has size {size} on axis {axis} for dim '{dim}', "
                        f"but input '{seen[1]}' gave it size {seen[0]}"
                    )
            elif dim != size:
                raise ValueError(f"input '{name}' has shape {value.shape}: expected {describe_type(var)}")
        env[var] = value


def state_inputs(func) -> dict[str, Var]:
    """A function's state inputs (iOS18), by name."""
    return {name: var for name, var in func.inputs.items() if types.is_state(var.sym_type)}


def bind_states(func, states: Mapping[str, Any] | None, env: dict) -> dict[str, StateCell]:
    """Bind each state input of ``func`` to its cell in ``env``: the given cell, a new cell
    holding a copy of the given array, or zeros (a fresh state, as Core ML makes it)."""
    declared = state_inputs(func)
    given = {} if states is None else states
    if not isinstance(given, Mapping):
        raise TypeError(f"states must be a mapping from state name to array, got {type(given).__name__}")
    for name in given:
        if name not in declared:
            known = ", ".join(declared) or "none"
            raise ValueError(f"unexpected state '{name}': the function's states are {known}")
    cells = {}
    for name, var in declared.items():
        value = given.get(name)
        cell = value if isinstance(value, StateCell) else StateCell(name, state_array(var, value))
        if cell.value.shape != tuple(var.shape) or cell.value.dtype != numpy_dtype(var):
            raise ValueError(
                f"state '{name}' holds {cell.value.dtype}{list(cell.value.shape)}: expected {describe_type(var)}"
            )
        env[var] = cells[name] = cell
    return cells


def state_array(var: Var, value: Any = None) -> np.ndarray:
    """A new array for state ``var``: zeros, or a copy of ``value`` after checking its shape and
    dtype (a float array is cast to the state's fp16, as ``MLState.write_state`` takes it)."""
    shape, dtype = tuple(int(d) for d in var.shape), numpy_dtype(var)
    if value is None:
        return np.zeros(shape, dtype)
    array = np.asarray(value)
    if array.shape != shape:
        raise ValueError(f"state '{var.name}' gets shape {array.shape}: expected {describe_type(var)}")
    if array.dtype != dtype and not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"state '{var.name}' gets dtype {array.dtype}: expected {describe_type(var)}")
    return array.astype(dtype, copy=True)


def _releases(block: Block) -> list[list[Var]]:
    """Per op of ``block``, the vars no later op reads (nested blocks included), outputs aside."""
    last_read: dict[Var, int] = {}
    for index, op in enumerate(block.operations):
        for var in _reads(op):
            last_read[var] = index
        for var in op.outputs:
            last_read.setdefault(var, index)  # never read: dropped once made
    kept = set(block.outputs)
    releases: list[list[Var]] = [[] for _ in block.operations]
    for var, index in last_read.items():
        if var not in kept:
            releases[index].append(var)
    return releases


def _reads(op: Operation) -> list[Var]:
    """The vars ``op`` reads: its inputs, and whatever its nested blocks read."""
    reads = input_vars(op)
    for block in op.blocks:
        for nested in iter_blocks(block):
            reads.extend(nested.outputs)
            for inner in nested.operations:
                reads.extend(input_vars(inner))
    return reads


def _run_block(
    block: Block, env: dict, releases: list[list[Var]] | None = None, replacing: Mapping[Var, Any] | None = None
) -> list[Any]:
    for index, op in enumerate(block.operations):
        outputs = _run_op(op, env)
        for var, value in zip(op.outputs, outputs):
            env[var] = value if replacing is None else replacing.get(var, value)
        if releases is not None:
            for var in releases[index]:
                env.pop(var, None)
    return [env[var] for var in block.outputs]


def _run_op(op: Operation, env: dict) -> tuple:
    op_type = op.op_type
    if op_type == "const":
        return (_const_of(op),)
    if op_type == "cond":
        pred = env[op.pred]
        branch = op.blocks[0] if bool(np.asarray(pred)) else op.blocks[1]
        results = _run_block(branch, env)
    elif op_type == "while_loop":
        results = _run_while_loop(op, env)
    else:
        args = {}
        found = env.get
        for name, value in op._input_vars.items():  # op.inputs without building a dict
            if type(value) is Var:  # most inputs: a plain var, computed (consts included) before
                known = found(value, _MISSING)
                args[name] = _const_value(value) if known is _MISSING else known
            elif value is not None and not isinstance(value, InternalVar):
                args[name] = _lookup(value, env)
        if op_type in DECODED_OPS:
            return decoded(op, args, functools.partial(_computed, op, args))
        return _computed(op, args)
    return _conformed(op, results)


def const_op_outputs(op: Operation) -> tuple:
    """The outputs of ``op``, every input of which is a const, as an evaluation computes them (by
    its kernel: not kept by :mod:`.decoded`, so its inputs can go with the op)."""
    args = {name: _lookup(value, {}) for name, value in op._input_vars.items() if not isinstance(value, InternalVar)}
    return _computed(op, {name: value for name, value in args.items() if value is not None})


def _computed(op: Operation, args: dict) -> tuple:
    """``op``'s outputs on ``args`` by its kernel (or coremltools' ``value_inference``), conformed."""
    kernel = KERNELS.get(op.op_type)
    if kernel is not None:
        results = kernel(op, args)
    elif _has_value_inference(op):
        results = _infer_value(op, args)
    else:
        raise UnsupportedOpError(op.op_type, op.name)
    return _conformed(op, results)


def _conformed(op: Operation, results: Any) -> tuple:
    op_type = op.op_type
    outputs = op._output_vars
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) != len(outputs):
        raise UnsupportedOpError(op_type, op.name, f"kernel returned {len(results)} values for {len(outputs)} outputs")
    if len(outputs) == 1:
        return (_conform(op, outputs[0], results[0]),)
    return tuple(_conform(op, var, value) for var, value in zip(outputs, results))


def _lookup(value: Any, env: dict) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [env[v] if v in env else _const_value(v) for v in value]
    found = env.get(value, _MISSING)
    return _const_value(value) if found is _MISSING else found


_MISSING = object()


class _Declared:
    """What conforming a value to a declared type needs: the numpy dtype (None: not a tensor or
    scalar), the rank (None: any, a rank not known at compile time) and the known dims."""

    __slots__ = ("dtype", "rank", "known_dims")

    def __init__(self, sym_type: Any):
        self.dtype: np.dtype | None = None
        self.rank: int | None = None
        self.known_dims: tuple[tuple[int, int], ...] = ()
        if types.is_tensor(sym_type):
            self.dtype = np.dtype(types.nptype_from_builtin(sym_type.get_primitive()))
            shape = tuple(sym_type.get_shape())
            if not any_variadic(shape):
                self.rank = len(shape)
                self.known_dims = tuple((axis, dim) for axis, dim in enumerate(shape) if not is_symbolic(dim))
        elif types.is_scalar(sym_type):
            self.dtype = np.dtype(types.nptype_from_builtin(sym_type))
            self.rank = 0


_DECLARED: dict[Any, _Declared] = {}


def _declared(var: Var) -> _Declared:
    """The :class:`_Declared` of ``var``'s type (types are immutable: one per type, remembered)."""
    sym_type = var.sym_type
    try:
        return _DECLARED[sym_type]
    except KeyError:
        declared = _DECLARED[sym_type] = _Declared(sym_type)
        return declared
    except TypeError:  # an unhashable type
        return _Declared(sym_type)


def _const_value(var: Var) -> Any:
    val = var.val
    if val is None:
        raise UnsupportedOpError(var.op.op_type if var.op is not None else "input", var.name, "value is not known")
    if isinstance(val, str):
        return val
    dtype = _declared(var).dtype
    return val if dtype is None else np.asarray(val, dtype=dtype)


class _Const:
    """A const op's value as last computed, with what it was computed from."""

    __slots__ = ("op", "sym_type", "holder", "raw", "value")

    def __init__(self, op: weakref.ref, sym_type: Any, holder: Any, raw: Any, value: Any):
        self.op, self.sym_type, self.holder, self.raw, self.value = op, sym_type, holder, raw, value


_CONSTS: dict[int, _Const] = {}


def _const_of(op: Operation) -> Any:
    """The value of const ``op``'s output (:func:`_const_value`), remembered per op while its
    output keeps the same type and value object, and only where the value is that object itself
    or an immutable scalar (a const array changed in place is then read as it is now)."""
    var = op._output_vars[0]
    holder = var._sym_val
    entry = _CONSTS.get(id(op))
    if (
        entry is not None
        and entry.op() is op
        and entry.sym_type is var._sym_type
        and entry.holder is holder
        and holder.val is entry.raw
    ):
        return entry.value
    value = _const_value(var)
    raw = holder.val
    if value is raw or not isinstance(raw, np.ndarray):
        key = id(op)
        gone = functools.partial(_forget_const, key)
        _CONSTS[key] = _Const(weakref.ref(op, gone), var._sym_type, holder, raw, value)
    return value


def _forget_const(key: int, _: weakref.ref) -> None:
    _CONSTS.pop(key, None)


def _conform(op: Operation, var: Var, value: Any) -> Any:
    """Cast ``value`` to ``var``'s declared dtype and check its shape."""
    declared = _declared(var)
    if declared.dtype is None or isinstance(value, str):
        return value
    array = value if type(value) is np.ndarray else np.asarray(value)
    if array.dtype != declared.dtype:
        array = array.astype(declared.dtype)
    if declared.rank is None:  # a rank not known at compile time (fill of a runtime shape): any shape
        return array
    shape = array.shape
    if len(shape) != declared.rank or any(shape[axis] != dim for axis, dim in declared.known_dims):
        raise ValueError(
            f"op '{op.name}' ({op.op_type}) computed shape {array.shape} for '{var.name}', "
            f"which is declared {describe_type(var)}"
        )
    return array


def _run_while_loop(op: Operation, env: dict) -> list[Any]:
    cond_block, body_block = op.blocks
    values = [env[v] if v in env else _const_value(v) for v in op.loop_vars]
    for _ in range(MAX_LOOP_ITERATIONS):
        for var, value in zip(cond_block.inputs, values):
            env[var] = value
        (keep_going,) = _run_block(cond_block, env)
        if not bool(np.asarray(keep_going)):
            return values
        for var, value in zip(body_block.inputs, values):
            env[var] = value
        values = _run_block(body_block, env)
    raise UnsupportedOpError(op.op_type, op.name, f"more than {MAX_LOOP_ITERATIONS} iterations")


# -- coremltools' own value_inference, run on a read-only stand-in -----------------------------

_BASE_VALUE_INFERENCE = Operation.value_inference


def _has_value_inference(op: Operation) -> bool:
    return type(op).value_inference is not _BASE_VALUE_INFERENCE


class _ValueVar:
    """What a ``value_inference`` method reads of an input Var, with a concrete value."""

    __slots__ = ("val", "sym_val", "shape", "rank", "dtype", "sym_type", "name", "op")

    def __init__(self, var: Var, value: Any):
        self.val = value
        self.sym_val = value
        self.name = var.name
        self.op = None
        if isinstance(value, str):
            self.shape, self.rank, self.dtype = (), 0, types.str
            self.sym_type = types.str
            return
        array = np.asarray(value)
        self.val = self.sym_val = array if array.ndim else array[()]
        self.shape = array.shape
        self.rank = array.ndim
        self.dtype = types.numpy_type_to_builtin_type(array.dtype)
        self.sym_type = types.tensor(self.dtype, array.shape) if array.ndim else self.dtype


def _infer_value(op: Operation, args: dict) -> Any:
    stand_in = object.__new__(type(op))
    stand_in.__dict__.update(op.__dict__)
    input_vars = {}
    for name, var in op._input_vars.items():
        value = args.get(name)
        if var is None or value is None:
            input_vars[name] = var
        elif isinstance(var, (list, tuple)):
            input_vars[name] = tuple(_ValueVar(v, x) for v, x in zip(var, value))
        else:
            input_vars[name] = _ValueVar(var, value)
        stand_in.__dict__[name] = input_vars[name]
    stand_in.__dict__["_input_vars"] = input_vars
    try:
        return type(op).value_inference(stand_in)
    except NotImplementedError as error:
        raise UnsupportedOpError(op.op_type, op.name, str(error)) from error
