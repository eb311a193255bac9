"""webnn::band_part_difference_to_select: the rewrite and its mask shapes, what is left alone,
exactness on random finite data, infinite values, scopes, lint, random programs and torch."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, get_new_symbol, types
from coremltools.converters.mil.mil.scope import ScopeInfo, ScopeSource

from mil_passes.ir import iter_ops
from mil_passes.lint import lint
from mil_passes.passes.band_part_difference_to_select import BandPartDifference, Fp16BandPartDifference
from mil_passes.reference import evaluate
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing.strategies import OPSETS
from mil_passes.runner import run_pass as registered_run
from pass_helpers import only_op

PASS = "webnn::band_part_difference_to_select"
IOS17 = ct.target.iOS17
FP32, FP16, INT32, BOOL = types.fp32, types.fp16, types.int32, types.bool
NP = {FP32: np.float32, FP16: np.float16}
FINFO_FP32_MIN = float(np.finfo(np.float32).min)


def triu_program(shape=(4, 5), dtype=FP32, lower=-1, upper=0, *, opset=IOS17, extra_band_output=False) -> Program:
    """``sub(x=v, y=band_part(v))`` on an input ``v``: torch's ``triu(v, upper + 1)`` when
    ``lower`` is -1, ``tril(v, -lower - 1)`` when ``upper`` is -1."""

    @mb.program(input_specs=[mb.TensorSpec(shape, dtype=dtype)], opset_version=opset)
    def prog(v):
        kept = mb.band_part(x=v, lower=lower, upper=upper, name="kept")
        out = mb.sub(x=v, y=kept, name="out")
        return (out, kept) if extra_band_output else out

    return prog


def causal_mask_program(dtype=FP32) -> Program:
    """transformers' causal mask as coremltools converts it: ``fill`` of finfo(fp32).min shaped
    by the run-time sequence length, then ``triu(mask, diagonal=1)``."""

    @mb.program(input_specs=[mb.TensorSpec((1, get_new_symbol()), dtype=INT32)], opset_version=IOS17)
    def prog(ids):
        length = mb.gather(x=mb.shape(x=ids, name="ids_shape"), indices=1, axis=0, name="length")
        size = mb.concat(values=(length, length), axis=0, name="size")
        mask = mb.fill(shape=size, value=finfo_fp32_min(dtype), name="mask")
        kept = mb.band_part(x=mask, lower=-1, upper=0, name="kept")
        return mb.sub(x=mask, y=kept, name="causal")

    return prog


def finfo_fp32_min(dtype) -> np.generic:
    """torch.finfo(torch.float32).min in ``dtype``: -inf in fp16, as common::add_fp16_cast makes it."""
    with np.errstate(over="ignore"):
        return NP[dtype](FINFO_FP32_MIN)


def band(rows: int, cols: int, lower: int, upper: int) -> np.ndarray:
    """band_part's kept region (its op spec)."""
    offset = np.arange(rows)[:, None] - np.arange(cols)[None, :]
    return ((lower < 0) | (offset <= lower)) & ((upper < 0) | (-offset <= upper))


def run_pass(prog: Program):
    result = registered_run(prog, PASS)
    prog.validate()
    return result


# -- the rewrite --------------------------------------------------------------------------------


def test_causal_mask_becomes_a_select_with_the_fills_own_shape():
    prog = causal_mask_program()
    shapes_before = op_counts(prog)["shape"]
    assert run_pass(prog).rewritten == 1
    counts = op_counts(prog)
    assert (counts["sub"], counts["shape"], counts["select"], counts["fill"]) == (0, shapes_before, 1, 2)
    select = only_op(prog, "select")
    inside = select.cond.op
    assert (inside.op_type, inside.lower.val, inside.upper.val) == ("band_part", -1, 0)
    assert (inside.x.op.op_type, inside.x.op.value.val) == ("fill", True)
    assert inside.x.op.shape is only_op(prog, "concat").outputs[0]  # the mask's own shape input
    assert select.a.val == 0 and select.b.op.name == "mask"
    assert prog.functions["main"].outputs[0].name == "causal"


def test_static_v_gets_a_constant_mask_shape_and_run_time_v_a_shape_op():
    static = triu_program((3, 4))
    run_pass(static)
    assert only_op(static, "fill").shape.val.tolist() == [3, 4]
    assert "shape" not in op_counts(static)
    flexible = triu_program((2, get_new_symbol(), 4))
    run_pass(flexible)
    assert only_op(flexible, "fill").shape.op.op_type == "shape"
    check_pass(lambda: triu_program((2, get_new_symbol(), 4)), PASS, sizes=3)


def test_a_band_part_other_ops_read_stays_for_them():
    prog = triu_program(extra_band_output=True)
    run_pass(prog)
    assert op_counts(prog)["band_part"] == 2 and "sub" not in op_counts(prog)
    assert [v.name for v in prog.functions["main"].outputs] == ["out", "kept"]
    check_pass(lambda: triu_program(extra_band_output=True), PASS)


