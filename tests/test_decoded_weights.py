"""Compressed weights (constexpr ops) are decoded once per op and shared by every evaluation,
with the bits that decoding each time gives (mil_passes/reference/decoded.py)."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.reference import evaluate
from mil_passes.reference import decoded as decoded_module
from mil_passes.reference.kernels import KERNELS

RNG = np.random.default_rng(7)
SHAPE = (64, 96)


def _blockwise():
    data = RNG.integers(-8, 8, SHAPE).astype(types.np_int4_dtype)
    scale = RNG.uniform(1e-3, 0.1, (64, 3)).astype(np.float16)
    return mb.constexpr_blockwise_shift_scale(data=data, scale=scale)


def _lut():
    indices = RNG.integers(0, 16, SHAPE).astype(types.np_uint4_dtype)
    lut = RNG.standard_normal((4, 1, 16, 1)).astype(np.float16)
    return mb.constexpr_lut_to_dense(indices=indices, lut=lut)


def _sparse():
    mask = (RNG.random(SHAPE) < 0.3).astype(types.np_uint1_dtype)
    nonzero = RNG.standard_normal(int(mask.sum())).astype(np.float16)
    return mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=mask)


def _affine():
    data = RNG.integers(-128, 128, SHAPE).astype(np.int8)
    scale = RNG.uniform(1e-3, 0.1, SHAPE[0]).astype(np.float16)
    return mb.constexpr_affine_dequantize(quantized_data=data, zero_point=np.int8(3), scale=scale, axis=0)


DECODERS = {
    "constexpr_blockwise_shift_scale": (_blockwise, ct.target.iOS18),
    "constexpr_lut_to_dense": (_lut, ct.target.iOS18),
    "constexpr_sparse_to_dense": (_sparse, ct.target.iOS18),
    "constexpr_affine_dequantize": (_affine, ct.target.iOS16),
}


def _program(op_type: str):
    build, opset = DECODERS[op_type]

    @mb.program(input_specs=[mb.TensorSpec(SHAPE, dtype=types.fp16)], opset_version=opset)
    def prog(x):
        return mb.add(x=x, y=build())

    return prog


def _counting(monkeypatch, op_type: str) -> list[int]:
    calls = [0]
    kernel = KERNELS[op_type]

    def counted(op, args):
        calls[0] += 1
        return kernel(op, args)

    monkeypatch.setitem(KERNELS, op_type, counted)
    return calls


def _constexpr(prog):
    return next(op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr"))


def _x(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float16)}


@pytest.mark.parametrize("op_type", sorted(DECODERS))
def test_decoded_once_with_the_bits_of_decoding_each_time(monkeypatch, op_type):
    prog = _program(op_type)
    calls = _counting(monkeypatch, op_type)
    once = [evaluate(prog, _x(seed))[prog.functions["main"].outputs[0].name] for seed in range(3)]
    assert calls[0] == 1
    each_time = []
    for seed in range(3):
        decoded_module._ENTRIES.clear()  # nothing decoded before: this evaluation decodes
        each_time.append(evaluate(prog, _x(seed))[prog.functions["main"].outputs[0].name])
    assert calls[0] == 4
    for got, want in zip(once, each_time):
        assert got.dtype == want.dtype == np.float16
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_the_decoded_weight_is_read_only_and_shared(monkeypatch):
    from mil_passes.reference.interpreter import evaluate_vars

    prog = _program("constexpr_blockwise_shift_scale")
    var = _constexpr(prog).outputs[0]
    first, second = evaluate_vars(prog, _x(0))[var], evaluate_vars(prog, _x(1))[var]
    assert first is second and not first.flags.writeable


def test_a_replaced_or_changed_input_is_decoded_again(monkeypatch):
    prog = _program("constexpr_blockwise_shift_scale")
    op = _constexpr(prog)
    calls = _counting(monkeypatch, "constexpr_blockwise_shift_scale")
    name = prog.functions["main"].outputs[0].name
    before = evaluate(prog, _x(0))[name]
    scale = op.scale.op.outputs[0]
    scale._sym_val.val = (scale.val * 2).astype(np.float16)  # a new array object
    doubled = evaluate(prog, _x(0))[name]
    assert calls[0] == 2 and not np.array_equal(before, doubled)
    scale.val[...] = scale.val / 2  # changed in place, every element (the sample sees it)
    assert np.array_equal(evaluate(prog, _x(0))[name], before) and calls[0] == 3


def test_a_large_input_is_sampled_and_a_change_the_sample_sees_decodes_again(monkeypatch):
    data = RNG.integers(-8, 8, (256, 64)).astype(types.np_int4_dtype)
    scale = RNG.uniform(1e-3, 0.1, (256, 2)).astype(np.float16)

    @mb.program(input_specs=[mb.TensorSpec((256, 64), dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=mb.constexpr_blockwise_shift_scale(data=data, scale=scale))

    calls = _counting(monkeypatch, "constexpr_blockwise_shift_scale")
    name = prog.functions["main"].outputs[0].name
    x = {"x": np.zeros((256, 64), np.float16)}
    first = evaluate(prog, x)[name]
    assert np.array_equal(evaluate(prog, x)[name], first) and calls[0] == 1
    stored = _constexpr(prog).data.val
    stored[0, 0] = -stored[0, 0] - 1  # element 0 is in the sample
    changed = evaluate(prog, x)[name]
    assert calls[0] == 2 and changed[0, 0] != first[0, 0]


@pytest.mark.parametrize("with_offset", [False, True])
def test_a_large_blockwise_weight_decoded_by_rows_has_the_bits_of_one_pass(monkeypatch, with_offset):
    from mil_passes.reference.kernels import quantization

    rows, columns = 96, 64
    data = RNG.integers(-8, 8, (rows, columns)).astype(np.int8)
    scale = RNG.uniform(1e-3, 0.1, (rows // 3, 2)).astype(np.float16)
    offset = RNG.integers(-2, 2, (rows // 3, 2)).astype(np.int8) if with_offset else None
    kwargs = {} if offset is None else {"offset": offset}

    @mb.program(input_specs=[mb.TensorSpec((rows, columns), dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=mb.constexpr_blockwise_shift_scale(data=data, scale=scale, **kwargs))

    op = _constexpr(prog)
    args = {"data": data, "scale": scale, **kwargs}
    whole = quantization._blockwise_shift_scale(data, scale, offset).astype(np.float16)
    monkeypatch.setattr(quantization, "DECODE_ELEMENTS", 5 * columns)  # blocks of 3 scale rows' 9 data rows
    by_rows = quantization.constexpr_blockwise_shift_scale(op, args)
    assert by_rows.dtype == np.float16 and np.array_equal(by_rows.view(np.uint16), whole.view(np.uint16))


@pytest.mark.parametrize(
    "lut_shape, vector_axis",
    [
        ((24, 2, 16, 1), None),  # per grouped channel: 4 rows and 32 columns a LUT
        ((1, 1, 16, 1), None),  # one LUT for the whole weight
        ((96, 1, 4, 2), 1),  # vectors of 2 along the columns: decoded by rows
        ((48, 1, 4, 2), 0),  # vectors of 2 along the rows: decoded whole
    ],
)
def test_a_large_palettized_weight_decoded_by_rows_has_the_values_of_one_pass(monkeypatch, lut_shape, vector_axis):
    from coremltools.optimize import _utils as optimize_utils

    from mil_passes.reference.kernels import quantization

    rows, columns = 96, 64
    shape = (rows // 2, columns) if vector_axis == 0 else (rows, columns // 2) if vector_axis == 1 else (rows, columns)
    indices = RNG.integers(0, lut_shape[2], shape).astype(np.uint8)
    lut = RNG.standard_normal(lut_shape).astype(np.float16)
    whole = optimize_utils.lut_to_dense(indices, lut, vector_axis)
    monkeypatch.setattr(quantization, "DECODE_ELEMENTS", 5 * columns)  # blocks of rows, cut mid-LUT-block never
    by_rows = quantization._lut_to_dense_ios18(indices, lut, vector_axis)
    assert by_rows.shape == whole.shape == (rows, columns)
    assert by_rows.dtype == np.float16 and np.array_equal(by_rows.view(np.uint16), whole.view(np.uint16))


def test_a_large_palettized_weight_is_decoded_without_a_lut_per_element():
    import tracemalloc

    from mil_passes.reference.kernels import quantization

    rows, columns = 1024, 2048  # 2M elements: past DECODE_ELEMENTS
    indices = RNG.integers(0, 16, (rows, columns)).astype(np.uint8)
    lut = RNG.standard_normal((rows // 16, 1, 16, 1)).astype(np.float16)
    tracemalloc.start()
    try:
        dense = quantization._lut_to_dense_ios18(indices, lut, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The result (2 bytes an element) and one block's temporaries; decoding whole repeats the
    # 16-entry LUT per element (32 bytes) beside an int64 index (8 bytes): over 20x the result.
    assert peak < 2 * dense.nbytes + 64 * quantization.DECODE_ELEMENTS
