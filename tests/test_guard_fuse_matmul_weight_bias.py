"""webnn::guard_fuse_matmul_weight_bias: ``b - x @ W``, ``W @ x + b`` and a matmul that is also an
output keep their meaning (against torch where torch writes them); ``x @ W ± b`` is still fused."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

import mil_passes
from mil_passes.reference import evaluate
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_matmul_weight_bias"
FUSION = "common::fuse_matmul_weight_bias"
# small integers: every product and sum is exact in fp32, so values compare bit for bit
W = np.array([[1.0, -2.0, 0.0], [3.0, 1.0, -1.0], [2.0, 0.0, 4.0]], np.float32)
B = np.array([10.0, -20.0, 30.0], np.float32)
X = {"x": np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0], [2.0, -3.0, 1.0]], np.float32)}


def program(case: str):
    """The matmul by a const and its add/sub, as ``case`` writes them."""

    @mb.program(input_specs=[mb.TensorSpec((3, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        if case == "const_minus_matmul":
            return mb.sub(x=B, y=mb.matmul(x=x, y=W), name="out")
        if case == "weight_first":
            return mb.add(x=mb.matmul(x=W, y=x), y=B, name="out")
        if case == "matmul_is_an_output":
            product = mb.matmul(x=x, y=W, name="product")
            return mb.add(x=product, y=B, name="out"), product
        if case == "matmul_minus_const":
            return mb.sub(x=mb.matmul(x=x, y=W), y=B, name="out")
        return mb.add(x=B, y=mb.matmul(x=x, y=W), name="out")

    return prog


GUARDED = ["const_minus_matmul", "weight_first", "matmul_is_an_output"]


@pytest.mark.parametrize("case", GUARDED)
def test_the_pass_is_wrong_without_the_guard(case):
    """The bugs the guard answers (if coremltools fixes one, its case may go)."""
    prog = program(case)
    try:
        run_pass(prog, FUSION)
        assert_equivalent(program(case), prog, X)
    except (AssertionError, ValueError):
        return
    raise AssertionError(f"coremltools now fuses {case} right")


@pytest.mark.parametrize("case", GUARDED)
def test_the_guarded_matmul_keeps_its_values(case):
    after = check_pass(lambda: program(case), PASS, inputs=X)
    assert op_counts(after)["identity"] == 1
    run_pass(after, FUSION)
    assert "linear" not in op_counts(after)
    assert_equivalent(program(case), after, X)


@pytest.mark.parametrize("case", ["matmul_minus_const", "bias_plus_matmul"])
def test_what_the_pass_fuses_right_is_left_to_it(case):
    prog = program(case)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, FUSION)
    assert op_counts(prog)["linear"] == 1
    assert_equivalent(program(case), prog, X)


torch = pytest.importorskip("torch", reason="torch is the oracle of the conversions")


class ConstMinusMatmul(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(B) - x @ torch.from_numpy(W)


class WeightFirst(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(W) @ x + torch.from_numpy(B)


def converted(module, pass_pipeline) -> np.ndarray:
    x = X["x"]
    model = ct.convert(
        torch.jit.trace(module.eval(), torch.from_numpy(x)),
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        pass_pipeline=pass_pipeline,
        skip_model_load=True,
    )
    (out,) = evaluate(model._mil_program, X).values()
    return out


# coremltools' torch frontend writes ``x @ W`` by a const as ``linear`` (whose bias fusion,
# fuse_linear_bias, handles ``b - linear`` right), and ``W @ x`` as ``matmul``, which DEFAULT misfuses.
@pytest.mark.parametrize(
    "module, default_is_wrong", [(ConstMinusMatmul, False), (WeightFirst, True)], ids=["b-x@W", "W@x+b"]
)
def test_the_pipeline_equals_torch(module, default_is_wrong):
    want = module()(torch.from_numpy(X["x"])).numpy()
    np.testing.assert_array_equal(converted(module(), mil_passes.pipeline()), want)
    assert np.array_equal(converted(module(), ct.PassPipeline.DEFAULT), want) is not default_is_wrong
