"""The reference interpreter's float results do not depend on numpy's CPU dispatch.

numpy chooses SIMD loops by the CPU it runs on; ``NPY_DISABLE_CPU_FEATURES`` turns dispatched
features off (https://numpy.org/doc/stable/reference/simd/build-options.html#runtime-dispatch).
``tests/numerics_probe.py`` runs the float kernels (every finite fp16 input for the unary ops and
activations; fixed inputs for binary ops, reductions, softmax, norms, matmul/linear, conv, pools and
recurrent ops) and hashes their outputs; here it runs with this CPU's dispatch, without its AVX-512
features, and with every dispatched feature off, and the hashes must agree bit for bit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

from mil_passes.reference import rounded
from mil_passes.reference.kernels import activation

PROBE = Path(__file__).with_name("numerics_probe.py")
FEATURES_KEY = "(numpy CPU features enabled)"

DISPATCHED_HERE = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]


def probe(disabled: list[str]) -> dict:
    """The probe's report in a fresh interpreter with numpy's ``disabled`` features turned off."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROBE.parents[1]), os.environ.get("PYTHONPATH", "")]))
    env.pop("NPY_DISABLE_CPU_FEATURES", None)
    if disabled:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(disabled)
    done = subprocess.run(
        [sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def differing(first: dict, second: dict) -> list[str]:
    return sorted(name for name in first if name != FEATURES_KEY and first[name] != second.get(name))


@pytest.mark.skipif(not DISPATCHED_HERE, reason="numpy dispatches no SIMD feature on this CPU")
def test_float_kernels_give_the_same_bits_under_every_numpy_dispatch():
    without_avx512 = [name for name in DISPATCHED_HERE if name.startswith("AVX512")]
    settings = {"this CPU": [], "no AVX-512": without_avx512, "baseline only": DISPATCHED_HERE}
    reports = {label: probe(disabled) for label, disabled in settings.items() if label == "this CPU" or disabled}
    native = reports.pop("this CPU")
    assert len(native) > 150  # every case ran
    for label, report in reports.items():
        assert set(report[FEATURES_KEY]).isdisjoint(settings[label]), f"{label}: numpy kept a disabled feature"
        assert set(report) == set(native)
        assert not differing(native, report), f"different bits with {label}: {differing(native, report)}"


def test_differing_names_the_cases_whose_bits_differ():
    assert differing({"a": "1", "b": "2", FEATURES_KEY: ["X"]}, {"a": "1", "b": "3", FEATURES_KEY: []}) == ["b"]


# -- why the fp16 tables are the same on every machine -------------------------------------------

FP16_FORMULAS = {
    **rounded.UNARY,
    "gelu EXACT": activation._gelu_exact,
    "gelu TANH_APPROXIMATION": activation._gelu_tanh,
    "gelu SIGMOID_APPROXIMATION": activation._gelu_sigmoid,
    "sigmoid": activation._sigmoid,
    "silu": activation._silu,
    "softplus": activation._softplus,
}
EXACT_MIDPOINTS = {"exp2": [-25.0]}  # 2^-25 is half the smallest fp16 subnormal, exactly


@pytest.mark.parametrize("name", list(FP16_FORMULAS))
def test_fp16_table_is_far_from_every_rounding_boundary(name):
    """Over all 65,536 fp16 inputs, numpy's float64 value is more than 2^-40 (relative) from every
    fp16 rounding boundary, except at exact midpoints that every libm computes exactly: any float64
    evaluation within 2^-40 of it (any CPU, libm or numpy dispatch) gives the same table."""
    x = rounded.ALL_FP16.astype(np.float64)
    with np.errstate(all="ignore"):
        wide = FP16_FORMULAS[name](rounded.NUMPY, x)
        libm = FP16_FORMULAS[name](rounded.LIBM, x)
    near = rounded.near_a_boundary(wide, np.float16)
    assert sorted(x[near].tolist()) == EXACT_MIDPOINTS.get(name, [])
    assert np.all(wide[near] == libm[near])
    with np.errstate(over="ignore"):
        agree = (wide.astype(np.float16) == libm.astype(np.float16)) | (np.isnan(wide) & np.isnan(libm))
    assert agree.all(), f"numpy and libm round differently at {x[~agree][:5]}"


def test_near_a_boundary_finds_midpoints_and_the_overflow_threshold():
    one_ulp = 2.0**-10
    values = np.array([1 + one_ulp / 2, 1 + one_ulp / 2 * (1 + 2.0**-45), 1 + one_ulp / 4, 65520.0, 65519.0, 0.0])
    assert rounded.near_a_boundary(values, np.float16).tolist() == [True, True, False, True, False, False]
    assert rounded.near_a_boundary(np.array([1 + 2.0**-24, np.nan, np.inf]), np.float32).tolist() == [
        True,
        False,
        False,
    ]


def test_evaluate_recomputes_near_boundary_elements_with_libm():
    calls = []

    def formula(fn, x):
        calls.append(fn)
        return x + 0.0

    midpoint = np.array([1 + 2.0**-11, 1.25])
    assert rounded.evaluate(formula, np.float16, midpoint).tolist() == midpoint.tolist()
    assert calls == [rounded.NUMPY, rounded.LIBM]
    negated_nan = rounded.evaluate(lambda fn, x: -x, np.float32, np.array([np.nan]))
    assert negated_nan.view(np.uint64).tolist() == np.array([np.nan]).view(np.uint64).tolist()  # sign dropped


def test_unary_uses_the_table_for_fp16_and_rounds_fp32_once():
    x = np.array([[0.5, -3.0], [np.inf, -np.inf]], np.float16)
    got = rounded.unary("exp", x)
    assert got.dtype == np.float16
    assert got.tolist() == np.exp(x.astype(np.float64)).astype(np.float16).tolist()
    assert rounded.unary("exp", np.float32(1.0)) == np.float32(np.e)
    assert rounded.unary("exp", np.array([1.0])).dtype == np.float64
    assert rounded.fp16_table("exp").flags.writeable is False


def test_along_keeps_the_shape_and_recomputes_whole_rows_near_a_boundary():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8
    sources = []

    def softmax_rows(fn, rows):
        sources.append((fn, rows.shape))
        e = fn.exp(rows - rows.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    got = rounded.along(softmax_rows, np.float32, x, (1,))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-15)
    assert sources[0] == (rounded.NUMPY, (8, 3))
    total = rounded.along(lambda fn, rows: rows.sum(axis=1, keepdims=True), np.float32, x, (0, 2))
    assert total.shape == (1, 3, 1)
    assert total.ravel().tolist() == x.astype(np.float64).sum(axis=(0, 2)).tolist()

    midpoint = np.array([[1 + 2.0**-11, 1.0], [1.25, 1.5]])  # row 0 holds an fp16 midpoint
    sources.clear()
    rounded.along(lambda fn, rows: sources.append((fn, rows.shape)) or rows + 0.0, np.float16, midpoint, (1,))
    assert sources == [(rounded.NUMPY, (2, 2)), (rounded.LIBM, (1, 2))]


def test_fp16_table_of_a_formula_is_its_value_at_every_fp16_input():
    table = rounded.fp16_table(activation._sigmoid)
    x = np.array([-20.0, -1.0, 0.0, 0.5, 11.0], np.float16)
    assert table[x.view(np.uint16)].tolist() == (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float16).tolist()
    assert rounded.rounded(lambda fn, base, power: fn.pow(base, power), np.float32, 2.0, [0.5, 3]).tolist() == [
        np.float32(math.sqrt(2.0)),
        8.0,
    ]
