"""verify's feeds fit the model: index inputs within their table, masks 0 or 1, one's own feeds from
.npz files checked against the inputs and their domains; optional inputs' defaults."""

import numpy as np
import pytest

import coremltools as ct
from coremltools import proto
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.cli import main
from mil_passes.lint.findings import Finding
from mil_passes.package import io as mlpackage
from mil_passes.package.shared_weights import share_identical_weights
from mil_passes.reference.domains import Domain, input_domains
from mil_passes.reference.feeds import FeedError, fitted_feed, random_inputs, read_feed_files
from mil_passes.reference.optional_inputs import input_defaults
from mil_passes.verify import VerifyError, verify_program

IOS17 = ct.target.iOS17
TABLE = np.arange(12, dtype=np.float32).reshape(6, 2)


def embedding():
    """``ids`` (int32, flexible length) index a 6-row table through a reshape and a cast, as torch's
    embedding converts; ``mask`` (int32) is used as ``1 - mask``."""
    length = get_new_symbol()

    @mb.program(
        input_specs=[mb.TensorSpec((1, length), dtype=types.int32), mb.TensorSpec((1, length), dtype=types.int32)],
        opset_version=IOS17,
    )
    def prog(ids, mask):
        rows = mb.gather(x=TABLE, indices=mb.cast(x=mb.reshape(x=ids, shape=[-1]), dtype="int32"), axis=0)
        keep = mb.sub(x=np.float32(1), y=mb.cast(x=mask, dtype="fp32"))
        return mb.add(x=mb.reduce_sum(x=rows, axes=[1]), y=mb.reshape(x=keep, shape=[-1]), name="y")

    return prog


def test_an_index_input_takes_its_tables_rows_and_a_mask_zero_or_one():
    domains = input_domains(embedding())
    assert domains["ids"] == Domain(0, 6, domains["ids"].reason) and "gather" in domains["ids"].reason
    assert domains["mask"].mask and domains["mask"].describe().startswith("takes 0 or 1 (it is a mask: sub ")


def test_a_select_wrapped_index_and_a_bool_cast_are_seen():
    @mb.program(input_specs=[mb.TensorSpec((3,), dtype=types.int32), mb.TensorSpec((3,), dtype=types.int32)])
    def prog(ids, flags):
        wrapped = mb.select(cond=mb.greater_equal(x=ids, y=np.int32(0)), a=ids, b=mb.add(x=ids, y=np.int32(6)))
        rows = mb.gather(x=TABLE, indices=wrapped, axis=0)
        return mb.select(cond=mb.cast(x=flags, dtype="bool"), a=mb.reduce_sum(x=rows, axes=[1]), b=np.float32(0))

    domains = input_domains(prog)
    assert (domains["ids"].low, domains["ids"].high) == (0, 6) and domains["flags"].mask


def test_random_feeds_fit_the_domains_only_when_asked():
    prog = embedding()
    for seed in range(5):
        feed = random_inputs(prog, seed=seed, sizes=5, fit=True)
        assert 0 <= feed["ids"].min() and feed["ids"].max() < 6
        assert set(np.unique(feed["mask"])) <= {0, 1} and (feed["mask"][..., 0] == 1).all()
    assert any(random_inputs(prog, seed=seed, sizes=5)["ids"].min() < 0 for seed in range(5))


def test_verify_draws_feeds_the_program_can_take():
    verification = verify_program(embedding(), ["common::dead_code_elimination"], feeds=3)
    assert verification.culprit is None


def test_a_feed_outside_an_inputs_domain_is_refused_naming_it(tmp_path):
    np.savez(tmp_path / "f.npz", ids=np.array([[0, 9]], np.int64), mask=np.ones((1, 2), np.int64))
    with pytest.raises(VerifyError, match=r"f.npz: input 'ids' takes values in \[0, 6\) .*; the feed holds 9$"):
        verify_program(embedding(), ["common::dead_code_elimination"], feeds=tmp_path / "f.npz")


