"""The Neural Engine placement rules: each rule's trigger is flagged, and the nearest form the sources
place on the Neural Engine is not; --chip narrows the per-chip rules; the placement summary."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.lint import RULES, DimNames, lint, lint_report
from mil_passes.lint.chips import UnknownChip, family_of
from mil_passes.lint.placement import RULES as PLACEMENT_RULES
from mil_passes.lint.placement import program_rules

FP16 = types.fp16
IOS17, IOS18 = ct.target.iOS17, ct.target.iOS18


def one(shape, fn, dtype=FP16, opset=IOS17):
    """A program of one input of ``shape`` whose outputs ``fn(x)`` returns."""

    @mb.program(input_specs=[mb.TensorSpec(shape, dtype=dtype)], opset_version=opset)
    def prog(x):
        return fn(x)

    return prog


def two(shapes, fn, dtypes=(FP16, FP16)):
    @mb.program(input_specs=[mb.TensorSpec(s, dtype=d) for s, d in zip(shapes, dtypes)], opset_version=IOS17)
    def prog(x, y):
        return fn(x, y)

    return prog


def h16(*shape):
    return np.full(shape, 0.5, np.float16)


def conv(kernel, batch=1, weight_input=False):
    if weight_input:
        return two([(batch, 1, 32, 32), (1, 1, *kernel)], lambda x, w: mb.conv(x=x, weight=w, name="op"))
    return one((batch, 1, 64, 64), lambda x: mb.conv(x=x, weight=h16(1, 1, *kernel), name="op"))


def stateful(width, begin_from_input):
    """A cache of ``width`` written at position 3, a const or an input's value."""
    specs = [mb.StateTensorSpec((1, 4, width), dtype=FP16), mb.TensorSpec((1, 4, 1), dtype=FP16)]
    specs.append(mb.TensorSpec((3,), dtype=types.int32))

    @mb.program(input_specs=specs, opset_version=IOS18)
    def prog(cache, x, position):
        old = mb.read_state(input=cache)
        begin = position if begin_from_input else np.array([0, 0, 3], np.int32)
        end = mb.add(x=begin, y=np.array([1, 4, 1], np.int32)) if begin_from_input else np.array([1, 4, 4], np.int32)
        new = mb.slice_update(x=old, update=x, begin=begin, end=end, name="op")
        mb.coreml_update_state(state=cache, value=new)
        return mb.identity(x=new, name="y")

    return prog


def softmax_with_mask(fill):
    mask = np.zeros((1, 64), np.float16)
    mask[0, 40:] = fill
    return one((1, 64), lambda x: mb.softmax(x=mb.add(x=x, y=mask), axis=-1, name="op"))


def cond_program():
    @mb.program(input_specs=[mb.TensorSpec((1, 64), dtype=FP16), mb.TensorSpec((1,), dtype=types.bool)])
    def prog(x, flag):
        return mb.cond(
            pred=mb.squeeze(x=flag), _true_fn=lambda: mb.relu(x=x), _false_fn=lambda: mb.sigmoid(x=x), name="op"
        )

    return prog


def attention(length, heads=16):
    """An fp16 fused attention of ``heads`` x ``length`` x 64 queries (vx-lang/Vx#437's shapes)."""
    shape = (1, heads, length, 64)
    specs = [mb.TensorSpec(shape, dtype=FP16) for _ in range(3)]

    @mb.program(input_specs=specs, opset_version=IOS18)
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, name="op")

    return prog


def scatter_into(shape):
    """A scatter of one row into a tensor of ``shape`` (a KV cache written by scatter)."""
    updates = np.zeros((1, *shape[1:]), np.float16)
    return one(shape, lambda x: mb.scatter(data=x, indices=np.array([0], np.int32), updates=updates, name="op"))


def pool(x, stride):
    return mb.max_pool(x=x, kernel_sizes=[3, 3], strides=[stride, stride], pad_type="valid", name="op")


def int4_weights(dtype):
    """A linear whose weights are decompressed from blocks of ``dtype`` data."""

    def weights(x):
        data = np.zeros((64, 64), dtype=dtype)
        w = mb.constexpr_blockwise_shift_scale(data=data, scale=np.ones((64, 2), np.float16), name="op")
        return mb.linear(x=x, weight=w)

    return one((1, 64), weights, opset=IOS18)


