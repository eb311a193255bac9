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
    assert Fingerprinter().program(copy_program(chain())).digest == first.digest


def test_names_do_not_count():
    prog = chain()
    before = Fingerprinter().program(prog).digest
    for op in prog.functions["main"].operations:
        op.name = f"renamed_{op.name}"
        for var in op.outputs:
            var.name = f"renamed_{var.name}"
    assert Fingerprinter().program(prog).digest == before


def test_constants_types_and_wiring_count():
    prints = Fingerprinter()
    base = prints.program(chain()).digest
    assert prints.program(chain(scale=3.5)).digest != base
    assert prints.program(chain(weights=np.ones((3, 4), np.float32))).digest != base
    assert prints.program(chain(weights=np.arange(12, dtype=np.float16).reshape(3, 4))).digest != base
    assert prints.program(chain(dtype=types.fp16)).digest != base

    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def swapped(x):  # the same ops, the mul's inputs swapped
        h = mb.relu(x=mb.mul(x=np.float32(3.0), y=x))
        return mb.matmul(x=h, y=np.arange(12, dtype=np.float32).reshape(3, 4), name="out")

    assert prints.program(swapped).digest != base


def test_a_const_changed_in_place_is_seen_where_the_sample_is():
    prog = chain()
    prints = Fingerprinter()
    before = prints.program(prog).digest
    weights = next(op for op in prog.functions["main"].operations if op.op_type == "const" and op.val.val.size == 12)
    weights.val.val[0, 0] += 1  # element 0 is always sampled
    assert prints.program(prog).digest != before


def test_the_common_prefix_is_the_ops_before_the_first_difference():
    prints = Fingerprinter()
    base, nudged = prints.program(chain()), prints.program(chain(weights=np.ones((3, 4), np.float32)))
    ops = [op.op_type for op in chain().functions["main"].operations]
    first_difference = ops.index("const", ops.index("relu"))  # the weights, made after the relu
    assert base.common_prefix(nudged) == first_difference
    assert base.common_prefix(base) == len(ops)
