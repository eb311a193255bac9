"""webnn::fold_shape_ops: shape ops and the arithmetic on them become constants and const targets."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from coremltools.converters.mil.mil.program import Symbol
from hypothesis import given
from hypothesis import strategies as st

import coremltools as ct
import mil_passes
from mil_passes.reference import evaluate
from mil_passes.ir import iter_ops
from mil_passes.testing import check_pass, op_counts, random_inputs

PASS = "webnn::fold_shape_ops"
B, S, T = Symbol("B"), Symbol("S"), Symbol("T")
# Size 1 is where broadcasting and squeezing mistakes show; the others tell the dims apart.
SIZES = (1, {"B": 3, "S": 5, "T": 2}, {"B": 1, "S": 4, "T": 1}, {"B": 2, "S": 1, "T": 3})
OPSETS = (ct.target.iOS16, ct.target.iOS17)  # reshape's 0 means different things in these


def check(build, sizes=SIZES, pass_name=PASS):
    """check_pass at every size in ``sizes``; returns the last rewritten program."""
    for size in sizes:
        after = check_pass(build, pass_name, sizes=size)
    return after


def run(prog) -> dict[str, str]:
    """Apply the pass; return the reason of every refusal, by op name."""
    graph_pass = PASS_REGISTRY[PASS]
    graph_pass.apply(prog)
    return {r.op.name: r.reason for r in graph_pass.last_result.declined}


def ops(prog, op_type: str) -> list:
    return [op for op in iter_ops(prog) if op.op_type == op_type]


def const_target(prog) -> list[list[int]]:
    return [op.shape.val.tolist() for op in ops(prog, "reshape")]


def output_value(prog, index: int = 0):
    return prog.functions["main"].outputs[index].val


def test_docstring_example():
    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 32))], opset_version=ct.target.iOS17)
        def prog(x):
            dims = mb.shape(x=x)
            lead = mb.slice_by_index(x=dims, begin=[0], end=[2])
            per_head = mb.floor_div(x=mb.gather(x=dims, indices=[2], axis=0), y=4)
            target = mb.concat(values=(lead, [4], per_head), axis=0)
            return mb.reshape(x=x, shape=target, name="heads")

        return prog

    after = check(build)
    (expand, reshape) = [op for op in iter_ops(after) if op.op_type != "const"]
    assert (expand.op_type, expand.axes.val.tolist(), reshape.x) == ("expand_dims", [3], expand.outputs[0])
    assert reshape.shape.val.tolist() == [0, 0, 4, 8] and reshape.outputs[0].shape == (B, S, 4, 8)


# -- 1. static shape ---------------------------------------------------------------------------


def test_static_shape_becomes_int32_const():
    """%dims = shape(x=%x)  # x: [2, 3, 4]   →   %dims = const(val=[2, 3, 4])"""

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4))], opset_version=ct.target.iOS17)
        def prog(x):
            return mb.shape(x=x, name="dims")

        return prog

    after = check(build, sizes=(1,))
    assert op_counts(after) == {}
    value = output_value(after)
    assert value.dtype == np.int32 and value.tolist() == [2, 3, 4]


def webnn_style_program():
    """Static shapes, reshape targets from shape/gather/mul/concat, a fill shaped by shape."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 6, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        dims = mb.shape(x=x)
        rows = mb.mul(x=mb.gather(x=dims, indices=[0], axis=0), y=mb.gather(x=dims, indices=[1], axis=0))
        flat = mb.reshape(x=x, shape=mb.concat(values=(rows, mb.gather(x=dims, indices=[2], axis=0)), axis=0))
        ones = mb.fill(shape=mb.shape(x=flat), value=1.0)
        return mb.add(x=flat, y=ones, name="out")

    return prog


def test_static_webnn_program_under_empty_pipeline_keeps_no_shape_op():
    empty = mil_passes.pipeline(PassPipeline.EMPTY)
    after = check(webnn_style_program, sizes=(1,), pass_name=empty)
    assert "shape" not in op_counts(after)
    assert const_target(after) == [[12, 8]]
    assert ops(after, "fill")[0].shape.val.tolist() == [12, 8]


def test_static_webnn_program_converts_with_empty_pipeline_without_shape_op():
    model = ct.convert(
        webnn_style_program(),
        pass_pipeline=mil_passes.pipeline(PassPipeline.EMPTY),
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS17,
        skip_model_load=True,
    )
    block = model.get_spec().mlProgram.functions["main"].block_specializations["CoreML7"]
    kinds = [op.type for op in block.operations]
    assert "shape" not in kinds and "reshape" in kinds


# -- 2. values computed from shape ops ---------------------------------------------------------


def values_program(fn, opset=ct.target.iOS17):
    """A program on x[B, S, 8, 4] whose outputs are ``fn(shape(x))``."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 8, 4))], opset_version=opset)
        def prog(x):
            outs = fn(mb.shape(x=x))
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            return tuple(mb.identity(x=v, name=f"out{i}") for i, v in enumerate(outs))

        return prog

    return build