def lstm_program():
    hidden = 32
    weights = dict(weight_ih=h16(4 * hidden, 32), weight_hh=h16(4 * hidden, hidden))
    init = np.zeros((1, hidden), np.float16)
    return one((4, 1, 32), lambda x: mb.lstm(x=x, initial_h=init, initial_c=init, **weights, name="op")[0])


# (rule, the trigger, the nearest form the sources place on the Neural Engine)
CASES = [
    (
        "ane-rank-over-5",
        lambda: one((1, 2, 3, 4, 32), lambda x: mb.reshape(x=x, shape=[1, 2, 3, 4, 1, 32], name="op")),
        lambda: one((1, 2, 3, 4, 32), lambda x: mb.reshape(x=x, shape=[2, 3, 4, 1, 32], name="op")),
    ),
    (
        "ane-fp32-compute",
        lambda: one((1, 64), lambda x: mb.relu(x=x, name="op"), dtype=types.fp32),
        lambda: one(
            (1, 64), lambda x: mb.cast(x=mb.relu(x=mb.cast(x=x, dtype="fp16"), name="op"), dtype="fp32"), types.fp32
        ),
    ),
    (
        "ane-int32-compute",
        lambda: one((1, 64), lambda x: mb.add(x=x, y=np.int32(1), name="op"), dtype=types.int32),
        lambda: one((1, 64), lambda x: mb.reduce_argmax(x=x, axis=-1, name="op")),
    ),
    (
        "ane-dim-too-large",
        lambda: one((1, 20000), lambda x: mb.relu(x=x, name="op")),
        lambda: one((1, 16384), lambda x: mb.relu(x=x, name="op")),
    ),
    (
        "ane-rank5-matmul",
        lambda: two([(2, 2, 2, 8, 64), (1, 2, 2, 64, 8)], lambda x, y: mb.matmul(x=x, y=y, name="op")),
        lambda: two([(2, 2, 512, 512), (2, 2, 512, 512)], lambda x, y: mb.matmul(x=x, y=y, name="op")),
    ),
    (
        "ane-gather",
        lambda: two([(1, 64), (4,)], lambda x, i: mb.gather(x=x, indices=i, axis=1, name="op"), (FP16, types.int32)),
        lambda: one((1, 64), lambda x: mb.slice_by_index(x=x, begin=[0, 4], end=[1, 8], name="op")),
    ),
    (
        "ane-topk-sort",
        lambda: one((1, 64), lambda x: mb.topk(x=x, k=2, axis=-1, name="op")[0]),
        lambda: one((1, 64), lambda x: mb.reduce_argmax(x=x, axis=-1, keep_dims=True, name="op")),
    ),
    (
        "ane-scatter",
        lambda: one(
            (4, 32), lambda x: mb.scatter(data=x, indices=np.array([1], np.int32), updates=h16(1, 32), name="op")
        ),
        lambda: one((4, 32), lambda x: mb.concat(values=(x, h16(1, 32)), axis=0, name="op")),
    ),
    (
        "ane-no-path-op",
        lambda: one((1, 64), lambda x: mb.mod(x=x, y=np.float16(3), name="op")),
        lambda: one((1, 64), lambda x: mb.mul(x=x, y=np.float16(3), name="op")),
    ),
    ("ane-recurrent", lstm_program, lambda: one((4, 1, 32), lambda x: mb.tanh(x=x, name="op"))),
    (
        "ane-control-flow",
        cond_program,
        lambda: two(
            [(1, 64), (1, 64)], lambda x, f: mb.select(cond=mb.greater(x=f, y=np.float16(0)), a=x, b=f, name="op")
        ),
    ),
    ("ane-conv-kernel", lambda: conv((1, 17)), lambda: conv((3, 3))),
    (
        "ane-argminmax-axis",
        lambda: one((1, 4096), lambda x: mb.reduce_argmax(x=x, axis=-1, name="op")),
        lambda: one((1, 2048), lambda x: mb.reduce_argmax(x=x, axis=-1, name="op")),
    ),
    (
        "ane-texture-ops",
        lambda: one((1, 64), lambda x: mb.sin(x=x, name="op")),
        lambda: one((1, 1, 64), lambda x: mb.pad(x=x, pad=[0, 0, 1, 1], mode="constant", name="op")),
    ),
    ("ane-dynamic-weight-conv", lambda: conv((3, 3), batch=2, weight_input=True), lambda: conv((3, 3), batch=2)),
    (
        "ane-deconv-strides",
        lambda: one((1, 1, 8, 8), lambda x: mb.conv_transpose(x=x, weight=h16(1, 1, 2, 2), strides=[1, 2], name="op")),
        lambda: one((1, 1, 8, 8), lambda x: mb.conv_transpose(x=x, weight=h16(1, 1, 2, 2), strides=[2, 2], name="op")),
    ),
    ("ane-neg-inf-const", lambda: softmax_with_mask(-np.inf), lambda: softmax_with_mask(-40000)),
    (
        "ane-fp16-log-softmax",
        lambda: one((1, 64), lambda x: mb.log(x=mb.softmax(x=x, axis=-1), name="op")),
        lambda: one((1, 64), lambda x: mb.log(x=mb.exp(x=x), name="op")),
    ),
    ("ane-small-attention", lambda: attention(1024), lambda: attention(2048)),
    ("ane-rank5-scatter", lambda: scatter_into((1, 2, 4, 8, 32)), lambda: scatter_into((2, 4, 8, 32))),
    (
        "ane-gather-nd-rank3",
        lambda: one((64, 32), lambda x: mb.gather_nd(x=x, indices=np.zeros((1, 8, 1), np.int32), name="op")),
        lambda: one((64, 32), lambda x: mb.gather_nd(x=x, indices=np.zeros((8, 1), np.int32), name="op")),
    ),
    (
        "ane-conv-stride",
        lambda: one((1, 1, 64, 64), lambda x: mb.conv(x=x, weight=h16(1, 1, 3, 3), strides=[5, 5], name="op")),
        lambda: one((1, 1, 64, 64), lambda x: mb.conv(x=x, weight=h16(1, 1, 3, 3), strides=[6, 6], name="op")),
    ),
    (
        "ane-pool-stride",
        lambda: one((1, 1, 64, 64), lambda x: pool(x, 3)),
        lambda: one((1, 1, 64, 64), lambda x: pool(x, 4)),
    ),
    ("ane-int4-blockwise", lambda: int4_weights(types.np_int4_dtype), lambda: int4_weights(np.int8)),
    ("ane-dynamic-state-update", lambda: stateful(64, True), lambda: stateful(64, False)),
    ("ane-state-width", lambda: stateful(270, False), lambda: stateful(256, False)),
    (
        "ane-last-axis-padding",
        lambda: one((1, 8), lambda x: mb.relu(x=x, name="op")),
        lambda: one((1, 32), lambda x: mb.relu(x=x, name="op")),
    ),
]
SUBJECTS = {"ane-state-width": "cache", "ane-last-axis-padding": "x"}


