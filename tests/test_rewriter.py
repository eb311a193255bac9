"""The shared rewriter: traversal of every block, batched replacement, names, dead ops, refusals."""

import logging

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Operation, types

from mil_passes.rewriter import (
    Declined,
    RewritePattern,
    Rewriter,
    apply_patterns,
    find_matches,
    iter_blocks,
    iter_ops,
    program_names,
)
from mil_passes.testing import assert_equivalent, op_counts

IOS17 = ct.target.iOS17


class DoubleReluToRelu(RewritePattern):
    """``relu(relu(x))`` → ``relu(x)``; refuses when the inner relu has other uses."""

    op_types = ("relu",)

    def match(self, op):
        inner = op.x.op
        if inner is None or inner.op_type != "relu":
            return None
        if len(inner.outputs[0].child_ops) > 1:
            return Declined(op, "inner relu has other uses")
        return inner

    def rewrite(self, op, inner, rewriter):
        return inner.outputs[0]


class AddZeroToIdentity(RewritePattern):
    """``add(x, 0.0)`` → a new ``relu`` of ``x`` when x ≥ 0 is known (here: x is a relu)."""

    op_types = ("add",)

    def match(self, op):
        if op.y.val is None or np.any(op.y.val != 0) or op.x.op is None or op.x.op.op_type != "relu":
            return None
        return True

    def rewrite(self, op, match, rewriter):
        return rewriter.add("relu", op.name + "_relu", x=op.x)


def triple_relu():
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=IOS17)
    def prog(x):
        return mb.relu(x=mb.relu(x=mb.relu(x=x)), name="out")

    return prog


def test_rewrites_to_a_fixed_point_and_keeps_output_name():
    prog = triple_relu()
    result = apply_patterns(prog, [DoubleReluToRelu()], pass_name="test")
    assert result.rewritten == 2 and result.removed_ops == 2
    assert op_counts(prog) == {"relu": 1}
    assert prog.functions["main"].outputs[0].name == "out"
    prog.validate()
    assert_equivalent(triple_relu(), prog)


def test_created_ops_are_visited_again():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((4,))], opset_version=IOS17)
        def prog(x):
            return mb.relu(x=mb.add(x=mb.relu(x=x), y=0.0), name="out")

        return prog

    prog = build()
    result = apply_patterns(prog, [AddZeroToIdentity(), DoubleReluToRelu()], pass_name="test")
    # add → relu(relu(x)) (created), then relu(relu(relu(x))) folds twice.
    assert op_counts(prog) == {"relu": 1}
    assert result.rewritten == 3
    assert_equivalent(build(), prog)


def test_refusals_are_kept_and_logged(caplog):
    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        inner = mb.relu(x=x, name="inner")
        return mb.relu(x=inner, name="outer"), mb.sub(x=inner, y=1.0)

    with caplog.at_level(logging.DEBUG, logger="mil_passes"):
        result = apply_patterns(prog, [DoubleReluToRelu()], pass_name="webnn::test")
    assert result.rewritten == 0
    assert [str(r) for r in result.declined] == ["relu 'outer': inner relu has other uses"]
    assert "webnn::test left relu 'outer': inner relu has other uses" in caplog.text


def test_nested_blocks_are_rewritten():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((1,), dtype=types.bool)], opset_version=IOS17)
        def prog(x, p):
            return mb.cond(
                pred=mb.squeeze(x=p),
                _true_fn=lambda: mb.relu(x=mb.relu(x=x)),
                _false_fn=lambda: mb.sub(x=x, y=1.0),
                name="out",
            )

        return prog

    prog = build()
    assert apply_patterns(prog, [DoubleReluToRelu()], pass_name="test").rewritten == 1
    assert op_counts(prog)["relu"] == 1
    prog.validate()
    for flag in (True, False):
        assert_equivalent(build(), prog, inputs={"x": np.array([-1, 2], np.float32), "p": np.array([flag])})