FOLDED_VALUES = {
    # %v = gather(x=%dims, indices=[2, -1], axis=0)                      → [8, 4]
    "gather": (lambda d: mb.gather(x=d, indices=[2, -1], axis=0), [8, 4]),
    # %v = slice_by_index(x=%dims, begin=[2], end=[0], end_mask=[True])  → [8, 4]
    "slice_by_index": (lambda d: mb.slice_by_index(x=d, begin=[2], end=[0], end_mask=[True]), [8, 4]),
    "slice_by_index_reversed": (
        lambda d: mb.slice_by_index(x=d, begin=[0], end=[1], stride=[-1], begin_mask=[True]),
        [4, 8],
    ),
    "slice_by_index_squeezed": (lambda d: mb.slice_by_index(x=d, begin=[3], end=[4], squeeze_mask=[True]), 4),
    "slice_by_size": (lambda d: mb.slice_by_size(x=d, begin=[2], size=[-1]), [8, 4]),
    "reduce_prod": (
        lambda d: mb.reduce_prod(x=mb.slice_by_index(x=d, begin=[2], end=[4]), axes=[0], keep_dims=True),
        [32],
    ),
    "stack": (
        lambda d: mb.stack(values=(mb.gather(x=d, indices=3, axis=0), mb.gather(x=d, indices=2, axis=0)), axis=0),
        [4, 8],
    ),
    "expand_dims": (lambda d: mb.expand_dims(x=mb.gather(x=d, indices=2, axis=0), axes=[0]), [8]),
    "squeeze": (lambda d: mb.squeeze(x=mb.slice_by_index(x=d, begin=[2], end=[3]), axes=[0]), 8),
    "reshape": (lambda d: mb.reshape(x=mb.gather(x=d, indices=2, axis=0), shape=[1]), [8]),
    "tile": (lambda d: mb.tile(x=mb.slice_by_index(x=d, begin=[2], end=[4]), reps=[2]), [8, 4, 8, 4]),
    "fill": (lambda d: mb.fill(shape=mb.slice_by_index(x=d, begin=[3], end=[4]), value=7), [7, 7, 7, 7]),
    # the scale of attention: 1 / dim as fp32
    "cast_real_div": (
        lambda d: mb.real_div(x=1.0, y=mb.cast(x=mb.gather(x=d, indices=3, axis=0), dtype="fp32")),
        np.float32(0.25),
    ),
    "cast_round_trip": (
        lambda d: mb.cast(x=mb.cast(x=mb.gather(x=d, indices=2, axis=0), dtype="fp32"), dtype="int32"),
        8,
    ),
    "arithmetic": (
        lambda d: [
            mb.add(x=mb.gather(x=d, indices=2, axis=0), y=1),
            mb.sub(x=mb.gather(x=d, indices=2, axis=0), y=mb.gather(x=d, indices=3, axis=0)),
            mb.floor_div(x=mb.gather(x=d, indices=2, axis=0), y=3),
            mb.real_div(x=mb.gather(x=d, indices=2, axis=0), y=4),
            mb.maximum(x=mb.gather(x=d, indices=[2, 3], axis=0), y=[5, 5]),
            mb.minimum(x=mb.gather(x=d, indices=[2, 3], axis=0), y=5),
        ],
        [9, 4, 2, 2, [8, 5], [5, 4]],
    ),
    # identities that hold for every size of a run-time dim
    "runtime_identities": (
        lambda d: [
            mb.sub(x=mb.gather(x=d, indices=0, axis=0), y=mb.gather(x=d, indices=0, axis=0)),
            mb.mul(x=mb.gather(x=d, indices=1, axis=0), y=0),
        ],
        [0, 0],
    ),
    # a size times -0.0 is -0.0 (check_pass compares bit for bit)
    "runtime_signed_zeros": (
        lambda d: [
            mb.mul(x=mb.cast(x=mb.gather(x=d, indices=0, axis=0), dtype="fp32"), y=np.float32(-0.0)),
            mb.mul(x=np.float32(-0.0), y=mb.cast(x=mb.gather(x=d, indices=1, axis=0), dtype="fp32")),
            mb.mul(x=mb.cast(x=mb.gather(x=d, indices=0, axis=0), dtype="fp32"), y=np.float32(0.0)),
        ],
        [np.float32(-0.0), np.float32(-0.0), np.float32(0.0)],
    ),
    "broadcast": (
        lambda d: mb.mul(x=mb.slice_by_index(x=d, begin=[2], end=[4]), y=mb.gather(x=d, indices=[3], axis=0)),
        [32, 16],
    ),
}