def rules_of(prog, subject="op", chip=None):
    return {f.rule for f in lint(prog, chip=chip) if f.op == subject}


@pytest.mark.parametrize("rule, trigger, allowed", CASES, ids=[case[0] for case in CASES])
def test_the_trigger_is_flagged_and_the_nearest_allowed_form_is_not(rule, trigger, allowed):
    subject = SUBJECTS.get(rule, "op")
    assert rule in rules_of(trigger(), subject)
    assert rule not in rules_of(allowed(), subject)


def test_every_placement_rule_has_a_case_and_a_public_source():
    below = {"ane-range-shape", "ane-model-size", "ane-refused-slice-of-concat", "ane-small-graph"}
    assert {rule.id for rule in PLACEMENT_RULES} == {case[0] for case in CASES} | below  # tested below
    for rule in PLACEMENT_RULES:
        assert rule.sources and all(s.ref and s.says and s.confidence in "MACD" for s in rule.sources)
        assert RULES[rule.id].severity == rule.severity


def test_a_flexible_input_is_flagged_and_an_enumerated_one_is_not():
    prog = one((1, get_new_symbol()), lambda x: mb.relu(x=x, name="op"))
    assert "ane-range-shape" in rules_of(prog, "x")
    enumerated = DimNames({}, frozenset({"x"}))
    assert "ane-range-shape" not in {f.rule for f in lint(prog, dims=enumerated)}