def test_a_sub_in_a_cond_branch_is_rewritten_there():
    @mb.program(input_specs=[mb.TensorSpec((3, 3)), mb.TensorSpec((1,), dtype=BOOL)], opset_version=IOS17)
    def prog(v, flag):
        def triu():
            return mb.sub(x=v, y=mb.band_part(x=v, lower=0, upper=-1), name="inner")

        return mb.cond(pred=mb.squeeze(x=flag), _true_fn=triu, _false_fn=lambda: mb.relu(x=v), name="out")

    run_pass(prog)
    assert "sub" not in op_counts(prog) and op_counts(prog)["select"] == 1


# -- what is left alone -------------------------------------------------------------------------


def _sub(prog: Program):
    return only_op(prog, "sub")


def test_sub_of_another_vars_band_part_is_not_a_candidate():
    @mb.program(input_specs=[mb.TensorSpec((3, 3)), mb.TensorSpec((3, 3))], opset_version=IOS17)
    def prog(v, w):
        return mb.sub(x=v, y=mb.band_part(x=w, lower=-1, upper=0), name="out")

    assert BandPartDifference().match(_sub(prog)) is None
    assert run_pass(prog).rewritten == 0


def test_band_part_minus_v_and_a_copy_of_v_are_not_candidates():
    @mb.program(input_specs=[mb.TensorSpec((3, 3))], opset_version=IOS17)
    def reversed_sub(v):
        return mb.sub(x=mb.band_part(x=v, lower=-1, upper=0), y=v, name="out")

    @mb.program(input_specs=[mb.TensorSpec((3, 3))], opset_version=IOS17)
    def copied(v):
        return mb.sub(x=v, y=mb.band_part(x=mb.identity(x=v), lower=-1, upper=0), name="out")

    for prog in (reversed_sub, copied):
        assert BandPartDifference().match(_sub(prog)) is None


def test_int32_and_the_frontends_bool_form_are_left_alone():
    ints = triu_program(dtype=INT32)

    @mb.program(input_specs=[mb.TensorSpec((3, 3), dtype=BOOL)], opset_version=IOS17)
    def bools(b):  # coremltools' triu of a bool: sub does not take bool
        kept = mb.band_part(x=b, lower=-1, upper=0)
        wide = mb.sub(x=mb.cast(x=b, dtype="int32"), y=mb.cast(x=kept, dtype="int32"))
        return mb.cast(x=wide, dtype="bool", name="out")

    for prog in (ints, bools):
        op = _sub(prog)
        assert BandPartDifference().match(op) is None and Fp16BandPartDifference().match(op) is None
        assert run_pass(prog).rewritten == 0


def test_band_part_bounds_are_const_by_its_op_spec():
    """A run-time bound cannot reach the pass: the builder refuses it."""
    with pytest.raises(ValueError, match="lower"):

        @mb.program(input_specs=[mb.TensorSpec((3, 3)), mb.TensorSpec((1,), dtype=INT32)], opset_version=IOS17)
        def prog(v, k):
            return mb.sub(x=v, y=mb.band_part(x=v, lower=mb.squeeze(x=k), upper=0))


def test_each_pattern_takes_its_own_dtype():
    fp32, fp16 = _sub(triu_program(dtype=FP32)), _sub(triu_program(dtype=FP16))
    assert BandPartDifference().match(fp32) is fp32.y.op and BandPartDifference().match(fp16) is None
    assert Fp16BandPartDifference().match(fp16) is fp16.y.op and Fp16BandPartDifference().match(fp32) is None


# -- numbers ------------------------------------------------------------------------------------