@pytest.mark.parametrize("form", sorted(FOLDED_VALUES))
def test_value_from_static_dims_becomes_const(form):
    fn, want = FOLDED_VALUES[form]
    after = check(values_program(fn), sizes=(1, {"B": 2, "S": 3}))
    assert "shape" not in op_counts(after)
    wants = want if form in ("arithmetic", "runtime_identities", "runtime_signed_zeros") else [want]
    for index, value in enumerate(wants):
        got = output_value(after, index)
        assert got is not None and np.array_equal(got, value), (index, got, value)
        assert np.array_equal(np.signbit(got), np.signbit(value)), (index, got, value)


def test_split_folds_only_its_static_output():
    """%lead, %tail = split(x=%dims, split_sizes=[2, 2])  →  %tail = const([8, 4]); %lead stays."""
    after = check(values_program(lambda d: list(mb.split(x=d, split_sizes=[2, 2], axis=0))))
    assert op_counts(after)["split"] == 1 and output_value(after, 1).tolist() == [8, 4]
    assert output_value(after, 0) is None


REFUSED_VALUES = {
    "runtime dim": (lambda d: mb.gather(x=d, indices=0, axis=0), "value [B] is not known before run time"),
    "inexact int real_div": (
        lambda d: mb.real_div(x=mb.gather(x=d, indices=2, axis=0), y=3),
        "value [?] is not known before run time",
    ),
    "float to int truncation": (
        lambda d: mb.cast(
            x=mb.real_div(x=mb.cast(x=mb.gather(x=d, indices=2, axis=0), dtype="fp32"), y=3.0), dtype="int32"
        ),
        "value [?] is not known before run time",
    ),
    "interleaved concat": (
        lambda d: mb.concat(values=(mb.gather(x=d, indices=[2], axis=0), [1]), axis=0, interleave=True),
        "value [?, ?] is not known before run time",
    ),
    "product of run-time dims": (
        lambda d: mb.reduce_prod(x=mb.slice_by_index(x=d, begin=[0], end=[2])),
        "value [?] is not known before run time",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_VALUES))
def test_value_that_needs_the_run_time_stays(case):
    fn, reason = REFUSED_VALUES[case]
    build = values_program(fn)
    check(build, sizes=(1, {"B": 3, "S": 2}))
    prog = build()
    refusals = run(prog)
    last = [op for op in prog.functions["main"].operations if op.op_type == "identity"][-1].x.op
    # The op stays. Once the static pieces feeding it are consts it no longer reads a shape op,
    # so it is reported only while it does (then with this reason).
    assert refusals.get(last.name, reason) == reason
    assert last.enclosing_block is not None


def test_const_arithmetic_is_left_to_const_elimination():
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(n):
        step = mb.add(x=np.array([1, 2, 3], np.int32), y=1, name="step")
        return mb.add(x=n, y=step, name="out")

    # Neither add reads a shape op: not candidates, so nothing is reported and nothing changes.
    before = str(prog)
    assert run(prog) == {}
    assert str(prog) == before


def test_large_tensor_is_not_a_shape_value():
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, 300))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=x, y=1.0, name="out")

    assert run(prog) == {}  # not a shape value: not a candidate, nothing reported


def test_each_value_is_computed_once_per_run(monkeypatch):
    """A chain of small-vector arithmetic: each var's value is computed once in a run, not once
    per op that reads it (a memo per match made a 1,000-op chain take minutes)."""
    from mil_passes.passes._shape_values import Values

    layers = 60

    @mb.program(input_specs=[mb.TensorSpec(shape=(4,))], opset_version=ct.target.iOS17)
    def prog(x):
        for _ in range(layers):
            x = mb.add(x=x, y=1.0)
        return x

    evaluated = []
    original = Values._evaluate
    monkeypatch.setattr(Values, "_evaluate", lambda self, var: evaluated.append(var) or original(self, var))
    assert run(prog) == {}
    assert len(evaluated) <= 3 * layers


# -- 3. reshape targets ------------------------------------------------------------------------


