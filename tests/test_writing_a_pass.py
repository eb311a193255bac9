"""docs/writing-a-pass.md runs as written: its blocks, in order, are one program (a pass declared,
registered, run and tested), and the pass it builds rewrites as the page says."""

import re
from pathlib import Path

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from mil_passes.declaration import declaration_in
from mil_passes.runner import run_pass
from mil_passes.testing import op_counts

PAGE = Path(__file__).resolve().parent.parent / "docs" / "writing-a-pass.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_runs_as_one_program():
    namespace: dict = {}
    exec(compile("\n".join(BLOCKS), str(PAGE), "exec"), namespace)
    assert namespace["DECLARATION"] == declaration_in(BLOCKS[0])  # literal: readable without importing
    assert type(PASS_REGISTRY["webnn::reshape_to_own_shape_example"]).__name__ == "ReshapeToOwnShapeExample"

    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        kept = mb.reshape(x=x, shape=[2, 3], name="kept")
        return mb.reshape(x=kept, shape=[3, 2], name="moved")

    result = run_pass(prog, "webnn::reshape_to_own_shape_example")
    assert (result.rewritten, op_counts(prog)) == (1, {"reshape": 1})
