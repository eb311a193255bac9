"""The structural fingerprint verify uses to skip passes that change nothing."""

import numpy as np

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types

from mil_passes.fingerprint import Fingerprinter
from mil_passes.package.io import copy_program


def chain(scale: float = 3.0, weights: np.ndarray | None = None, dtype=types.fp32) -> Program:
    weights = np.arange(12, dtype=np.float32).reshape(3, 4) if weights is None else weights

    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=dtype)], opset_version=ct.target.iOS17)
    def prog(x):
        x = mb.cast(x=x, dtype="fp32") if dtype != types.fp32 else x
        h = mb.relu(x=mb.mul(x=x, y=np.float32(scale)))
        return mb.matmul(x=h, y=weights, name="out")

    return prog


def test_equal_programs_and_a_copy_have_one_fingerprint():
    prints = Fingerprinter()
    first = prints.program(chain())
    assert prints.program(chain()) == first
    assert Fingerprinter().program(copy_program(chain())) == first


def test_names_do_not_count():
    prog = chain()
    before = Fingerprinter().program(prog)
    for op in prog.functions["main"].operations:
        op.name = f"renamed_{op.name}"
        for var in op.outputs:
            var.name = f"renamed_{var.name}"
    assert Fingerprinter().program(prog) == before


def test_constants_types_and_wiring_count():
    prints = Fingerprinter()
    base = prints.program(chain())
    assert prints.program(chain(scale=3.5)) != base
    assert prints.program(chain(weights=np.ones((3, 4), np.float32))) != base
    assert prints.program(chain(weights=np.arange(12, dtype=np.float16).reshape(3, 4))) != base
    assert prints.program(chain(dtype=types.fp16)) != base

    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def swapped(x):  # the same ops, the mul's inputs swapped
        h = mb.relu(x=mb.mul(x=np.float32(3.0), y=x))
        return mb.matmul(x=h, y=np.arange(12, dtype=np.float32).reshape(3, 4), name="out")

    assert prints.program(swapped) != base


def test_a_const_changed_in_place_is_seen_where_the_sample_is():
    prog = chain()
    prints = Fingerprinter()
    before = prints.program(prog)
    weights = next(op for op in prog.functions["main"].operations if op.op_type == "const" and op.val.val.size == 12)
    weights.val.val[0, 0] += 1  # element 0 is always sampled
    assert prints.program(prog) != before


def test_dead_code_and_the_order_of_independent_ops_do_not_count():
    def program(order: str, dead: bool) -> Program:
        @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
        def prog(x):
            if order == "relu first":
                a, b = mb.relu(x=x), mb.sin(x=x)
            else:
                b, a = mb.sin(x=x), mb.relu(x=x)
            if dead:
                mb.exp(x=a)  # read by no output
            return mb.add(x=a, y=b, name="out")

        return prog

    prints = Fingerprinter()
    base = prints.program(program("relu first", dead=False))
    assert prints.program(program("sin first", dead=False)) == base
    assert prints.program(program("relu first", dead=True)) == base


def test_an_op_that_writes_a_state_counts_though_no_output_reads_it():
    def program(write: bool) -> Program:
        @mb.program(
            input_specs=[mb.StateTensorSpec((2,), dtype=types.fp16), mb.TensorSpec((2,), dtype=types.fp16)],
            opset_version=ct.target.iOS18,
        )
        def prog(cache, x):
            if write:
                mb.coreml_update_state(state=cache, value=x)
            return mb.relu(x=x, name="out")

        return prog

    prints = Fingerprinter()
    assert prints.program(program(write=True)) != prints.program(program(write=False))