def reshape_program(x_shape, target_fn, opset=ct.target.iOS17, prefix=None):
    """x → reshape(x, target_fn(shape(x))); ``prefix`` transforms x first."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=x_shape)], opset_version=opset)
        def prog(x):
            source = prefix(x) if prefix else x
            return mb.reshape(x=source, shape=target_fn(mb.shape(x=source)), name="out")

        return prog

    return build


def dims_of(d, *axes):
    return mb.gather(x=d, indices=list(axes), axis=0)


RESHAPES = {
    # %t = concat((%dims[0:2], [4, 8]))  x: [B, S, 32]
    # → %e = expand_dims(x, axes=[3]); %out = reshape(%e, [0, 0, 4, 8])
    "unflatten": (
        (B, S, 32),
        lambda d: mb.concat(values=(dims_of(d, 0, 1), [4, 8]), axis=0),
        [[0, 0, 4, 8]],
        {"expand_dims": 1},
    ),
    # torch's unflatten(-1, (4, -1)) computes [B, S, 4, -1]: the -1 becomes 8
    "unflatten_minus_one": (
        (B, S, 32),
        lambda d: mb.concat(values=(dims_of(d, 0, 1), [4, -1]), axis=0),
        [[0, 0, 4, 8]],
        {"expand_dims": 1},
    ),
    # %t = concat((%dims[0:2], reduce_prod(%dims[2:4])))  x: [B, S, 4, 8]
    # → %r = reshape(x, [0, 0, 32, 1]); %out = squeeze(%r, axes=[3])
    "flatten": (
        (B, S, 4, 8),
        lambda d: mb.concat(
            values=(dims_of(d, 0, 1), mb.reduce_prod(x=dims_of(d, 2, 3), axes=[0], keep_dims=True)), axis=0
        ),
        [[0, 0, 32, 1]],
        {"squeeze": 1},
    ),
    "same_rank": ((B, S, 4, 8), lambda d: mb.concat(values=(dims_of(d, 0, 1), [8, 4]), axis=0), [[0, 0, 8, 4]], {}),
    # one run-time size: -1 is enough, no zeros, no extra ops
    "one_runtime_dim": (
        (B, 4, 8),
        lambda d: mb.concat(values=(dims_of(d, 0), mb.mul(x=dims_of(d, 1), y=dims_of(d, 2))), axis=0),
        [[-1, 32]],
        {},
    ),
    "merge_runtime_dims": (
        (B, S, 32),
        lambda d: mb.concat(values=(mb.mul(x=dims_of(d, 0), y=dims_of(d, 1)), dims_of(d, 2)), axis=0),
        [[-1, 32]],
        {},
    ),
    # run-time dims at the end: size-1 axes go in front
    "aligned_right": (
        (8, B, S),
        lambda d: mb.concat(values=([2, 4], dims_of(d, 1, 2)), axis=0),
        [[2, 4, 0, 0]],
        {"expand_dims": 1},
    ),
    # run-time dims in another order: the one that keeps its order is copied, the other is -1
    # → %e = expand_dims(x, axes=[3]); %r = reshape(%e, [1, 0, -1, 32]); %out = squeeze(%r, axes=[0])
    "swapped": (
        (B, S, 32),
        lambda d: mb.concat(values=(dims_of(d, 1, 0), [32]), axis=0),
        [[1, 0, -1, 32]],
        {"expand_dims": 1, "squeeze": 1},
    ),
    # a size-1 axis of x between the shared dims: x [4, B, S, 1] → [2, 2, B, S]
    "size_one_axis_dropped": (
        (4, B, S, 1),
        lambda d: mb.concat(values=([2, 2], dims_of(d, 1, 2)), axis=0),
        [[2, 2, 0, 0, 1]],
        {"expand_dims": 1, "squeeze": 1},
    ),
    # identities keep a dim: B + 0 and S * 1 are still B and S
    "identities": (
        (B, S, 32),
        lambda d: mb.concat(values=(mb.add(x=dims_of(d, 0), y=0), mb.mul(x=dims_of(d, 1), y=1), [2, 16]), axis=0),
        [[0, 0, 2, 16]],
        {"expand_dims": 1},
    ),
    # torch's frontend joins one scalar per dim: concat((B, S, 2, 16)) of rank-0 values
    "scalars_joined": (
        (B, S, 32),
        lambda d: mb.concat(
            values=(mb.gather(x=d, indices=0, axis=0), mb.gather(x=d, indices=1, axis=0), np.int32(2), np.int32(16)),
            axis=0,
        ),
        [[0, 0, 2, 16]],
        {"expand_dims": 1},
    ),
    # a dim reaching the target through cast to fp32 and back
    "cast_round_trip": (
        (B, S, 32),
        lambda d: mb.concat(
            values=(mb.cast(x=mb.cast(x=dims_of(d, 0, 1), dtype="fp32"), dtype="int32"), [32, 1]), axis=0
        ),
        [[0, 0, 32, 1]],
        {"expand_dims": 1},
    ),
}


@pytest.mark.parametrize("opset", OPSETS, ids=["iOS16", "iOS17"])
@pytest.mark.parametrize("form", sorted(RESHAPES))
def test_reshape_target_becomes_const(form, opset):
    x_shape, target_fn, targets, extra = RESHAPES[form]
    after = check(reshape_program(x_shape, target_fn, opset))
    counts = op_counts(after)
    assert "shape" not in counts and const_target(after) == targets
    assert {k: v for k, v in counts.items() if k in ("expand_dims", "squeeze")} == extra
    out = after.functions["main"].outputs[0]
    assert 0 not in [d for d in out.shape if not types.symbolic.is_symbolic(d)]


def test_reshape_after_reshape_gets_a_size_one_axis_between():
    """reshape(reshape(y, t1), t2) with zeros in t2 would be merged by coremltools'
    merge_consecutive_reshapes into reshape(y, t2), reading t2's zeros against y."""

    def prefix(y):  # [B, S, 4, 8] → [B, 2S, 2, 8], its target computed from shape
        d = mb.shape(x=y)
        doubled = mb.mul(x=dims_of(d, 1), y=2)
        return mb.reshape(x=y, shape=mb.concat(values=(dims_of(d, 0), doubled, [2, 8]), axis=0))

    build = reshape_program(
        (B, S, 4, 8), lambda d: mb.concat(values=(dims_of(d, 0, 1), [16, 1]), axis=0), prefix=prefix
    )
    after = check(build)
    assert const_target(after) == [[0, -1, 2, 8], [0, 0, 16, 1, 1]]
    with_merge = PassPipeline(pass_names=[PASS, "common::merge_consecutive_reshapes"], pipeline_name="merge")
    check(build, pass_name=with_merge)