@st.composite
def triu_cases(draw):
    dtype = draw(st.sampled_from((FP32, FP16)))
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    symbolic = draw(st.sets(st.integers(0, rank - 1), max_size=2))
    spec = tuple(get_new_symbol() if i in symbolic else d for i, d in enumerate(shape))
    finite = st.floats(allow_nan=False, allow_infinity=False, width=16 if dtype == FP16 else 32)
    values = draw(st.lists(finite, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    data = np.array(values, dtype=NP[dtype]).reshape(shape)
    bounds = (draw(st.integers(-1, 6)), draw(st.integers(-1, 6)))
    return dtype, spec, data, bounds


@given(triu_cases(), st.sampled_from(OPSETS))
def test_finite_values_are_kept_bit_for_bit(case, opset):
    dtype, spec, data, (lower, upper) = case
    after = check_pass(lambda: triu_program(spec, dtype, lower, upper, opset=opset), PASS, inputs={"v": data})
    assert "sub" not in op_counts(after)


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("lower, upper", [(-1, 0), (-1, 2), (0, -1), (2, -1), (1, 1)])
def test_infinite_values_give_zero_in_the_band_not_nan(dtype, lower, upper):
    data = np.full((4, 6), -np.inf, NP[dtype])
    data[0, 5] = np.inf
    data[3, 0] = 2.5
    before = evaluate(triu_program((4, 6), dtype, lower, upper), {"v": data})["out"]
    prog = triu_program((4, 6), dtype, lower, upper)
    run_pass(prog)
    after = evaluate(prog, {"v": data})["out"]
    inside = band(4, 6, lower, upper)
    assert np.isnan(before[inside & np.isinf(data)]).all()
    assert not np.isnan(after).any()
    assert np.array_equal(after, np.where(inside, 0, data)) and not np.signbit(after[inside]).any()


def test_causal_mask_at_fp16_is_nan_before_and_torchs_triu_after():
    ids = {"ids": np.zeros((1, 5), np.int32)}
    before = evaluate(causal_mask_program(FP16), ids)["causal"]
    prog = causal_mask_program(FP16)
    run_pass(prog)
    after = evaluate(prog, ids)["causal"]
    mask = np.full((5, 5), finfo_fp32_min(FP16))
    assert np.isneginf(mask).all() and np.isnan(before[band(5, 5, -1, 0)]).all()
    assert np.array_equal(after, np.triu(mask, 1))  # numpy's triu picks, as torch's does


# -- scopes, lint, random programs -------------------------------------------------------------


def test_new_ops_carry_the_scope_of_the_sub():
    @mb.program(input_specs=[mb.TensorSpec((3, get_new_symbol()))], opset_version=IOS17)
    def prog(v):
        with mb.scope(ScopeInfo(source=ScopeSource.TORCHSCRIPT_MODULE_NAME, data=["mask"])):
            return mb.sub(x=v, y=mb.band_part(x=v, lower=-1, upper=0), name="out")

    prog._add_essential_scope_source(ScopeSource.TORCHSCRIPT_MODULE_NAME)
    run_pass(prog)
    prog.validate(check_essential_scope=True)
    new = [op for op in iter_ops(prog) if op.op_type in ("shape", "fill", "band_part", "select")]
    assert len(new) == 4
    for op in new:
        assert op.scopes[ScopeSource.TORCHSCRIPT_MODULE_NAME] == ["mask"], op.name


def test_new_names_do_not_collide():
    @mb.program(input_specs=[mb.TensorSpec((3, 3))], opset_version=IOS17)
    def prog(v):
        taken = mb.relu(x=v, name="out_select")
        return mb.sub(x=v, y=mb.band_part(x=v, lower=-1, upper=0), name="out"), taken

    run_pass(prog)
    names = [op.name for op in iter_ops(prog)]
    assert len(names) == len(set(names)) and "out_select_1" in names


@pytest.mark.parametrize(
    "dtype, rule, severity", [(FP16, "fp16-band-part-difference", "warning"), (FP32, "band-part-difference", "info")]
)
def test_lint_names_the_pass_by_dtype_and_nothing_after_it(dtype, rule, severity):
    prog = triu_program(dtype=dtype)
    (finding,) = [f for f in lint(prog) if f.fix == PASS]
    assert (finding.rule, finding.severity, finding.op) == (rule, severity, "out")
    assert "band_part 'kept' of 'v'" in finding.message and "NaN" in finding.message
    run_pass(prog)
    assert not [f for f in lint(prog) if f.fix == PASS]


# -- torch --------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (pip install -e '.[torch]')")
def test_torch_triu_and_tril_of_a_finfo_min_mask_at_fp16():
    import torch

    import mil_passes
    from mil_passes.reference import predict

    class Masks(torch.nn.Module):
        def forward(self, x):
            n = x.shape[1]
            mask = torch.full((n, n), torch.finfo(torch.float32).min)
            return torch.triu(mask, 1) + x, torch.tril(mask, -1) + x

    x = torch.zeros(1, 6)
    traced = torch.jit.trace(Masks(), x)
    spec = [ct.TensorType(name="x", shape=(1, ct.RangeDim(1, 16, default=6)))]
    want = [t.numpy() for t in Masks()(x)]
    outputs = {}
    for name, pipeline in (("DEFAULT", ct.PassPipeline.DEFAULT), ("pipeline", mil_passes.pipeline())):
        model = ct.convert(
            traced,
            inputs=spec,
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT16,
            minimum_deployment_target=IOS17,
            pass_pipeline=pipeline,
            skip_model_load=True,
        )
        outputs[name] = list(predict(model, {"x": x.numpy()}).values())
    assert all(np.isnan(out).any() for out in outputs["DEFAULT"])
    for got, expected in zip(outputs["pipeline"], want):
        assert np.array_equal(got, expected.astype(np.float16))  # 0 in the band, -inf outside