def test_weights_over_the_limit_are_flagged(monkeypatch):
    prog = one((1, 64), lambda x: mb.add(x=x, y=h16(1024, 64), name="op"))
    assert "ane-model-size" not in {f.rule for f in lint(prog)}
    monkeypatch.setattr(program_rules, "GIB", 1 << 16)
    (finding,) = [f for f in lint(prog) if f.rule == "ane-model-size"]
    assert finding.severity == "warning" and "0.0 GiB" not in finding.message


@pytest.mark.parametrize(
    "kernel, flagged_on",
    [((1, 14), {"M1"}), ((1, 17), {"M1", "M2", "M3", "M4"}), ((30, 1), {"M1"}), ((33, 1), {"M1", "M2", "M3", "M4"})]
    + [((13, 13), set())],
)
def test_conv_kernel_limits_differ_by_chip(kernel, flagged_on):
    for chip in ("M1", "M2", "M3", "M4"):
        assert ("ane-conv-kernel" in rules_of(conv(kernel), chip=chip)) == (chip in flagged_on), chip


def test_dims_over_16384_are_refused_up_to_m3_and_over_65536_everywhere():
    wide = one((1, 20000), lambda x: mb.relu(x=x, name="op"))
    assert "ane-dim-too-large" in rules_of(wide, chip="M3")
    assert "ane-dim-too-large" not in rules_of(wide, chip="M4")
    widest = one((1, 70000), lambda x: mb.relu(x=x, name="op"))
    assert "ane-dim-too-large" in rules_of(widest, chip="A19")
    channels = one((1, 70000, 1, 1), lambda x: mb.relu(x=x, name="op"))  # C over 65536
    assert "ane-dim-too-large" in rules_of(channels, chip="M5")


def test_sin_leaves_the_neural_engine_before_m3_only():
    prog = one((1, 64), lambda x: mb.sin(x=x, name="op"))
    assert [bool(rules_of(prog, chip=chip) & {"ane-texture-ops"}) for chip in ("M1", "M2", "M3", "A19")] == [
        True,
        True,
        False,
        False,
    ]
    (finding,) = [f for f in lint(prog) if f.rule == "ane-texture-ops"]
    assert "M1/A14, M2/A15" in finding.message


@pytest.mark.parametrize("name, family", [("M1", 13), ("m2 max", 14), ("A17 Pro", 16), ("a18", 17), ("H18", 18)])
def test_chip_names(name, family):
    assert family_of(name).number == family


def test_an_unknown_chip_names_the_known_ones():
    with pytest.raises(UnknownChip, match="unknown chip 'M9' .*M1, A14, .*A19"):
        lint(one((1, 64), lambda x: mb.relu(x=x)), chip="M9")


def test_a_finding_says_why_on_which_chips_and_what_to_do():
    (finding,) = [f for f in lint(conv((1, 14))) if f.rule == "ane-conv-kernel"]
    assert finding.severity == "warning"  # measured on the private compiler path only
    assert finding.op == "op" and "fp16 kernel of 1x14" in finding.message and "M1/A14" in finding.message
    assert "M2/A15" not in finding.message and "put the long kernel axis on the height" in finding.message


def segments_of(prog, chip=None):
    return lint_report(prog, chip=chip)[1]


@pytest.fixture
def any_size(monkeypatch):
    """The programs below are tiny: set Core ML's whole-graph cost decision aside."""
    monkeypatch.setattr(program_rules, "SMALL_GRAPH_BYTES", 0)


def matmul_of(n):
    return two([(1, 1, n, n), (1, 1, n, n)], lambda x, y: mb.matmul(x=x, y=y, name="op"))