def test_coremltools_merges_zero_targets_wrongly():
    """Why the size-one axis above: merging reads [0, 0, 16, 1] against [B, S, 4, 8]."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 4, 8))], opset_version=ct.target.iOS17)
        def prog(y):
            middle = mb.reshape(x=y, shape=[0, -1, 2, 8])
            return mb.reshape(x=middle, shape=[0, 0, 16, 1], name="out")

        return prog

    prog = build()
    PASS_REGISTRY["common::merge_consecutive_reshapes"](prog)
    assert const_target(prog) == [[0, 0, 16, 1]] and ops(prog, "reshape")[0].x.op is None
    feeds = random_inputs(prog, sizes={"B": 2, "S": 3})
    with pytest.raises(ValueError):  # 2*3*32 elements do not fill [2, 3, 16, 1]
        evaluate(prog, feeds)


def test_literal_zero_in_computed_target_gets_the_true_type():
    """coremltools types reshape(x[B, S, 32], concat([0], dims[1:])) as [0, S, 32]."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 32))], opset_version=ct.target.iOS17)
        def prog(x):
            d = mb.shape(x=x)
            return mb.reshape(x=x, shape=mb.concat(values=([0], dims_of(d, 1, 2)), axis=0), name="out")

        return prog

    assert build().functions["main"].outputs[0].shape[0] == 0  # the coremltools type
    after = build()
    run(after)
    out = after.functions["main"].outputs[0]
    assert out.shape == (B, S, 32) and const_target(after) == [[0, 0, 32]]
    x = random_inputs(after, sizes={"B": 2, "S": 3})
    assert np.array_equal(evaluate(after, x)["out"], x["x"])


def test_reshape_types_survive_type_inference_run_again():
    """reduce_transposes re-infers every op of a block: the created reshape keeps its type."""
    after = reshape_program((B, S, 32), RESHAPES["unflatten"][1])()
    run(after)
    before = {op.name: op.outputs[0].shape for op in iter_ops(after)}
    for op in iter_ops(after):
        op.type_value_inference(overwrite_output=True)
    assert {op.name: op.outputs[0].shape for op in iter_ops(after)} == before
    assert after.functions["main"].outputs[0].shape == (B, S, 4, 8)