@pytest.mark.parametrize(
    "arrays, error",
    [
        ({"ids": np.zeros((1, 2), np.int32)}, "input 'mask' is missing"),
        ({"ids": np.zeros((1, 2)), "mask": np.ones((1, 2)), "other": np.ones(1)}, "'other' is not an input"),
        ({"ids": np.zeros((2, 2)), "mask": np.ones((2, 2))}, r"input 'ids' has shape \[2, 2\]; the model takes \[1, "),
        ({"ids": np.full((1, 2), 0.5), "mask": np.ones((1, 2))}, "input 'ids' holds fractions"),
        ({"ids": np.full((1, 2), 2**40), "mask": np.ones((1, 2))}, "past int32's range"),
    ],
)
def test_fitted_feed_names_what_the_model_cannot_take(arrays, error):
    with pytest.raises(FeedError, match=error):
        fitted_feed(embedding(), arrays, "f.npz")


def test_fitted_feed_casts_and_fills_defaults():
    fitted = fitted_feed(embedding(), {"ids": np.array([[1, 2]], np.int64)}, "f", defaults={"mask": np.ones((1, 2))})
    assert fitted["ids"].dtype == np.int32 and fitted["mask"].dtype == np.int32


def test_feed_files_are_a_file_or_a_folder_of_them(tmp_path):
    np.savez(tmp_path / "b.npz", ids=np.zeros((1, 1), np.int32))
    np.savez(tmp_path / "a.npz", ids=np.ones((1, 1), np.int32))
    assert [label.rsplit("/", 1)[1] for label, _ in read_feed_files(tmp_path)] == ["a.npz", "b.npz"]
    assert read_feed_files(tmp_path / "a.npz")[0][1]["ids"].tolist() == [[1]]
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.npz").write_text("not a zip")
    for path, error in [
        (tmp_path / "empty", "a folder without .npz files"),
        (tmp_path / "bad.npz", "not a numpy .npz file"),
        (tmp_path / "missing.npz", "no such file or folder"),
    ]:
        with pytest.raises(FeedError, match=error):
            read_feed_files(path)


def test_the_command_takes_a_count_or_a_path_and_refuses_a_bad_feed_in_one_line(tmp_path, capsys):
    path = mlpackage.save(embedding(), tmp_path / "e.mlpackage")
    np.savez(tmp_path / "f.npz", ids=np.array([[7]]), mask=np.array([[1]]))
    assert main(["verify", str(path), "--pipeline", "common::dead_code_elimination", "--feeds", "2"]) == 0
    assert "2 feeds (seed 0)" in capsys.readouterr().out
    assert main(["verify", str(path), "--feeds", str(tmp_path / "f.npz")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "input 'ids' takes values in [0, 6)" in err


def test_input_defaults_fill_the_declared_shape():
    description = proto.Model_pb2.ModelDescription()
    feature = description.input.add()
    feature.name = "scale"
    feature.type.isOptional = True
    feature.type.multiArrayType.shape.extend([1, 3])
    feature.type.multiArrayType.dataType = proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    feature.type.multiArrayType.floatDefaultValue = 0.25
    required = description.input.add()
    required.name = "x"
    required.type.multiArrayType.shape.extend([1])
    defaults = input_defaults(description)
    assert list(defaults) == ["scale"] and defaults["scale"].tolist() == [[0.25, 0.25, 0.25]]


def test_byte_identical_file_weights_share_one_weight_id():
    weight = np.ones((4, 4), np.float32)

    @mb.program(input_specs=[mb.TensorSpec((1, 4))], opset_version=ct.target.iOS18)
    def prog(x):
        a = mb.linear(x=x, weight=weight)
        b = mb.linear(x=a, weight=weight.copy())
        return mb.linear(x=b, weight=weight * 2)

    assert share_identical_weights(prog, 9) == 2
    ids = [op.weight_id for op in prog.functions["main"].operations if op.op_type == "const" and op.val.val.size == 16]
    assert ids[0] == ids[1] is not None and ids[2] is None


def test_a_finding_names_its_function_and_stage():
    finding = Finding("r", "error", "op", "msg").located(function="decode", stage="1")
    assert str(finding) == "error: [r] stage 1, function 'decode': msg"
    assert finding.as_dict() == {
        "rule": "r",
        "severity": "error",
        "op": "op",
        "message": "msg",
        "fix": None,
        "function": "decode",
        "stage": "1",
    }
    assert "function" not in Finding("r", "error", "op", "msg").as_dict()