class ReluToItsInput(RewritePattern):
    """``relu(x)`` → ``x``: wrong on purpose, it only moves a function output onto an input."""

    op_types = ("relu",)

    def match(self, op):
        return True

    def rewrite(self, op, match, rewriter):
        return op.x


def test_function_output_replaced_by_a_function_input_gets_an_identity_with_its_name():
    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        return mb.relu(x=x, name="out")

    apply_patterns(prog, [ReluToItsInput()], pass_name="test")
    func = prog.functions["main"]
    assert [o.name for o in func.outputs] == ["out"]
    assert op_counts(prog) == {"identity": 1}
    assert list(func.inputs) == ["x"]


def test_batched_replacement_sets_each_consumer_once(monkeypatch):
    """N windows joined by one stack: one set_inputs on the stack, not N (docs/evidence.md §3)."""
    layers = 50

    @mb.program(input_specs=[mb.TensorSpec((1, 4))], opset_version=IOS17)
    def prog(x):
        relus = [mb.relu(x=mb.relu(x=x)) for _ in range(layers)]
        return mb.stack(values=relus, axis=0, name="out")

    calls = []
    original = Operation.set_inputs

    def counting(self, *args, **kwargs):
        calls.append(self.op_type)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Operation, "set_inputs", counting)
    apply_patterns(prog, [DoubleReluToRelu()], pass_name="test")
    assert calls.count("stack") == 1
    assert op_counts(prog) == {"relu": layers, "stack": 1}


def test_unique_names_avoid_every_existing_name():
    prog = triple_relu()
    names = program_names(prog)
    assert {"x", "out"} <= names
    rewriter = Rewriter(prog)
    assert rewriter.unique_name("out") == "out_1"
    assert rewriter.unique_name("out") == "out_2"
    assert rewriter.unique_name("fresh") == "fresh"


def test_replacing_a_var_twice_is_an_error():
    prog = triple_relu()
    ops = [op for op in iter_ops(prog) if op.op_type == "relu"]
    rewriter = Rewriter(prog)
    rewriter.replace(ops[2].outputs[0], ops[0].outputs[0])
    with pytest.raises(ValueError, match="replaced twice"):
        rewriter.replace(ops[2].outputs[0], ops[1].outputs[0])


def test_recording_the_same_replacement_twice_is_once():
    prog = triple_relu()
    ops = [op for op in iter_ops(prog) if op.op_type == "relu"]
    rewriter = Rewriter(prog)
    rewriter.replace(ops[2].outputs[0], ops[0].outputs[0])
    rewriter.replace(ops[2].outputs[0], ops[0].outputs[0])
    assert rewriter.commit()[0] == 2  # the outer relus, now unread


def test_describe_is_the_op_the_cause_and_the_detail():
    class Described(DoubleReluToRelu):
        cause = "reads a relu: it reads the relu's input"

        def detail(self, op, inner):
            return f"'{inner.name}'"

    class Undetailed(DoubleReluToRelu):
        cause = Described.cause

    (first, _), _ = find_matches(triple_relu(), [Described()])
    assert first.describe() == f"relu '{first.op.name}' reads a relu: it reads the relu's input ('{first.match.name}')"
    assert first.cause == Described.cause
    (first, _), _ = find_matches(triple_relu(), [Undetailed()])
    assert first.describe() == f"relu '{first.op.name}' reads a relu: it reads the relu's input"


@pytest.mark.parametrize("method", ["describe", "cause"])
def test_a_pattern_written_the_old_way_fails_when_it_is_defined(method):
    with pytest.raises(TypeError, match="define those instead of describe"):
        type("OldStyle", (DoubleReluToRelu,), {method: lambda self, op, match: "said"})


def test_a_rewrite_that_returns_nothing_fails_loudly():
    class ReplacesByHand(DoubleReluToRelu):
        def rewrite(self, op, inner, rewriter):
            rewriter.replace(op.outputs[0], inner.outputs[0])

    with pytest.raises(TypeError, match="ReplacesByHand.rewrite returned None, not the new values"):
        apply_patterns(triple_relu(), [ReplacesByHand()], pass_name="test")