def test_coremltools_types_a_zero_target_with_literal_zeros():
    """The coremltools 9.0 behaviour the type override exists for."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 32))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reshape(x=mb.expand_dims(x=x, axes=[-1]), shape=[0, 0, 4, 8], name="out")

    assert prog.functions["main"].outputs[0].shape == (0, 0, 4, 8)


def test_const_zero_target_typed_with_zeros_gets_its_true_type_and_so_do_the_ops_after_it():
    """common::add_fp16_cast re-creates reshapes, and coremltools types their 0s literally: the
    pass retypes them and infers again what reads them (a `shape` of them would fold to zeros)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 32))], opset_version=ct.target.iOS17)
    def prog(x):
        heads = mb.reshape(x=mb.expand_dims(x=x, axes=[-1]), shape=[0, 0, 4, 8], name="heads")
        moved = mb.transpose(x=heads, perm=[0, 2, 1, 3], name="moved")
        return moved, mb.shape(x=moved, name="dims")

    shapes = {op.name: op.outputs[0].shape for op in iter_ops(prog) if op.name in ("heads", "moved")}
    assert shapes == {"heads": (0, 0, 4, 8), "moved": (0, 4, 0, 8)}  # coremltools' types
    assert list(output_value(prog, 1)) == [0, 4, 0, 8]  # and the value a shape of them gets
    run(prog)
    outputs = prog.functions["main"].outputs
    assert outputs[0].shape == (B, 4, S, 8) and output_value(prog, 1) is None
    x = random_inputs(prog, sizes={"B": 2, "S": 3})
    got = evaluate(prog, x)
    assert np.array_equal(got["moved"], x["x"].reshape(2, 3, 4, 8).transpose(0, 2, 1, 3))
    assert list(got["dims"]) == [2, 4, 3, 8]


def test_fp16_attention_keeps_true_reshape_types_and_equals_torch(attention):
    """Converted at FLOAT16 (coremltools' default), the folded reshapes are re-created by
    common::add_fp16_cast; the run after it gives them back their run-time dims."""
    torch = pytest.importorskip("torch")
    model, traced, _ = attention
    mlmodel = ct.convert(
        traced,
        inputs=[ct.TensorType(shape=(ct.RangeDim(1, 8), ct.RangeDim(1, 64), E), dtype=np.float32)],
        pass_pipeline=mil_passes.pipeline(),
        compute_precision=ct.precision.FLOAT16,
        minimum_deployment_target=ct.target.iOS17,
        convert_to="mlprogram",
        skip_model_load=True,
    )
    prog = mlmodel._mil_program
    assert "shape" not in op_counts(prog)
    for op in ops(prog, "reshape"):
        assert 0 not in [d for d in op.outputs[0].shape if not types.symbolic.is_symbolic(d)], op.name
    (name,) = [v.name for v in prog.functions["main"].outputs]
    x = np.random.default_rng(0).standard_normal((2, 5, E)).astype(np.float32)
    got = evaluate(prog, {"x": x})[name].astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(got - want)) <= 1e-2 * np.max(np.abs(want))


NOT_CANDIDATES = {
    "already const": lambda x, n: mb.reshape(x=x, shape=[-1, 4, 8], name="out"),
    "target from an input": lambda x, n: mb.reshape(x=x, shape=n, name="out"),
}


@pytest.mark.parametrize("case", sorted(NOT_CANDIDATES))
def test_reshape_without_a_shape_computed_target_is_not_a_candidate(case):
    @mb.program(
        input_specs=[mb.TensorSpec(shape=(B, 32)), mb.TensorSpec(shape=(3,), dtype=types.int32)],
        opset_version=ct.target.iOS17,
    )
    def prog(x, n):
        return NOT_CANDIDATES[case](x, n)

    before = str(prog)
    assert run(prog) == {}
    assert str(prog) == before


REFUSED_RESHAPES = {
    "run-time dims reversed": (
        (B, S, T),
        lambda x, n: mb.reshape(x=x, shape=dims_of(mb.shape(x=x), 2, 1, 0), name="out"),
        "target [T, S, B] of x [B, S, T]: S, B are run-time sizes a const target can neither copy from x "
        "in place (0) nor infer (-1 stands for one size only)",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_RESHAPES))
def test_reshape_that_needs_the_run_time_stays(case):
    x_shape, body, reason = REFUSED_RESHAPES[case]

    def build():
        specs = [mb.TensorSpec(shape=x_shape), mb.TensorSpec(shape=(3,), dtype=types.int32)]

        @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
        def prog(x, n):
            return body(x, n)

        return prog

    prog = build()
    assert run(prog)["out"] == reason
    if case == "run-time dims reversed":
        assert "shape" in op_counts(prog)
        check(build, sizes=({"B": 2, "S": 3, "T": 5},))


def test_target_of_run_time_length_stays():
    @mb.program(
        input_specs=[mb.TensorSpec(shape=(B, 32)), mb.TensorSpec(shape=(T,), dtype=types.int32)],
        opset_version=ct.target.iOS17,
    )
    def prog(x, n):
        return mb.reshape(x=x, shape=n, name="out")

    assert run(prog)["out"] == "target has no static length"


