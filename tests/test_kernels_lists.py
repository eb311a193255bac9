"""List kernels: make_list, list_read/write/scatter/gather/length, inside and outside while_loop."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import assert_same, run


def test_unwritten_elements_read_as_zeros_and_writes_past_the_end_grow_the_list():
    def build(a, b):
        ls = mb.make_list(init_length=2, elem_shape=(2,))
        first = mb.list_read(ls=ls, index=0)
        ls = mb.list_write(ls=ls, index=0, value=a)
        ls = mb.list_write(ls=ls, index=4, value=b)
        ls = mb.list_scatter(ls=ls, indices=[2, 1], value=np.array([[-1, -2], [-4, -5]], np.float32))
        return first, mb.list_read(ls=ls, index=0), mb.list_gather(ls=ls, indices=[4, 2, 3, 1]), mb.list_length(ls=ls)

    a, b = np.array([1, 3], np.float32), np.array([2, 4], np.float32)
    first, read, gathered, length = run(build, {"a": a, "b": b}, opset=ct.target.iOS15)
    assert_same(first, np.zeros(2, np.float32))
    assert_same(read, a)
    assert_same(gathered, np.array([[2, 4], [-1, -2], [0, 0], [-4, -5]], np.float32))
    assert_same(length, np.int32(5))


def test_a_list_carried_through_a_while_loop_collects_every_iteration():
    def body(i, ls, step):
        value = mb.mul(x=step, y=mb.cast(x=i, dtype="fp32"))
        return mb.add(x=i, y=1), mb.list_write(ls=ls, index=i, value=value), step

    def build(step):
        ls = mb.make_list(init_length=1, elem_shape=(2,))
        _, ls, _ = mb.while_loop(_cond=lambda i, ls, step: mb.less(x=i, y=3), _body=body, loop_vars=(0, ls, step))
        return mb.list_gather(ls=ls, indices=mb.range_1d(start=0, end=mb.list_length(ls=ls), step=1))

    (got,) = run(build, {"step": np.array([1, 2], np.float32)}, opset=ct.target.iOS15)
    assert_same(got, np.array([[0, 0], [1, 2], [2, 4]], np.float32))


def test_writes_do_not_change_the_list_they_were_given():
    def build(a):
        ls = mb.make_list(init_length=1, elem_shape=(1,), dtype="int32")
        written = mb.list_write(ls=ls, index=0, value=a)
        return mb.list_read(ls=ls, index=0), mb.list_read(ls=written, index=0)

    before, after = run(build, {"a": np.array([7], np.int32)}, opset=ct.target.iOS15)
    assert_same(before, np.zeros(1, np.int32))
    assert_same(after, np.array([7], np.int32))


def test_a_fixed_length_list_refuses_a_write_past_its_end_and_reads_are_bounded():
    def grow(a):
        ls = mb.make_list(init_length=2, elem_shape=(1,), dynamic_length=False)
        return mb.list_read(ls=mb.list_write(ls=ls, index=2, value=a), index=0)

    with pytest.raises(
        IndexError, match="list_write '.*': input 'index' is 2, past the end of a fixed-length list of length 2"
    ):
        run(grow, {"a": np.ones(1, np.float32)}, opset=ct.target.iOS15)

    def read_past(a):
        ls = mb.list_write(ls=mb.make_list(init_length=1, elem_shape=(1,)), index=0, value=a)
        return mb.list_gather(ls=ls, indices=[0, 3])

    with pytest.raises(IndexError, match="list_gather '.*': input 'indices' is 3, outside a list of length 1"):
        run(read_past, {"a": np.ones(1, np.float32)}, opset=ct.target.iOS15)
