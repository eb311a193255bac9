"""``linear``'s fp16 weights widened in blocks of rows (reference/fp16_matmul.py): the bits of
``np.matmul`` on the weight widened by numpy, for decode steps, short prompts and long ones."""

from __future__ import annotations

import numpy as np
import pytest

from mil_passes.reference.fp16_matmul import BLOCK_ELEMENTS, MAX_ROWS, matmul_fp16_t, scaled_fp32

EVERY_FP16 = np.arange(65536, dtype=np.uint16).view(np.float16)


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint32)


def test_every_finite_fp16_value_lands_on_its_fp32_value_times_2_to_the_minus_112():
    finite = EVERY_FP16[np.isfinite(EVERY_FP16)]
    out = np.empty(finite.shape, np.int32)
    got = scaled_fp32(finite.view(np.int16), out).astype(np.float64) * 2.0**112
    want = finite.astype(np.float64)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("rows", [1, 2, 3, MAX_ROWS, 9, 33])
@pytest.mark.parametrize("seed", range(3))
def test_the_bits_of_numpy_matmul_on_the_widened_weight(rows, seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 700)), int(rng.choice([1, 7, 64, 576, 2048]))
    weight = (rng.standard_normal((n, k)) * rng.choice([1e-6, 0.02, 40.0])).astype(np.float16)
    weight.reshape(-1)[:: max(1, weight.size // 50)] = np.float16(6e-8)  # subnormals
    weight.reshape(-1)[1 :: max(1, weight.size // 40)] = -np.float16(0.0)
    x = (rng.standard_normal((rows, k)) * 30).astype(np.float16).astype(np.float32)
    x.reshape(-1)[::7] = 1e-40  # fp32 subnormals
    want = np.matmul(x, weight.astype(np.float32).T)
    got = matmul_fp16_t(x, weight)
    assert got is not None and got.shape == want.shape
    assert np.array_equal(_bits(got), _bits(want))


def test_blocks_of_rows_cover_a_weight_larger_than_one_block():
    rng = np.random.default_rng(5)
    k = 96
    weight = rng.standard_normal((3 * BLOCK_ELEMENTS // k + 5, k)).astype(np.float16)
    x = rng.standard_normal((1, 1, k)).astype(np.float32)
    want = np.matmul(x, weight.astype(np.float32).T)
    assert np.array_equal(_bits(matmul_fp16_t(x, weight)), _bits(want))


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_a_weight_with_inf_or_nan_and_a_large_x_are_left_to_numpy(special):
    weight = np.ones((300, 64), np.float16)
    weight[250, 3] = special
    assert matmul_fp16_t(np.ones((1, 64), np.float32), weight) is None
    assert matmul_fp16_t(np.full((1, 64), 2.0**16, np.float32), np.ones((300, 64), np.float16)) is None
    assert matmul_fp16_t(np.ones((1, 64), np.float16), np.ones((300, 64), np.float16)) is None


def test_nan_and_inf_in_x_give_numpy_s_bits():
    weight = np.random.default_rng(1).standard_normal((200, 32)).astype(np.float16)
    x = np.random.default_rng(2).standard_normal((2, 32)).astype(np.float32)
    x[0, 3], x[1, 5] = np.nan, -np.inf
    x = x[:, :]
    got = matmul_fp16_t(x, weight)
    if got is None:  # -inf is at or beyond the limit: numpy's path
        return
    assert np.array_equal(_bits(got), _bits(np.matmul(x, weight.astype(np.float32).T)))