def test_x_of_unknown_rank_stays():
    @mb.program(
        input_specs=[mb.TensorSpec(shape=(B, 32)), mb.TensorSpec(shape=(T,), dtype=types.int32)],
        opset_version=ct.target.iOS17,
    )
    def prog(y, n):
        x = mb.reshape(x=y, shape=n)  # rank known only at run time
        return mb.reshape(x=x, shape=mb.shape(x=y), name="out")

    assert run(prog)["out"] == "x has no fixed rank"


def test_literal_zero_against_another_rank_before_ios17_stays():
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, 32))], opset_version=ct.target.iOS16)
    def prog(x):
        d = mb.shape(x=x)
        return mb.reshape(x=x, shape=mb.concat(values=([0], mb.mul(x=dims_of(d, 1), y=32)), axis=0), name="out")

    assert run(prog)["out"] == "target [0, ?] holds a 0 but not x's rank"


def test_negative_size_in_target_stays():
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, 32))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reshape(x=x, shape=mb.concat(values=(dims_of(mb.shape(x=x), 0), [-2]), axis=0), name="out")

    assert run(prog)["out"] == "target [B, -2] holds -2"


# -- 4. reasons for surviving shape ops --------------------------------------------------------


def test_surviving_shape_op_names_the_op_that_reads_run_time_dims(caplog):
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        dims = mb.shape(x=x, name="dims")
        return mb.fill(shape=dims, value=0.0, name="out")

    with caplog.at_level("DEBUG", logger="mil_passes"):
        reasons = run(prog)
    assert reasons["dims"] == "dims B of 'x' are run-time; fill 'out' reads [B, 4]"
    assert "dims B of 'x' are run-time" in caplog.text


def test_surviving_shape_op_names_the_refused_reshape():
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, S, T))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reshape(x=x, shape=dims_of(mb.shape(x=x, name="dims"), 2, 1, 0), name="out")

    assert run(prog)["dims"] == (
        "dims B, S, T of 'x' are run-time; reshape 'out': target [T, S, B] of x [B, S, T]: S, B are run-time sizes "
        "a const target can neither copy from x in place (0) nor infer (-1 stands for one size only)"
    )