class MaximumWithASharedZero(RewritePattern):
    """``relu(x)`` → ``maximum(x, x - x)``, ``x - x`` shared by the relus of a block (finite ``x``)."""

    op_types = ("relu",)

    def match(self, op):
        return True

    def rewrite(self, op, match, rewriter):
        zero = rewriter.shared("zero", lambda: rewriter.add("sub", "zero", x=op.x, y=op.x))
        return rewriter.add("maximum", op.name, x=op.x, y=zero)


def test_a_shared_value_is_built_once_per_run_and_block():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((1,), dtype=types.bool)], opset_version=IOS17)
        def prog(x, p):
            branch = mb.cond(pred=mb.squeeze(x=p), _true_fn=lambda: mb.relu(x=x), _false_fn=lambda: mb.relu(x=x))
            return mb.add(x=mb.relu(x=x), y=mb.relu(x=x), name="sum"), mb.identity(x=branch, name="branch")

        return prog

    prog = build()
    assert apply_patterns(prog, [MaximumWithASharedZero()], pass_name="test").rewritten == 4
    prog.validate()
    subs = [op for op in iter_ops(prog) if op.op_type == "sub"]
    assert len({op.enclosing_block for op in subs}) == len(subs) == 3  # main and each branch
    assert_equivalent(build(), prog, inputs={"x": np.array([-1, 2], np.float32), "p": np.array([True])})


def test_iter_blocks_visits_nested_blocks_after_their_parent():
    @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((1,), dtype=types.bool)], opset_version=IOS17)
    def prog(x, p):
        return mb.cond(pred=mb.squeeze(x=p), _true_fn=lambda: mb.relu(x=x), _false_fn=lambda: mb.tanh(x=x))

    blocks = list(iter_blocks(prog))
    assert len(blocks) == 3 and blocks[0] is prog.functions["main"]
    assert {op.op_type for op in iter_ops(prog)} >= {"cond", "relu", "tanh", "squeeze"}


def test_identity_for_a_function_output_carries_the_scope_of_what_it_replaces():
    """Inside ct.convert of a torch model every op needs the essential scopes (docs/evidence.md §3)."""
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
    from coremltools.converters.mil.mil.scope import ScopeInfo, ScopeSource

    from mil_passes.rewriter import PatternPass

    class OutputIsInputPass(PatternPass):
        name = "test::output_is_input"

        def patterns(self):
            return [ReluToItsInput()]

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        with mb.scope(ScopeInfo(source=ScopeSource.TORCHSCRIPT_MODULE_NAME, data=["block.0"])):
            return mb.relu(x=x, name="out")

    prog._add_essential_scope_source(ScopeSource.TORCHSCRIPT_MODULE_NAME)
    OutputIsInputPass()(prog)  # __call__, as a pipeline runs it: under the graph-pass scope
    PASS_REGISTRY["common::dead_code_elimination"](prog)
    prog.validate(check_essential_scope=True)
    (identity,) = [op for op in iter_ops(prog) if op.op_type == "identity"]
    assert identity.scopes[ScopeSource.TORCHSCRIPT_MODULE_NAME] == ["block.0"]


def test_unique_names_of_one_base_take_linear_time(monkeypatch):
    """Each call resumes the base's search where the last stopped: 2,000 names of one base probe
    a few thousand candidates, not the 2 million a search from ``_1`` each time makes."""
    import mil_passes.rewriter as rewriter_module

    probes = []

    class CountingSet(set):
        def __contains__(self, name):
            probes.append(name)
            return super().__contains__(name)

    monkeypatch.setattr(rewriter_module, "program_names", lambda prog: CountingSet({"t"}))
    rewriter = Rewriter(triple_relu())
    names = [rewriter.unique_name("t") for _ in range(2000)]
    assert names[:3] == ["t_1", "t_2", "t_3"] and len(set(names)) == 2000
    assert len(probes) <= 3 * 2000
