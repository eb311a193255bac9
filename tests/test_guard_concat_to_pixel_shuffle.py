"""webnn::guard_concat_to_pixel_shuffle: nested interleaved concats whose inner concat is read
elsewhere no longer make common::concat_to_pixel_shuffle raise; they still become a pixel_shuffle
with the same values (data movement: bit for bit, by the reference interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_concat_to_pixel_shuffle"
FUSION = "common::concat_to_pixel_shuffle"
SHAPE = (1, 2, 2, 3)
RNG = np.random.default_rng(0)
FEEDS = {name: RNG.standard_normal(SHAPE).astype(np.float32) for name in "abcd"}


def nested_concats(other_reader: str | None):
    """The pass's pattern; ``other_reader``: a ``shape`` of an inner concat ("shape"), an inner
    concat returned ("output"), or nothing (None)."""

    @mb.program(input_specs=[mb.TensorSpec(SHAPE) for _ in range(4)], opset_version=ct.target.iOS17)
    def prog(a, b, c, d):
        h0 = mb.concat(values=(a, b), axis=2, interleave=True, name="h0")
        h1 = mb.concat(values=(c, d), axis=2, interleave=True, name="h1")
        w = mb.concat(values=(h0, h1), axis=3, interleave=True, name="out")
        if other_reader == "shape":
            return w, mb.shape(x=h1, name="h1_shape")
        if other_reader == "output":
            return w, h1
        return w

    return prog


@pytest.mark.parametrize("other_reader", ["shape", "output"])
def test_the_pass_raises_without_the_guard(other_reader):
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError):
        run_pass(nested_concats(other_reader), FUSION)


@pytest.mark.parametrize("other_reader", ["shape", "output"])
def test_the_guarded_concats_become_a_pixel_shuffle_with_the_same_values(other_reader):
    after = check_pass(lambda: nested_concats(other_reader), PASS, inputs=FEEDS)
    run_pass(after, FUSION)
    assert op_counts(after)["pixel_shuffle"] == 1
    assert_equivalent(nested_concats(other_reader), after, FEEDS)


def test_unshared_concats_are_left_to_the_pass():
    prog = nested_concats(None)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, FUSION)
    assert op_counts(prog)["pixel_shuffle"] == 1
    assert_equivalent(nested_concats(None), prog, FEEDS)