def test_shape_op_returned_by_the_function_stays():
    @mb.program(input_specs=[mb.TensorSpec(shape=(B, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.shape(x=x, name="dims")

    assert run(prog)["dims"] == "dims B of 'x' are run-time; 'dims' is a block output"


# -- random shape chains -----------------------------------------------------------------------


@st.composite
def shape_chains(draw):
    """x with 0–3 run-time dims; a target built from its shape by gather/slice/arith/concat,
    its pieces sometimes reordered; reshape(x, target) and a fill shaped by the static dims."""
    rank = draw(st.integers(2, 4))
    symbols = iter((B, S, T))
    x_shape = []
    for _ in range(rank):
        runtime = draw(st.booleans()) and len([d for d in x_shape if isinstance(d, Symbol)]) < 3
        x_shape.append(next(symbols) if runtime else draw(st.sampled_from((1, 2, 4, 6, 12))))
    cuts = [a for a in range(1, rank) if draw(st.integers(0, 3))]  # groups of consecutive axes
    groups = [list(range(a, b)) for a, b in zip([0] + cuts, cuts + [rank])]
    recipe = []
    for group in groups:
        static = all(not isinstance(x_shape[a], Symbol) for a in group)
        size = int(np.prod([x_shape[a] for a in group])) if static else None
        splits = [f for f in (2, 3) if size and size % f == 0 and size > f]
        if splits and draw(st.integers(0, 2)):
            recipe.append(("split", group, draw(st.sampled_from(splits))))
        else:
            recipe.append(
                (draw(st.sampled_from(("gather", "slice", "slice_by_size", "identity", "cast"))), group, None)
            )
    if draw(st.booleans()):  # any order of the pieces is a valid target: dims move position
        recipe = [recipe[i] for i in draw(st.permutations(range(len(recipe))))]
    return tuple(x_shape), recipe, draw(st.sampled_from(OPSETS)), draw(st.booleans())


def piece(dims, kind, group, factor):
    """A 1-D int32 var: the product of dims[group] (or its split by ``factor``)."""
    lo, hi = group[0], group[-1] + 1
    if kind == "slice_by_size":
        span = mb.slice_by_size(x=dims, begin=[lo], size=[hi - lo])
    elif kind == "slice":
        span = mb.slice_by_index(x=dims, begin=[lo], end=[hi])
    else:
        span = mb.gather(x=dims, indices=group, axis=0)
    product = span if len(group) == 1 else mb.reduce_prod(x=span, axes=[0], keep_dims=True)
    if kind == "identity":
        product = mb.mul(x=mb.add(x=product, y=0), y=1)
    elif kind == "cast":
        product = mb.cast(x=mb.cast(x=product, dtype="fp32"), dtype="int32")
    if factor is None:
        return [product]
    return [mb.floor_div(x=product, y=factor), np.array([factor], np.int32)]


@given(shape_chains())
def test_random_shape_chains_fold_and_keep_values(chain):
    x_shape, recipe, opset, with_fill = chain
    static_axes = [a for a, d in enumerate(x_shape) if not isinstance(d, Symbol)]

    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape=x_shape)], opset_version=opset)
        def prog(x):
            dims = mb.shape(x=x)
            pieces = [p for kind, group, factor in recipe for p in piece(dims, kind, group, factor)]
            outs = [mb.reshape(x=x, shape=mb.concat(values=pieces, axis=0), name="out")]
            if with_fill and static_axes:
                outs.append(mb.fill(shape=mb.gather(x=dims, indices=static_axes, axis=0), value=2.0, name="ones"))
            return tuple(outs)

        return prog

    names = [str(d) for d in x_shape if isinstance(d, Symbol)]
    sizes = (1, {name: size for name, size in zip(names, (3, 2, 5))})
    after = check(build, sizes=sizes)
    merged_runtime = sum(
        len(group) > 1 and any(isinstance(x_shape[a], Symbol) for a in group) for _, group, _ in recipe
    )
    in_order = [g for _, g, _ in recipe] == sorted(g for _, g, _ in recipe)
    if in_order and merged_runtime <= 1:  # at most one target dim mixes a run-time dim: all folds
        assert "shape" not in op_counts(after)
    out = after.functions["main"].outputs[0]
    assert 0 not in [d for d in out.shape if not types.symbolic.is_symbolic(d)]


# -- a torch attention block, converted with flexible batch and sequence -----------------------

E, HEADS = 32, 4


def attention_model():
    torch = pytest.importorskip("torch")

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(E, 3 * E), torch.nn.Linear(E, E)

        def forward(self, x):
            q, k, v = (t.unflatten(-1, (HEADS, -1)).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
            weights = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5), dim=-1)
            return self.out((weights @ v).transpose(1, 2).flatten(2))

    torch.manual_seed(0)
    model = Attention().eval()
    return model, torch.jit.trace(model, torch.randn(2, 5, E))


def convert(traced, pipeline):
    return ct.convert(
        traced,
        inputs=[ct.TensorType(shape=(ct.RangeDim(1, 8), ct.RangeDim(1, 64), E))],
        pass_pipeline=pipeline,
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        convert_to="mlprogram",
        skip_model_load=True,
    )


@pytest.fixture(scope="module")
def attention():
    model, traced = attention_model()
    return model, traced, convert(traced, mil_passes.pipeline())


def test_attention_keeps_no_shape_op_and_equals_torch(attention):
    torch = pytest.importorskip("torch")
    model, _, mlmodel = attention
    prog = mlmodel._mil_program
    assert "shape" not in op_counts(prog)
    assert op_counts(prog)["reshape"] == 4
    (name,) = [v.name for v in prog.functions["main"].outputs]
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 1), (2, 5), (1, 64), (8, 7)):
        x = rng.standard_normal((batch, seq, E)).astype(np.float32)
        got = evaluate(prog, {"x": x})[name]
        want = model(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_default_pipeline_keeps_four_shape_ops_on_the_same_attention(attention):
    """The motivating number (docs/evidence.md §3): coremltools' DEFAULT leaves run-time shape code."""
    _, traced, _ = attention
    counts = op_counts(convert(traced, PassPipeline.DEFAULT)._mil_program)
    assert counts["shape"] == 4 and counts["concat"] == 4


def declared_dims(tensor_type) -> list:
    return [int(d.constant.size) if d.WhichOneof("dimension") == "constant" else "?" for d in tensor_type.dimensions]


def test_saved_model_declares_the_true_dims_of_created_reshapes(attention, tmp_path):
    _, _, mlmodel = attention
    path = tmp_path / "attention.mlpackage"
    mlmodel.save(str(path))
    for spec in (mlmodel.get_spec(), ct.utils.load_spec(str(path))):
        block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
        reshapes = [op for op in block.operations if op.type == "reshape"]
        dims = sorted(declared_dims(op.outputs[0].type.tensorType) for op in reshapes)
        assert dims == [["?", "?", 4, 8]] * 3 + [["?", "?", 32, 1]]
