"""mil_passes.pipeline() against DEFAULT's known miscompiles: torch modules that DEFAULT converts
wrong (or not at all) convert and equal torch; every guard sits before every run of its pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil.mil import types

import mil_passes
from mil_passes.schedule import BACKEND_RUNS, GUARDS, INT16_NARROWING
from mil_passes.reference import evaluate
from mil_passes.testing import assert_equivalent
from mil_passes.runner import run_pipeline
from mil_passes.cli.text_output import format_summary
from mil_passes.verify import verify_program
from pass_helpers import reproducer

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")


class IntThenBool(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.int32).to(torch.bool)


class Uint8ThenBool(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.uint8).to(torch.bool)


class BufferConcatWindow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.tensor([-10.5, 0.25]))

    def forward(self, x):
        return torch.cat([self.b, x])[:2] + x[:2]


def converted_output(module, x: np.ndarray, pass_pipeline) -> np.ndarray:
    model = ct.convert(
        torch.jit.trace(module.eval(), torch.from_numpy(x)),
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        pass_pipeline=pass_pipeline,
        skip_model_load=True,
    )
    (out,) = evaluate(model._mil_program, {"x": x}).values()
    return out


CASES = [
    # (module, input, what DEFAULT does: its wrong output, or the exception it raises)
    (IntThenBool, [0.3, -0.7, 0.0, 2.5], [True, True, False, True]),
    (Uint8ThenBool, [0.3, 1.7, 0.0, 2.5], [True, True, False, True]),
    (BufferConcatWindow, [1.0, 2.0], ValueError),
]


@pytest.mark.parametrize("module, x, default", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_the_pipeline_converts_what_default_miscompiles_and_equals_torch(module, x, default):
    x = np.array(x, dtype=np.float32)
    want = module()(torch.from_numpy(x)).numpy()
    got = converted_output(module(), x, mil_passes.pipeline())
    np.testing.assert_array_equal(got.astype(want.dtype), want)  # a bool output is fp32 0/1 in Core ML I/O
    # DEFAULT's miscompile (if coremltools fixes it, the guard may go):
    if isinstance(default, type):
        with pytest.raises(default):
            converted_output(module(), x, ct.PassPipeline.DEFAULT)
    else:
        assert converted_output(module(), x, ct.PassPipeline.DEFAULT).astype(bool).tolist() == default


def test_every_guard_runs_right_before_each_run_of_its_pass_and_again_at_the_end():
    base = list(ct.PassPipeline.DEFAULT.passes)
    names = list(mil_passes.pipeline().passes)
    for guard, guarded in GUARDS:
        runs = [i for i, name in enumerate(names) if name == guarded]
        assert len(runs) == base.count(guarded)
        assert all(names[i - 1] == guard for i in runs), guard
        assert (guard in names[-len(BACKEND_RUNS) :]) is (guarded in BACKEND_RUNS)
    assert mil_passes.pipeline().get_options(INT16_NARROWING)[0].option_name == "op_selector"


def test_a_base_without_the_guarded_passes_gets_no_guards():
    names = mil_passes.pipeline(ct.PassPipeline(["common::dead_code_elimination"])).passes
    assert not {guard for guard, _ in GUARDS} & set(names)
    assert mil_passes.pipeline(ct.PassPipeline(["common::dead_code_elimination"])).get_options(INT16_NARROWING) is None


REPRODUCERS = Path(__file__).parent.parent / "docs" / "reproducers"
#: Reproducers of DEFAULT's miscompiles that pipeline() answers (add_fp16_cast_overflow is fp16's
#: range by design, which the pipeline keeps: docs/coremltools-passes.md). remove_symbolic_reshape's
#: names a Symbol, which one process can build once: tests/test_guards.py's table builds the same 4 ops.
ANSWERED = [
    Path(__file__).parent / "fixtures" / "const_elimination_int32.py",
    REPRODUCERS / "const_elimination_raises.py",
    REPRODUCERS / "cast_optimization_float_int_bool.py",
    REPRODUCERS / "add_int16_cast_gather_data.py",
    REPRODUCERS / "concat_to_pixel_shuffle_shared_concat_raises.py",
    REPRODUCERS / "fuse_layernorm_broadcast_gamma_instance_norm.py",
    REPRODUCERS / "fuse_prelu_widening_alpha_raises.py",
]


def load(path: Path):
    """The reproducer's ``program``, its ``FEEDS`` (the inputs that show the bug) and ``PASSES``."""
    module = reproducer(path)
    return module.program, module.FEEDS, module.PASSES


@pytest.mark.parametrize("path", ANSWERED, ids=lambda p: p.stem)
def test_verify_finds_no_culprit_in_a_reproducer_under_the_pipeline(path):
    build, feeds, passes = load(path)
    assert verify_program(build, passes, feeds=[feeds]).culprit is not None  # the bug, in DEFAULT's pass
    for given in ([feeds], 3):  # the reproducer's feeds, then random ones
        verification = verify_program(build, "mil_passes", feeds=given)
        assert verification.culprit is None, format_summary(verification)