def test_a_graph_too_small_for_the_neural_engine_runs_on_the_cpu_by_cost():
    assert segments_of(matmul_of(384)).by_cost == 1 and segments_of(matmul_of(512)).by_cost == 0
    findings, placement = lint_report(one((1, 64), lambda x: mb.sigmoid(x=mb.relu(x=x))))
    assert "ane-small-graph" not in {f.rule for f in findings}  # the summary line says it
    assert (placement.ops, placement.off_ane, placement.by_cost, len(placement.segments)) == (2, 2, 2, 1)
    assert placement.segments[0].cost and placement.off_rules == {"ane-small-graph": 2}
    assert "2 off the Neural Engine (ane-small-graph 2) [2 by cost]" in placement.summary()
    assert placement.as_dict()["runs"][0]["cost"] is True


def test_under_the_cost_decision_the_rules_still_count_what_they_take_off_and_their_segments(monkeypatch):
    three = one((1, 64), lambda x: mb.relu(x=mb.topk(x=mb.relu(x=x), k=2, axis=-1)[0]))
    small = segments_of(three)  # every op on the CPU: the topk by its rule, the relus by cost
    assert (small.off_ane, small.by_cost, len(small.segments), small.off_by_rules, small.rule_segments) == (
        3,
        2,
        1,
        1,
        3,
    )
    monkeypatch.setattr(program_rules, "SMALL_GRAPH_BYTES", 0)
    placement = segments_of(three)
    assert (placement.off_ane, len(placement.segments), placement.off_by_rules, placement.rule_segments) == (1, 3, 1, 3)


def test_relu_topk_relu_is_three_segments_and_an_all_ane_program_one(any_size):
    three = one((1, 64), lambda x: mb.relu(x=mb.topk(x=mb.relu(x=x), k=2, axis=-1)[0]))
    placement = segments_of(three)
    assert (placement.ops, placement.off_ane, len(placement.segments)) == (3, 1, 3)
    assert [s.side for s in placement.segments] == ["ane", "off", "ane"]
    assert placement.off_rules == {"ane-topk-sort": 1}
    document = placement.as_dict()
    assert (document["segments"], document["boundaries"], [r["unit"] for r in document["runs"]]) == (
        3,
        2,
        ["ane", "cpu_gpu", "ane"],
    )
    one_segment = segments_of(one((1, 64), lambda x: mb.sigmoid(x=mb.relu(x=x))))
    assert (one_segment.ops, one_segment.off_ane, len(one_segment.segments)) == (2, 0, 1)


def test_a_cost_does_not_move_an_op_off(any_size):
    placement = segments_of(one((1, 8), lambda x: mb.relu(x=x)))  # a last axis under 64 bytes: a cost
    assert placement.off_ane == 0 and len(placement.segments) == 1


def test_an_op_the_rules_cannot_judge_is_unknown_not_guessed():
    argmax = one((1, get_new_symbol()), lambda x: mb.reduce_argmax(x=mb.relu(x=x), axis=-1, name="op"))
    findings, placement = lint_report(argmax)
    assert "ane-argminmax-axis" not in {f.rule for f in findings}
    assert (placement.ops, placement.unknown, placement.off_ane, len(placement.segments)) == (2, 1, 0, 1)


def test_the_ops_of_a_control_flow_body_go_with_their_op(any_size):
    placement = segments_of(cond_program())
    assert placement.ops == 2 and placement.off_ane == 2  # the cond off, and the squeeze that only feeds it
    assert [place.why for place in placement.places] == ["glue", "rule"] and placement.glue == 1


def test_the_refused_window_takes_the_whole_model_off():
    from mil_passes.examples import streaming_cache_program

    placement = segments_of(streaming_cache_program(layers=2, channels=8))
    assert placement.off_ane == placement.ops and len(placement.segments) == 1
    assert placement.off_rules == {"ane-refused-slice-of-concat": placement.ops}
    assert placement.rejected_by == ["ane-refused-slice-of-concat"] and "rejects the model" in placement.summary()


def test_the_docs_show_the_rule_table_as_the_code_has_it():
    from pathlib import Path

    from mil_passes.lint.placement import rule_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "neural-engine.md").read_text()
    assert rule_table() in page
