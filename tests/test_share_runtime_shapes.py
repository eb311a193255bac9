"""webnn::share_runtime_shapes: a shape of a var whose run-time dims an earlier var has reads that var's shape."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol
from hypothesis import given, settings
from hypothesis import strategies as st

import coremltools as ct
from mil_passes.ir import iter_ops
from mil_passes.passes.share_runtime_shapes import ShareRuntimeShapes
from mil_passes.testing import check_pass, op_counts

PASS = "webnn::share_runtime_shapes"
S, T = get_new_symbol(), get_new_symbol()  # coremltools keeps symbol names process-wide


def decoder_like(layers: int, end_from: str = "x"):
    """Each layer slices its cache to the write position (the length of ``x``, or of ``y``) and reads
    the slice's shape: coremltools gives each slice a fresh symbol."""

    def build():
        specs = [mb.TensorSpec((1, S, 4)), mb.TensorSpec((1, T, 4)), mb.TensorSpec((layers, 2, 16, 4))]

        @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
        def prog(x, y, caches):
            source = x if end_from == "x" else y
            length = mb.slice_by_index(x=mb.shape(x=source), begin=[1], end=[2])
            end = mb.concat(values=([2], length, [4]), axis=0)
            outs = [mb.shape(x=mb.relu(x=x, name="relu"), name="relu_shape"), mb.shape(x=y, name="y_shape")]
            for i in range(layers):
                cache = mb.slice_by_index(
                    x=caches, begin=[i, 0, 0, 0], end=[i + 1, 2, 16, 4], squeeze_mask=[True, False, False, False]
                )
                window = mb.slice_by_index(x=cache, begin=[0, 0, 0], end=end, name=f"window_{i}")
                outs.append(
                    mb.add(x=window, y=mb.fill(shape=mb.shape(x=window, name=f"shape_{i}"), value=1.0), name=f"out_{i}")
                )
            return tuple(outs)

        return prog

    return build


def shape_inputs(prog) -> list[str]:
    return sorted(op.x.name for op in iter_ops(prog) if op.op_type == "shape")


def test_each_layer_reads_the_first_layers_shape():
    after = check_pass(decoder_like(3), PASS, sizes={"S": 5, "T": 2})
    assert shape_inputs(after) == ["window_0", "window_0", "x", "x", "y"]
    (found, *_), _ = ShareRuntimeShapes().find_matches(decoder_like(3)())
    assert found.describe() == (
        "shape 'relu_shape' reads run-time dims an earlier var has: it reads that var's shape, one computation "
        "for every layer (of 'relu', the dims of 'x')"
    )


def test_a_second_run_and_dedup_leave_one_shape_per_source():
    after = check_pass(decoder_like(2), PASS, sizes={"S": 3, "T": 1})
    ct.converters.mil.mil.passes.pass_registry.PASS_REGISTRY["common::remove_redundant_ops"](after)
    assert op_counts(after)["shape"] == 4  # x (for the end, and the relu's), y, the first window


def test_dims_of_another_symbol_are_not_shared():
    # the windows end at y's length: their dims are not x's, and y's shape is y's own
    after = check_pass(decoder_like(2, end_from="y"), PASS, sizes={"S": 4, "T": 2})
    assert shape_inputs(after) == ["window_0", "window_0", "x", "y", "y"]


def test_windows_cut_at_different_ends_are_not_shared():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, S, 4)), mb.TensorSpec((2, 16, 4))], opset_version=ct.target.iOS17)
        def prog(x, cache):
            length = mb.slice_by_index(x=mb.shape(x=x), begin=[1], end=[2])
            longer = mb.add(x=length, y=1)
            first = mb.slice_by_index(x=cache, begin=[0, 0, 0], end=mb.concat(values=([2], length, [4]), axis=0))
            second = mb.slice_by_index(x=cache, begin=[0, 0, 0], end=mb.concat(values=([2], longer, [4]), axis=0))
            return mb.shape(x=first, name="first_shape"), mb.shape(x=second, name="second_shape")

        return prog

    matches, _ = ShareRuntimeShapes().find_matches(build())
    assert matches == []
    check_pass(build, PASS, sizes={"S": 3})


