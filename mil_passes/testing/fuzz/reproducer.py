"""Write a shrunk failing program as a standalone Python script (coremltools and numpy only).

The script builds the program with coremltools' builder, names each const as the fuzzer did,
runs the passes, and checks what it can without Core ML: the pass raises, or an output's dtype or
shape changed, or an output whose value coremltools knows differs from what the reference
interpreter computed before the pass (written into the script). When only values changed and
they are known only at run time, it runs again with the inputs as consts holding the feeds, so
coremltools' value inference computes them (a different program, which the pass may leave alone:
only a difference there counts). It prints before and after and exits 1 while the
bug is present, 0 once it is fixed (2 when only a Core ML run could tell).
"""

from __future__ import annotations

from pathlib import Path

import coremltools as ct
import numpy as np

from .minimize import Minimized, expected_outputs
from ..programs.recipe import Branch, Recipe, Ref, Step

HEADER = '''"""{title}

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
PASSES = {passes!r}
# The outputs before the passes, by mil-passes' reference interpreter, on FEEDS.
FEEDS = {feeds}
EXPECTED = {expected}


def const(value, name):
    """A named const, as the fuzzer makes them (0-d bools and int32s as Python scalars)."""
    if np.ndim(value) == 0:
        value = np.asarray(value)
        value = value.item() if value.dtype in (np.bool_, np.int32) else value[()]
    return mb.const(val=value, name=name)


def program(inputs_as_consts=False):
    """The program; with ``inputs_as_consts`` its inputs are consts holding FEEDS, so that
    coremltools' own value inference computes every value (no Core ML needed)."""
    specs = {{}} if inputs_as_consts else {{{inputs}}}
    with Function(specs, opset_version=ct.target.{opset}) as func:
{body}
        func.set_outputs([{outputs}])
    prog = Program()
    prog.add_function("main", func)
    return prog
'''

CHECK = '''

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
'''


def _array(value) -> str:
    value = np.asarray(value)
    dtype = f"np.{value.dtype.name}" if value.dtype != np.bool_ else "np.bool_"
    return f"np.array({value.tolist()!r}, dtype={dtype})".replace("'", "")


def _scalar_or_array(value) -> str:
    if isinstance(value, str):
        return repr(value)
    return _array(value)


def _arg(value, name: str) -> str:
    if isinstance(value, Ref):
        return f"v{value.index}"
    if isinstance(value, tuple):
        items = ", ".join(_arg(item, f"{name}_{i}") for i, item in enumerate(value))
        return f"({items}{',' if len(value) == 1 else ''})"
    return f"const({_scalar_or_array(value)}, {name!r})"


class _Writer:
    def __init__(self, recipe: Recipe):
        self.lines: list[str] = []
        self.next = len(recipe.inputs)
        self.recipe = recipe

    def steps(self, steps: tuple[Step, ...] | list[Step], indent: str) -> None:
        for step in steps:
            self.step(step, indent)

    def step(self, step: Step, indent: str) -> None:
        args = ", ".join(f"{key}={_arg(value, f'{step.name}_{key}')}" for key, value in step.args.items())
        if step.op_type == "cond":
            assert step.branches is not None, f"cond step '{step.name}' has no branches"
            fns = [
                self.branch(branch, f"_{kind}_{self.next}", indent)
                for kind, branch in zip(("true", "false"), step.branches)
            ]
            call = f"mb.cond({args}, _true_fn={fns[0]}, _false_fn={fns[1]}, name={step.name!r})"
        else:
            call = f"mb.{step.op_type}({args}, name={step.name!r})"
        outputs = _output_count(step)
        names = [f"v{self.next + i}" for i in range(outputs)]
        self.next += outputs
        target = names[0] if outputs == 1 else ", ".join(names)
        self.lines.append(f"{indent}{target} = {call}")

    def branch(self, branch: Branch, name: str, indent: str) -> str:
        self.lines.append(f"{indent}def {name}():")
        self.steps(branch.steps, indent + "    ")
        self.lines.append(f"{indent}    return v{branch.output.index}")
        return name


def _output_count(step: Step) -> int:
    """How many vars ``step`` makes: one, except ``split`` (one per part; the only op of the
    fuzzer's table with several outputs)."""
    if step.op_type != "split":
        return 1
    if "split_sizes" in step.args:
        return int(np.asarray(step.args["split_sizes"]).size)
    return int(np.asarray(step.args["num_splits"]))


def _input_spec(decl) -> str:
    dims = ", ".join(f"Symbol({d!r})" if isinstance(d, str) else str(int(d)) for d in decl.shape)
    dims += "," if len(decl.shape) == 1 else ""
    return f"{decl.name!r}: mb.TensorSpec(shape=({dims}), dtype=types.{decl.dtype})"


def _opset_name(opset) -> str:
    return next(t.name for t in ct.target if t == opset)


def reproducer_script(minimized: Minimized) -> str:
    """The standalone script for ``minimized``."""
    recipe = minimized.recipe
    writer = _Writer(recipe)
    first = len(recipe.inputs)
    writer.lines += [
        f"        v{i} = const(FEEDS[{decl.name!r}], {decl.name!r}) if inputs_as_consts else func.inputs[{decl.name!r}]"
        for i, decl in enumerate(recipe.inputs)
    ]
    writer.next = first
    writer.steps(recipe.steps, "        ")
    expected = expected_outputs(recipe, minimized.feeds)
    title = f"{minimized.signature.pass_name} {minimized.signature.status}: {minimized.row.reason()}"
    text = HEADER.format(
        title=title.replace('"""', "'''"),
        passes=minimized.passes,
        feeds="{" + ", ".join(f"{k!r}: {_array(v)}" for k, v in minimized.feeds.items()) + "}",
        expected="{" + ", ".join(f"{k!r}: {_array(v)}" for k, v in expected.items()) + "}",
        inputs=", ".join(_input_spec(decl) for decl in recipe.inputs),
        opset=_opset_name(recipe.opset),
        body="\n".join(writer.lines),
        outputs=", ".join(f"v{ref.index}" for ref in recipe.outputs),
    )
    change = "values" if minimized.signature.kinds == {"values"} else "other"
    return text + f"\n\nCHANGE = {change!r}  # what changed: values need Core ML unless they are const\n" + CHECK


def write_reproducer(minimized: Minimized, path: str | Path) -> Path:
    """Write :func:`reproducer_script` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reproducer_script(minimized))
    return path