def test_the_pipeline_is_exact_on_each_guarded_program():
    """Bit-for-bit equal outputs (add_fp16_cast left out, add_int16_cast kept), on the given
    feeds and on random ones. (Idempotence is each guard's: DEFAULT's topological_reorder renames
    a cast op on every run, so DEFAULT-based pipelines print differently the second time.)"""
    from test_guards import ROWS
    from test_int16_narrowing import gather_program, kv_position
    from test_lossy_cast_chains import FLOATS, chain_to_bool, webnn_uint8_condition
    from test_partially_known_values import slice_of_concat

    reshape_by_own_shape = ROWS["remove_symbolic_reshape"].program

    base = ct.PassPipeline.DEFAULT
    base.remove_passes({"common::add_fp16_cast"})
    x2 = {"x": np.array([1.0, 2.0], np.float32)}
    cases = [
        (lambda: chain_to_bool(types.fp32, ["int32"]), FLOATS, None),
        (lambda: chain_to_bool(types.fp32, ["uint8"]), FLOATS, None),
        (webnn_uint8_condition, FLOATS, None),
        (lambda: slice_of_concat([-10.5, 0.25], read_by="add"), x2, None),
        (lambda: slice_of_concat([-10.5, 0.25], read_by="concat"), x2, None),
        (gather_program, {"data": np.array([5, 40000, 2147483647, -3, 0, 1], np.int32)}, None),
        (kv_position, {"pos": np.array([40000], np.int32)}, None),
        (reshape_by_own_shape, {"x": np.array([-1.0, 0.5, 2.0], np.float32)}, 3),
    ]
    for build, feeds, sizes in cases:
        after = build()
        run_pipeline(after, mil_passes.pipeline(base))
        after.validate()
        assert_equivalent(build(), after, feeds, sizes=sizes)


# Guarded programs that torch writes, converted under pipeline() (and under DEFAULT, which gets them wrong).
W = np.array([[1.0, -2.0, 0.0], [3.0, 1.0, -1.0], [2.0, 0.0, 4.0]], np.float32)  # small integers: exact
B = np.array([10.0, -20.0, 30.0], np.float32)
X33 = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0], [2.0, -3.0, 1.0]], np.float32)


class ConstMinusMatmul(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(B) - x @ torch.from_numpy(W)


class WeightFirst(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(W) @ x + torch.from_numpy(B)


# coremltools' torch frontend writes ``x @ W`` by a const as ``linear`` (whose bias fusion,
# fuse_linear_bias, handles ``b - linear`` right), and ``W @ x`` as ``matmul``, which DEFAULT misfuses.
@pytest.mark.parametrize(
    "module, default_is_wrong", [(ConstMinusMatmul, False), (WeightFirst, True)], ids=["b-x@W", "W@x+b"]
)
def test_a_matmul_and_its_bias_equal_torch(module, default_is_wrong):
    want = module()(torch.from_numpy(X33)).numpy()
    np.testing.assert_array_equal(converted_output(module(), X33, mil_passes.pipeline()), want)
    assert np.array_equal(converted_output(module(), X33, ct.PassPipeline.DEFAULT), want) is not default_is_wrong


class StackAndMerge(torch.nn.Module):
    def forward(self, a, b):
        stacked = torch.stack([a, b], dim=1)
        return stacked.reshape(1, 10, 3), stacked


def test_a_returned_stack_and_its_reshape_equal_torch():
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal((1, 5, 3)).astype(np.float32) for name in ("a", "b")}
    tensors = [torch.from_numpy(feeds[name]) for name in ("a", "b")]
    model = ct.convert(
        torch.jit.trace(StackAndMerge().eval(), tuple(tensors)),
        inputs=[ct.TensorType(name=n, shape=(1, 5, 3)) for n in ("a", "b")],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        pass_pipeline=mil_passes.pipeline(),
        skip_model_load=True,
    )
    got = list(evaluate(model._mil_program, feeds).values())
    for g, w in zip(got, StackAndMerge()(*tensors)):
        np.testing.assert_array_equal(g, w.numpy())


def test_the_pipeline_keeps_a_requantization_across_a_reshape():
    program = reproducer(REPRODUCERS / "int_op_canonicalization_requantize.py").program
    base = ct.PassPipeline.DEFAULT
    base.remove_passes({"common::add_fp16_cast"})
    after = program()
    run_pipeline(after, mil_passes.pipeline(base))
    assert_equivalent(program(), after, {"x": np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)})
    assert "identity" not in {op.op_type for op in after.functions["main"].operations}  # noop_elimination removed it


def test_a_reshape_by_a_zero_target_has_no_invalid_step_under_the_pipeline():
    from test_guards import ROWS

    row = ROWS["add_fp16_cast"]
    feeds = [row.feeds, {"x": np.full((1, 1, 1, 1), -3.0, np.float32)}]
    verification = verify_program(row.program, "mil_passes", feeds=feeds)
    assert verification.culprit is None, format_summary(verification)