def test_a_symbol_on_two_unequal_dims_is_not_carried():
    """``slice_by_size`` of 8 rows to x's length keeps x's symbol, but the run time clamps it: with
    10 rows of x, ``matmul(window, x^T)`` is [8, 10], ``matmul(window, window^T)`` [8, 8]. The symbol
    on two input axes with different keys is not carried: each output is keyed by its op."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((S, 4)), mb.TensorSpec((8, 4))], opset_version=ct.target.iOS17)
        def prog(x, c):
            window = mb.slice_by_size(x=c, begin=[0, 0], size=mb.shape(x=x), name="window")
            square = mb.matmul(x=window, y=window, transpose_y=True, name="square")
            across = mb.matmul(x=window, y=x, transpose_y=True, name="across")
            return mb.shape(x=square, name="square_shape"), mb.shape(x=across, name="across_shape")

        return prog

    rng = np.random.default_rng(0)
    for rows in (10, 6):
        feed = {"x": rng.standard_normal((rows, 4)).astype(np.float32), "c": np.ones((8, 4), np.float32)}
        after = check_pass(build, PASS, inputs=feed)
        assert shape_inputs(after) == ["across", "square", "x"]


@pytest.mark.parametrize("branch", ["clamped window", "another input"])
def test_a_symbol_a_cond_carries_is_not_carried(branch):
    """A ``cond`` has its true branch's type whichever branch runs: its output carries x's symbol,
    but the false branch (y, of another length) or the true one (a window clamped to 8 rows) can
    make its run-time length other than x's."""

    def build():
        specs = [mb.TensorSpec((S, 4)), mb.TensorSpec((T, 4)), mb.TensorSpec((8, 4)), mb.TensorSpec((1,))]

        @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
        def prog(x, y, c, p):
            def true_fn():
                if branch == "clamped window":
                    return mb.slice_by_size(x=c, begin=[0, 0], size=mb.shape(x=x))
                return mb.identity(x=x)

            w = mb.cond(pred=mb.squeeze(x=mb.greater(x=p, y=0.0)), _true_fn=true_fn, _false_fn=lambda: mb.identity(x=y))
            square = mb.matmul(x=w, y=w, transpose_y=True, name="square")
            across = mb.matmul(x=w, y=x, transpose_y=True, name="across")
            return mb.shape(x=square, name="square_shape"), mb.shape(x=across, name="across_shape")

        return prog

    rng = np.random.default_rng(1)
    for x_rows, y_rows, p in ((10, 3, 1.0), (10, 3, -1.0), (5, 5, -1.0)):
        feed = {
            "x": rng.standard_normal((x_rows, 4)).astype(np.float32),
            "y": rng.standard_normal((y_rows, 4)).astype(np.float32),
            "c": np.ones((8, 4), np.float32),
            "p": np.array([p], np.float32),
        }
        after = check_pass(build, PASS, inputs=feed)
        assert "square" not in [
            op.x.name for op in iter_ops(after) if op.op_type == "shape" and op.name != "square_shape"
        ]


def test_a_loop_body_is_left():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, S, 4))], opset_version=ct.target.iOS17)
        def prog(x):
            def body(i, acc):
                grown = mb.relu(x=x)
                return mb.add(x=i, y=1), mb.add(x=acc, y=mb.reduce_sum(x=mb.cast(x=mb.shape(x=grown), dtype="fp32")))

            return mb.while_loop(_cond=lambda i, acc: mb.less(x=i, y=2), _body=body, loop_vars=(0, 0.0))[1]

        return prog

    matches, _ = ShareRuntimeShapes().find_matches(build())
    assert matches == []


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 4),
    end_from=st.sampled_from(("x", "y")),
    s=st.integers(1, 16),
    t=st.integers(1, 16),
)
def test_property_bit_exact_at_random_sizes(layers, end_from, s, t):
    after = check_pass(decoder_like(layers, end_from), PASS, sizes={"S": s, "T": t})
    sources = {name for name in shape_inputs(after) if name.startswith("window")}
    assert sources == {"window_0"}
