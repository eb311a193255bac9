"""verify's ``repaired`` rows: a pass that makes an output finite exactly where it was NaN or
infinite before, every other position equal as usual, repaired it; anything else stays a change."""

import json

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.cli import main
from mil_passes.cli.text_output import format_row, format_summary
from mil_passes.package import io as mlpackage
from mil_passes.verify import compare_outputs, repaired_positions, verify_program

NAN, INF = np.nan, np.inf
BAND_FIRST = "webnn::band_part_difference_to_select,common::add_fp16_cast"


def f32(*values):
    return np.array(values, np.float32)


@pytest.mark.parametrize(
    "before, after, precision, status, repaired",
    [
        (f32(1, NAN, -INF), f32(1, 0, -INF), "fp32", "repaired", 1),  # NaN -> finite, the rest bit for bit
        (f32(1, NAN, INF), f32(1.001, 0, 5), "fp16", "repaired", 2),  # the rest within fp16's tolerance
        (f32(1, 2), f32(1, NAN), "fp16", "changed", 0),  # finite -> NaN
        (f32(1, 2), f32(1, -INF), "fp16", "changed", 0),  # finite -> inf
        (f32(1, NAN, 3), f32(2, 0, 3), "fp16", "changed", 0),  # NaN -> finite, another value changed
        (f32(1, NAN, 3), f32(1, 0, NAN), "fp32", "changed", 0),  # NaN moved elsewhere
        (f32(1, NAN), f32(1, INF), "fp32", "changed", 0),  # NaN -> inf: still not finite
        (f32(1, NAN), f32(1, NAN), "fp32", "same", 0),
    ],
)
def test_compare_outputs_tells_a_repair_from_a_change(before, after, precision, status, repaired):
    change = compare_outputs(["o"], [[before]], [[after]], precision)["o"]
    assert (change.status, change.repaired) == (status, repaired)
    if status == "repaired":  # measured on the other positions
        assert change.max_abs is not None and change.max_abs <= 1e-2


def test_repairs_are_counted_over_the_feeds_and_every_feed_must_be_repaired_only():
    assert compare_outputs(["o"], [[f32(NAN, 1)], [f32(INF, 1)]], [[f32(0, 1)], [f32(0, 1)]])["o"].repaired == 2
    change = compare_outputs(["o"], [[f32(NAN, 1)], [f32(1, 1)]], [[f32(0, 1)], [f32(1, 7)]])["o"]
    assert change.status == "changed" and change.repaired == 0


def test_repaired_positions():
    assert repaired_positions(f32(NAN, -INF, 1, NAN), f32(0, 2, 1, NAN)).tolist() == [True, True, False, False]
    assert not repaired_positions(f32(NAN), np.array([0], np.int32)).any()  # another dtype: no repair
    assert not repaired_positions(np.array([1], np.int32), np.array([1], np.int32)).any()


def causal_softmax(dtype):
    """``softmax(triu(fill(min), 1))`` over a run-time length, transformers' causal mask as
    coremltools' torch frontend converts it: in fp16, ``finfo(float32).min`` is -inf and the
    band's ``-inf - -inf`` makes every row NaN."""

    @mb.program(input_specs=[mb.TensorSpec((1, get_new_symbol()), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(ids):
        length = mb.gather(x=mb.shape(x=ids), indices=1, axis=0)
        with np.errstate(over="ignore"):
            low = dtype(np.finfo(np.float32).min)
        mask = mb.fill(shape=mb.concat(values=(length, length), axis=0), value=low)
        causal = mb.sub(x=mask, y=mb.band_part(x=mask, lower=-1, upper=0))
        return mb.softmax(x=causal, axis=-1, name="weights")

    return prog


def test_a_pass_that_makes_nan_outputs_finite_repairs_them():
    verification = verify_program(causal_softmax(np.float16), "webnn::band_part_difference_to_select", feeds=2)
    (row,) = verification.rows
    assert verification.culprit is None and verification.repair is row and row.status == "repaired"
    change = row.outputs["weights"]
    assert change.repaired > 0 and change.max_abs == 0
    assert "repaired: " in format_row(row) and change.repair() in row.reason()
    summary = format_summary(verification)
    assert summary.startswith("no pass changed the outputs: 1 pass (1 repaired)")
    assert summary.endswith(f"webnn::band_part_difference_to_select (pass 1) output 'weights' {change.repair()}")


def test_add_fp16_cast_making_finite_outputs_nan_is_still_the_culprit():
    culprit = verify_program(causal_softmax(np.float32), "common::add_fp16_cast", feeds=1).culprit
    assert culprit is not None and culprit.status == "changed" and culprit.outputs["weights"].repaired == 0
    clean = verify_program(causal_softmax(np.float32), BAND_FIRST, feeds=1)  # the mask stays finite
    assert clean.culprit is None and clean.repair is None


def test_the_command_exits_0_and_reports_the_repair(tmp_path, capsys):
    path = mlpackage.save(causal_softmax(np.float16), tmp_path / "nan.mlpackage")
    assert main(["verify", str(path), "--pipeline", "webnn::band_part_difference_to_select"]) == 0
    out = capsys.readouterr().out
    assert "repaired " in out and "non-finite outputs became finite" in out.splitlines()[-1]
    assert main(["verify", str(path), "--pipeline", "webnn::band_part_difference_to_select", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (row,) = document["passes"]
    assert row["status"] == "repaired" and row["outputs"]["weights"]["repaired"] > 0
    assert document["culprit"] is None and document["repaired"] == "webnn::band_part_difference_to_select"


def padding_mask_softmax():
    """T5's ``(1 - mask) * finfo(float32).min`` added to scores: fp32, finite; after
    ``common::add_fp16_cast`` the sentinel is -inf and ``0 * -inf`` NaN wherever the mask is 1."""

    @mb.program(
        input_specs=[mb.TensorSpec((1, 4, 4), dtype=types.fp32), mb.TensorSpec((1, 1, 4), dtype=types.fp32)],
        opset_version=ct.target.iOS17,
    )
    def prog(scores, mask):
        bias = mb.mul(x=mb.sub(x=np.float32(1), y=mask), y=np.finfo(np.float32).min)
        return mb.softmax(x=mb.add(x=scores, y=bias), axis=-1, name="weights")

    return prog


def test_a_later_pass_that_undoes_add_fp16_casts_nan_leaves_no_culprit():
    """Under DEFAULT, add_fp16_cast is the culprit; under mil_passes, finite_mask_sentinels makes the
    mask finite again later in the pipeline, and the pipeline's result is the original's within fp16."""
    feeds = [
        {"scores": np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 4, 4), "mask": f32(1, 1, 0, 1).reshape(1, 1, 4)}
    ]
    assert verify_program(padding_mask_softmax(), "default", feeds=feeds).culprit.name == "common::add_fp16_cast"
    verification = verify_program(padding_mask_softmax(), "mil_passes", feeds=feeds)
    assert verification.culprit is None
    assert (verification.restored.name, verification.restored.restored_by.name) == (
        "common::add_fp16_cast",
        "webnn::finite_mask_sentinels",
    )
    assert "webnn::finite_mask_sentinels" in format_summary(verification) and "undid it" in format_summary(verification)
