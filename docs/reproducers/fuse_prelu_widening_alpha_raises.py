"""common::fuse_prelu raised: ValueError: Size of dimension 0 of alpha (2) should be the same as the size of dimension 1 of x (1).

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --minimize) and shrunk to the
program below; mil-passes verify names the same pass. Needs only coremltools and numpy.
Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, Program, types
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from coremltools.converters.mil.mil.program import Symbol

nan, inf = float("nan"), float("inf")
PASSES = ['common::fuse_prelu']
# The outputs before the passes, by mil-passes' reference interpreter, on FEEDS.
FEEDS = {'x2': np.array([[9.80597972869873]], dtype=np.float32), 'x3': np.array([[[[7.211864471435547]]]], dtype=np.float32)}
EXPECTED = {'x2': np.array([[9.80597972869873]], dtype=np.float32)}


def const(value, name):
    """A named const, as the fuzzer makes them (0-d bools and int32s as Python scalars)."""
    if np.ndim(value) == 0:
        value = np.asarray(value)
        value = value.item() if value.dtype in (np.bool_, np.int32) else value[()]
    return mb.const(val=value, name=name)


def program(inputs_as_consts=False):
    """The program; with ``inputs_as_consts`` its inputs are consts holding FEEDS, so that
    coremltools' own value inference computes every value (no Core ML needed)."""
    specs = {} if inputs_as_consts else {'x2': mb.TensorSpec(shape=(1, 1), dtype=types.fp32), 'x3': mb.TensorSpec(shape=(1, 1, 1, 1), dtype=types.fp32)}
    with Function(specs, opset_version=ct.target.iOS17) as func:
        v0 = const(FEEDS['x2'], 'x2') if inputs_as_consts else func.inputs['x2']
        v1 = const(FEEDS['x3'], 'x3') if inputs_as_consts else func.inputs['x3']
        v2 = mb.transpose(x=v1, perm=const(np.array([0, 2, 3, 1], dtype=np.int32), 'transpose_17_perm'), name='transpose_17')
        v3 = mb.relu(x=v2, name='relu_18')
        v4 = mb.mul(x=v2, y=const(np.array(-1.0, dtype=np.float32), 'mul_19_y'), name='mul_19')
        v5 = mb.relu(x=v4, name='relu_20')
        v6 = mb.mul(x=v5, y=const(np.array([[[[-0.25, -0.25]]]], dtype=np.float32), 'mul_21_y'), name='mul_21')
        v7 = mb.add(x=v3, y=v6, name='add_22')
        func.set_outputs([v0])
    prog = Program()
    prog.add_function("main", func)
    return prog


CHANGE = 'other'  # what changed: values need Core ML unless they are const


def describe(var):
    return f"{types.builtin_to_string(var.dtype)}{list(var.shape)}"


def computes_fp16(prog):
    return any(types.builtin_to_string(var.dtype) == "fp16" for op in prog.functions["main"].operations
               if op.op_type != "const" for var in op.outputs if var.sym_type is not None)


def within_precision(got, want, fp16):
    """As mil-passes verify judges: the largest change at most atol, or at most rtol of the
    output's largest finite magnitude (fp16: 1e-2 and 1e-2; fp32: 1e-4 and 1e-5)."""
    rtol, atol = (1e-2, 1e-2) if fp16 else (1e-4, 1e-5)
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    with np.errstate(invalid="ignore", over="ignore"):
        change = np.where(same, 0.0, np.nan_to_num(np.abs(got - want), nan=np.inf)).max(initial=0.0)
    scale = np.abs(want[np.isfinite(want)]).max(initial=0.0)
    return change <= atol or (scale > 0 and change / scale <= rtol)


def run(inputs_as_consts):
    """0 as intended, 1 the bug, 2 cannot tell: the passes on the program, then each output
    against EXPECTED (dtype and shape; values where coremltools knows them)."""
    prog = program(inputs_as_consts)
    before = [describe(var) for var in prog.functions["main"].outputs]
    try:
        for name in PASSES:
            PASS_REGISTRY[name](prog)
    except Exception as error:
        print(f"{PASSES[-1]} raises {type(error).__name__}: {error}")
        return 1
    status = 0
    for var, was, (name, want) in zip(prog.functions["main"].outputs, before, EXPECTED.items()):
        now = describe(var)
        try:
            got = None if var.val is None else np.asarray(var.val, dtype=types.nptype_from_builtin(var.dtype))
        except (OverflowError, ValueError) as error:  # a value its declared dtype cannot hold
            print(f"output {name}: before {was} = {want.tolist()}; after {now} holds {var.val!r}: {error}")
            status = 1
            continue
        print(f"output {name}: before {was} = {want.tolist()}; after {now} = "
              f"{'(computed at run time)' if got is None else got.tolist()}")
        if now != was:
            status = 1
        elif got is not None and not within_precision(got, want, computes_fp16(prog)):
            status = 1
        elif got is None and CHANGE == "values":
            status = max(status, 2)  # values known only at run time
    if status == 2:
        print(f"the program after {PASSES[-1]}:{prog}")
    return status


def main():
    status = run(inputs_as_consts=False)
    if status == 2:  # values: coremltools' value inference computes them from consts, but the
        print("with the inputs as consts:")  # pass may leave that program alone: only 1 tells
        status = 1 if run(inputs_as_consts=True) == 1 else 2
    print("bug present" if status == 1 else "fixed" if status == 0 else "cannot tell without Core ML")
    return status


if __name__ == "__main__":
    sys.exit(main())
