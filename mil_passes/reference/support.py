"""Which op types the reference interpreter evaluates."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable

from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from .kernels import KERNELS, load_families

CONTROL_FLOW = frozenset({"const", "cond", "while_loop"})


def undecorated(method: Callable, name: str = "value_inference") -> Callable:
    """``method`` without decorators such as coremltools' ``@precondition``, whose wrapper keeps
    the function ``name`` in its closure."""
    for cell in getattr(method, "__closure__", None) or ():
        inner = cell.cell_contents
        if inspect.isfunction(inner) and inner.__name__ == name and inner is not method:
            return undecorated(inner, name)
    return method


def only_raises_not_implemented(method: Callable) -> bool:
    """True when the body of ``method`` (its docstring aside) is a single ``raise NotImplementedError``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(undecorated(method))))
    except (OSError, TypeError, SyntaxError):
        return False
    function = tree.body[0]
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def implements_value_inference(cls: type[Operation]) -> bool:
    """The op class overrides ``value_inference`` with something other than a bare raise."""
    method = cls.value_inference
    return method is not Operation.value_inference and not only_raises_not_implemented(method)


def _ops_with_value_inference() -> set[str]:
    found = set()
    for op_type, by_opset in SSAOpRegistry.core_ops.items():
        if op_type.startswith("_"):
            continue
        if all(implements_value_inference(cls) for cls in by_opset.values()):
            found.add(op_type)
    return found


def supported_ops() -> frozenset[str]:
    """Op types with a hand-written kernel, control flow, or a coremltools value_inference that is
    implemented in every opset the op exists in (not a bare ``raise NotImplementedError``)."""
    load_families()
    return frozenset(KERNELS) | frozenset(_ops_with_value_inference()) | CONTROL_FLOW


SUPPORTED_OPS: frozenset[str] = supported_ops()
