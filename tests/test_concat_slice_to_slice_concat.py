"""webnn::concat_slice_to_slice_concat: every window form, every refusal, random windows, the
streaming-cache program end to end (the NeMo-style torch model: test_concat_slice_torch.py)."""

import logging
import re

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types
from hypothesis import assume, given
from hypothesis import strategies as st

from mil_passes.examples import streaming_cache_program
from mil_passes.passes._windows import Piece, index_bounds, pieces_of
from mil_passes.passes.concat_slice_to_slice_concat import ConcatSliceToSliceConcat
from mil_passes.ir import iter_ops
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from mil_passes.testing import check_pass, op_counts

PASS = "webnn::concat_slice_to_slice_concat"
IOS17 = ct.target.iOS17
T, F = True, False
WINDOW_TYPES = ("slice_by_index", "slice_by_size", "split")


def mil(prog) -> str:
    """The program's ops in MIL text form, without types and op names."""
    lines = []
    for line in str(prog).splitlines():
        line = line.strip()
        if " = " in line or line.startswith("} ->"):
            line = re.sub(r": \([^)]*\)\^?\(\w+\)", "", line)
            lines.append(re.sub(r', name="[^"]*"\)', ")", line))
    return "\n".join(lines)


def windows_on_concats(prog) -> list:
    return [
        op
        for op in iter_ops(prog)
        if op.op_type in WINDOW_TYPES and op.x.op is not None and op.x.op.op_type == "concat"
    ]


def program(*shapes, dtype=types.fp32):
    specs = [mb.TensorSpec(shape, dtype=dtype) for shape in shapes]
    return mb.program(input_specs=specs, opset_version=IOS17)


# -- each form: the builder, the MIL before, the MIL after ---------------------------------------


def streaming():
    @program((1, 4, 8), (1, 4, 7))
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=-1, name="joined")
        return mb.slice_by_index(x=joined, begin=[0, 0, -8], end=[0, 0, 0], end_mask=[T, T, T], name="next_cache")

    return prog


STREAMING = (
    """
%joined = concat(values=(%cache, %x), axis=-1, interleave=False)
%next_cache = slice_by_index(x=%joined, begin=[0, 0, -8], end=[0, 0, 0], end_mask=[True, True, True])
} -> (%next_cache)
""",
    """
%next_cache_piece0 = slice_by_index(x=%cache, begin=[0, 0, 7], end=[1, 4, 8])
%next_cache = concat(values=(%next_cache_piece0, %x), axis=2, interleave=False)
} -> (%next_cache)
""",
)


def inside_one_input():
    @program((2, 4), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_index(x=ab, begin=[0, 5], end=[0, 7], end_mask=[T, F], name="window")

    return prog


INSIDE_ONE_INPUT = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window = slice_by_index(x=%ab, begin=[0, 5], end=[0, 7], end_mask=[True, False])
} -> (%window)
""",
    """
%window = slice_by_index(x=%b, begin=[0, 1], end=[2, 3])
} -> (%window)
""",
)


def whole_input():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        window = mb.slice_by_index(x=ab, begin=[0, 3], end=[0, 0], end_mask=[T, T], name="window")
        return mb.relu(x=window, name="y")

    return prog


WHOLE_INPUT = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window = slice_by_index(x=%ab, begin=[0, 3], end=[0, 0], end_mask=[True, True])
%y = relu(x=%window)
} -> (%y)
""",
    """
%y = relu(x=%b)
} -> (%y)
""",
)


def masks():
    @program((2, 3), (2, 4), (2, 2))
    def prog(a, b, c):
        abc = mb.concat(values=(a, b, c), axis=1, name="abc")
        head = mb.slice_by_index(x=abc, begin=[0, 99], end=[0, 5], begin_mask=[T, T], end_mask=[T, F], name="head")
        tail = mb.slice_by_index(x=abc, begin=[0, -4], end=[0, 99], end_mask=[T, T], name="tail")
        return head, tail

    return prog


MASKS = (
    """
%abc = concat(values=(%a, %b, %c), axis=1, interleave=False)
%head = slice_by_index(x=%abc, begin=[0, 99], end=[0, 5], begin_mask=[True, True], end_mask=[True, False])
%tail = slice_by_index(x=%abc, begin=[0, -4], end=[0, 99], end_mask=[True, True])
} -> (%head, %tail)
""",
    """
%head_piece1 = slice_by_index(x=%b, begin=[0, 0], end=[2, 2])
%head = concat(values=(%a, %head_piece1), axis=1, interleave=False)
%tail_piece0 = slice_by_index(x=%b, begin=[0, 2], end=[2, 4])
%tail = concat(values=(%tail_piece0, %c), axis=1, interleave=False)
} -> (%head, %tail)
""",
)


def strides():
    @program((1, 5), (1, 6))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        every_third = mb.slice_by_index(
            x=ab, begin=[0, 1], end=[0, 0], stride=[1, 3], end_mask=[T, T], name="every_third"
        )
        backwards = mb.slice_by_index(
            x=ab, begin=[0, -1], end=[0, 0], stride=[1, -2], end_mask=[T, T], name="backwards"
        )
        return every_third, backwards

    return prog


# every_third reads positions 1, 4 | 7, 10: a[1:5:3] then b[2:6:3] (the phase carries over);
# backwards reads 10, 8, 6 | 4, 2, 0: b[5:0:-2] then a[4::-2] (end_mask: down past 0).
STRIDES = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%every_third = slice_by_index(x=%ab, begin=[0, 1], end=[0, 0], stride=[1, 3], end_mask=[True, True])
%backwards = slice_by_index(x=%ab, begin=[0, -1], end=[0, 0], stride=[1, -2], end_mask=[True, True])
} -> (%every_third, %backwards)
""",
    """
%every_third_piece0 = slice_by_index(x=%a, begin=[0, 1], end=[1, 5], stride=[1, 3])
%every_third_piece1 = slice_by_index(x=%b, begin=[0, 2], end=[1, 6], stride=[1, 3])
%every_third = concat(values=(%every_third_piece0, %every_third_piece1), axis=1, interleave=False)
%backwards_piece0 = slice_by_index(x=%b, begin=[0, 5], end=[1, 0], stride=[1, -2])
%backwards_piece1 = slice_by_index(x=%a, begin=[0, 4], end=[1, 0], stride=[1, -2], end_mask=[False, True])
%backwards = concat(values=(%backwards_piece0, %backwards_piece1), axis=1, interleave=False)
} -> (%every_third, %backwards)
""",
)


def other_axes():
    @program((3, 4, 2), (3, 4, 5))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=2, name="ab")
        return mb.slice_by_index(x=ab, begin=[1, 0, 1], end=[3, 4, 5], stride=[1, 2, 1], name="window")

    return prog


OTHER_AXES = (
    """
%ab = concat(values=(%a, %b), axis=2, interleave=False)
%window = slice_by_index(x=%ab, begin=[1, 0, 1], end=[3, 4, 5], stride=[1, 2, 1])
} -> (%window)
""",
    """
%window_piece0 = slice_by_index(x=%a, begin=[1, 0, 1], end=[3, 3, 2], stride=[1, 2, 1])
%window_piece1 = slice_by_index(x=%b, begin=[1, 0, 0], end=[3, 3, 3], stride=[1, 2, 1])
%window = concat(values=(%window_piece0, %window_piece1), axis=2, interleave=False)
} -> (%window)
""",
)


def squeezes():
    @program((3, 4, 2), (3, 4, 5))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=2, name="ab")
        frame = mb.slice_by_index(
            x=ab, begin=[0, 0, -3], end=[0, 0, 0], end_mask=[T, T, T], squeeze_mask=[F, F, T], name="frame"
        )
        row = mb.slice_by_index(
            x=ab, begin=[0, 2, 1], end=[0, 0, 4], end_mask=[T, F, F], squeeze_mask=[F, T, F], name="row"
        )
        return frame, row

    return prog


# Squeezing the concat axis reads one element: one piece. Squeezing axis 1 renumbers the
# concat axis 2 to 1 in the result.
SQUEEZES = (
    """
%ab = concat(values=(%a, %b), axis=2, interleave=False)
%frame = slice_by_index(x=%ab, begin=[0, 0, -3], end=[0, 0, 0], end_mask=[True, True, True], squeeze_mask=[False, False, True])
%row = slice_by_index(x=%ab, begin=[0, 2, 1], end=[0, 0, 4], end_mask=[True, False, False], squeeze_mask=[False, True, False])
} -> (%frame, %row)
""",
    """
%frame = slice_by_index(x=%b, begin=[0, 0, 2], end=[3, 4, 3], squeeze_mask=[False, False, True])
%row_piece0 = slice_by_index(x=%a, begin=[0, 2, 1], end=[3, 3, 2], squeeze_mask=[False, True, False])
%row_piece1 = slice_by_index(x=%b, begin=[0, 2, 0], end=[3, 3, 2], squeeze_mask=[False, True, False])
%row = concat(values=(%row_piece0, %row_piece1), axis=1, interleave=False)
} -> (%frame, %row)
""",
)


def misses_inputs():
    @program((2, 3), (2, 4), (2, 2), (2, 5), (2, 1))
    def prog(a, b, c, d, e):
        five = mb.concat(values=(a, b, c, d, e), axis=-1, name="five")
        return mb.slice_by_index(x=five, begin=[0, 5], end=[0, 11], end_mask=[T, F], name="window")

    return prog


MISSES_INPUTS = (
    """
%five = concat(values=(%a, %b, %c, %d, %e), axis=-1, interleave=False)
%window = slice_by_index(x=%five, begin=[0, 5], end=[0, 11], end_mask=[True, False])
} -> (%window)
""",
    """
%window_piece0 = slice_by_index(x=%b, begin=[0, 2], end=[2, 4])
%window_piece2 = slice_by_index(x=%d, begin=[0, 0], end=[2, 2])
%window = concat(values=(%window_piece0, %c, %window_piece2), axis=1, interleave=False)
} -> (%window)
""",
)


def concats_of_concats():
    @program((2, 3), (2, 3), (4, 2))
    def prog(a, b, c):
        ab = mb.concat(values=(a, b), axis=0, name="ab")
        abc = mb.concat(values=(ab, c), axis=1, name="abc")
        inner = mb.concat(values=(a, b), axis=1, name="inner")
        outer = mb.concat(values=(inner, a), axis=1, name="outer")
        across = mb.slice_by_index(x=abc, begin=[1, 2], end=[3, 4], name="across")
        deep = mb.slice_by_index(x=outer, begin=[0, 2], end=[0, 8], end_mask=[T, F], name="deep")
        return across, deep

    return prog


# The slices of %ab and %inner the first round builds are windows of concats again: the
# rewriter re-visits them.
CONCATS_OF_CONCATS = (
    """
%ab = concat(values=(%a, %b), axis=0, interleave=False)
%abc = concat(values=(%ab, %c), axis=1, interleave=False)
%inner = concat(values=(%a, %b), axis=1, interleave=False)
%outer = concat(values=(%inner, %a), axis=1, interleave=False)
%across = slice_by_index(x=%abc, begin=[1, 2], end=[3, 4])
%deep = slice_by_index(x=%outer, begin=[0, 2], end=[0, 8], end_mask=[True, False])
} -> (%across, %deep)
""",
    """
%across_piece0_piece0 = slice_by_index(x=%a, begin=[1, 2], end=[2, 3])
%across_piece0_piece1 = slice_by_index(x=%b, begin=[0, 2], end=[1, 3])
%across_piece0_concat = concat(values=(%across_piece0_piece0, %across_piece0_piece1), axis=0, interleave=False)
%across_piece1 = slice_by_index(x=%c, begin=[1, 0], end=[3, 1])
%across = concat(values=(%across_piece0_concat, %across_piece1), axis=1, interleave=False)
%deep_piece0_piece0 = slice_by_index(x=%a, begin=[0, 2], end=[2, 3])
%deep_piece0_concat = concat(values=(%deep_piece0_piece0, %b), axis=1, interleave=False)
%deep_piece1 = slice_by_index(x=%a, begin=[0, 0], end=[2, 2])
%deep = concat(values=(%deep_piece0_concat, %deep_piece1), axis=1, interleave=False)
} -> (%across, %deep)
""",
)


def by_size():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        sized = mb.slice_by_size(x=ab, begin=[0, 2], size=[-1, 3], name="sized")
        tail = mb.slice_by_size(x=ab, begin=[1, 1], size=[1, -1], name="tail")
        return sized, tail

    return prog


BY_SIZE = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%sized = slice_by_size(x=%ab, begin=[0, 2], size=[-1, 3])
%tail = slice_by_size(x=%ab, begin=[1, 1], size=[1, -1])
} -> (%sized, %tail)
""",
    """
%sized_piece0 = slice_by_size(x=%a, begin=[0, 2], size=[-1, 1])
%sized_piece1 = slice_by_size(x=%b, begin=[0, 0], size=[-1, 2])
%sized = concat(values=(%sized_piece0, %sized_piece1), axis=1, interleave=False)
%tail_piece0 = slice_by_size(x=%a, begin=[1, 1], size=[1, 2])
%tail_piece1 = slice_by_size(x=%b, begin=[1, 0], size=[1, 4])
%tail = concat(values=(%tail_piece0, %tail_piece1), axis=1, interleave=False)
} -> (%sized, %tail)
""",
)


def splits():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        parts = mb.split(x=ab, split_sizes=[2, 2, 3], axis=1, name="parts")
        columns = mb.split(x=ab, num_splits=7, axis=-1, name="columns")
        return parts[0], parts[1], parts[2], columns[3], columns[5]

    return prog


# Every output of a split is a window; unused outputs get no pieces.
SPLITS = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%parts_0, %parts_1, %parts_2 = split(x=%ab, split_sizes=[2, 2, 3], axis=1)
%columns_0, %columns_1, %columns_2, %columns_3, %columns_4, %columns_5, %columns_6 = split(x=%ab, num_splits=7, axis=-1)
} -> (%parts_0, %parts_1, %parts_2, %columns_3, %columns_5)
""",
    """
%parts_0 = slice_by_index(x=%a, begin=[0, 0], end=[2, 2])
%parts_1_piece0 = slice_by_index(x=%a, begin=[0, 2], end=[2, 3])
%parts_1_piece1 = slice_by_index(x=%b, begin=[0, 0], end=[2, 1])
%parts_1 = concat(values=(%parts_1_piece0, %parts_1_piece1), axis=1, interleave=False)
%parts_2 = slice_by_index(x=%b, begin=[0, 1], end=[2, 4])
%columns_3 = slice_by_index(x=%b, begin=[0, 0], end=[2, 1])
%columns_5 = slice_by_index(x=%b, begin=[0, 2], end=[2, 3])
} -> (%parts_0, %parts_1, %parts_2, %columns_3, %columns_5)
""",
)


def symbolic_batch():
    batch = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec((batch, 3)), mb.TensorSpec((batch, 4))], opset_version=IOS17)
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        last_row = mb.slice_by_index(x=ab, begin=[-1, 2], end=[0, 5], end_mask=[T, F], name="last_row")
        sized = mb.slice_by_size(x=ab, begin=[0, 1], size=[-1, 5], name="sized")
        halves = mb.split(x=ab, split_sizes=[2, 5], axis=1, name="halves")
        return last_row, sized, halves[0]

    return prog


SYMBOLIC_BATCH = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%last_row = slice_by_index(x=%ab, begin=[-1, 2], end=[0, 5], end_mask=[True, False])
%sized = slice_by_size(x=%ab, begin=[0, 1], size=[-1, 5])
%halves_0, %halves_1 = split(x=%ab, split_sizes=[2, 5], axis=1)
} -> (%last_row, %sized, %halves_0)
""",
    """
%last_row_piece0 = slice_by_index(x=%a, begin=[-1, 2], end=[0, 3], end_mask=[True, False])
%last_row_piece1 = slice_by_index(x=%b, begin=[-1, 0], end=[0, 2], end_mask=[True, False])
%last_row = concat(values=(%last_row_piece0, %last_row_piece1), axis=1, interleave=False)
%sized_piece0 = slice_by_size(x=%a, begin=[0, 1], size=[-1, 2])
%sized_piece1 = slice_by_size(x=%b, begin=[0, 0], size=[-1, 3])
%sized = concat(values=(%sized_piece0, %sized_piece1), axis=1, interleave=False)
%halves_0 = slice_by_index(x=%a, begin=[0, 0], end=[0, 2], end_mask=[True, False])
} -> (%last_row, %sized, %halves_0)
""",
)


def in_cond():
    @program((2, 3), (2, 4))
    def prog(a, b):
        flag = mb.greater(x=mb.reduce_sum(x=a, name="total"), y=0.0, name="flag")
        ab = mb.concat(values=(a, b), axis=1, name="ab")

        def then():
            return mb.slice_by_index(x=ab, begin=[0, 2], end=[0, 5], end_mask=[T, F], name="then_window")

        def orelse():
            return mb.slice_by_index(x=ab, begin=[0, 0], end=[0, 3], end_mask=[T, F], name="else_window")

        return mb.cond(pred=flag, _true_fn=then, _false_fn=orelse, name="branch")

    return prog


# The concat sits outside the branches; the else window is %a whole.
IN_COND = (
    """
%total = reduce_sum(x=%a, keep_dims=False)
%flag = greater(x=%total, y=0.0)
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%branch = cond(pred=%flag)
%then_window = slice_by_index(x=%ab, begin=[0, 2], end=[0, 5], end_mask=[True, False])
} -> (%then_window)
%else_window = slice_by_index(x=%ab, begin=[0, 0], end=[0, 3], end_mask=[True, False])
} -> (%else_window)
} -> (%branch)
""",
    """
%total = reduce_sum(x=%a, keep_dims=False)
%flag = greater(x=%total, y=0.0)
%branch = cond(pred=%flag)
%then_window_piece0 = slice_by_index(x=%a, begin=[0, 2], end=[2, 3])
%then_window_piece1 = slice_by_index(x=%b, begin=[0, 0], end=[2, 2])
%then_window_concat = concat(values=(%then_window_piece0, %then_window_piece1), axis=1, interleave=False)
} -> (%then_window_concat)
} -> (%a)
} -> (%branch)
""",
)


def in_while_loop():
    # More than 10 elements per input: coremltools gives smaller concats symbolic values,
    # which while_loop's block checks trip over.
    @mb.program(
        input_specs=[mb.TensorSpec((2, 8)), mb.TensorSpec((2, 6)), mb.TensorSpec((1,), dtype=types.int32)],
        opset_version=IOS17,
    )
    def prog(cache, x, steps):
        def cond(c, i):
            return mb.less(x=mb.reduce_sum(x=i), y=np.int32(3))

        def body(c, i):
            joined = mb.concat(values=(c, x), axis=1)
            next_cache = mb.slice_by_index(x=joined, begin=[0, -8], end=[0, 0], end_mask=[T, T])
            return next_cache, mb.add(x=i, y=np.int32(1))

        cache_out, _ = mb.while_loop(_cond=cond, loop_vars=(cache, steps), _body=body, name="loop")
        return cache_out

    return prog


def in_while_loop_mil(prog) -> str:
    """Loop bodies are built twice by coremltools: auto-generated names differ between builds."""
    return re.sub(r"_\d+(?=\b|_)", "", mil(prog))


IN_WHILE_LOOP = (
    """
%loop, %loop = while_loop(loop_vars=(%cache, %steps))
%reduce_sum = reduce_sum(x=%steps_x0, keep_dims=False)
%less = less(x=%reduce_sum, y=3)
} -> (%less)
%concat = concat(values=(%cache_x0, %x), axis=1, interleave=False)
%slice_by_index = slice_by_index(x=%concat, begin=[0, -8], end=[0, 0], end_mask=[True, True])
%add = add(x=%steps_x0, y=1)
} -> (%slice_by_index, %add)
} -> (%loop)
""",
    """
%loop, %loop = while_loop(loop_vars=(%cache, %steps))
%reduce_sum = reduce_sum(x=%steps_x0, keep_dims=False)
%less = less(x=%reduce_sum, y=3)
} -> (%less)
%slice_by_index_piece0 = slice_by_index(x=%cache_x0, begin=[0, 6], end=[2, 8])
%slice_by_index_concat = concat(values=(%slice_by_index_piece0, %x), axis=1, interleave=False)
%add = add(x=%steps_x0, y=1)
} -> (%slice_by_index_concat, %add)
} -> (%loop)
""",
)


def concat_used_elsewhere():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        window = mb.slice_by_index(x=ab, begin=[0, 2], end=[0, 4], end_mask=[T, F], name="window")
        return ab, mb.relu(x=ab, name="activated"), window

    return prog


# The concat stays for its other uses (one of them a function output).
CONCAT_USED_ELSEWHERE = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window = slice_by_index(x=%ab, begin=[0, 2], end=[0, 4], end_mask=[True, False])
%activated = relu(x=%ab)
} -> (%ab, %activated, %window)
""",
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window_piece0 = slice_by_index(x=%a, begin=[0, 2], end=[2, 3])
%window_piece1 = slice_by_index(x=%b, begin=[0, 0], end=[2, 1])
%window = concat(values=(%window_piece0, %window_piece1), axis=1, interleave=False)
%activated = relu(x=%ab)
} -> (%ab, %activated, %window)
""",
)


def whole_concat():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        window = mb.slice_by_index(x=ab, begin=[0, 0], end=[0, 0], end_mask=[T, T], name="window")
        return mb.relu(x=window, name="y"), window

    return prog


# A window of everything is the concat's output; it takes the function output's name.
WHOLE_CONCAT = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window = slice_by_index(x=%ab, begin=[0, 0], end=[0, 0], end_mask=[True, True])
%y = relu(x=%window)
} -> (%y, %window)
""",
    """
%window = concat(values=(%a, %b), axis=1, interleave=False)
%y = relu(x=%window)
} -> (%y, %window)
""",
)


def window_of_input_output():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_index(x=ab, begin=[0, 0], end=[0, 3], end_mask=[T, F], name="window"), a

    return prog


# The window is input %a whole, and a function output: an identity keeps its name.
WINDOW_OF_INPUT_OUTPUT = (
    """
%ab = concat(values=(%a, %b), axis=1, interleave=False)
%window = slice_by_index(x=%ab, begin=[0, 0], end=[0, 3], end_mask=[True, False])
} -> (%window, %a)
""",
    """
%window = identity(x=%a)
} -> (%window, %a)
""",
)

FORMS = {
    "streaming": (streaming, STREAMING),
    "inside_one_input": (inside_one_input, INSIDE_ONE_INPUT),
    "whole_input": (whole_input, WHOLE_INPUT),
    "masks": (masks, MASKS),
    "strides": (strides, STRIDES),
    "other_axes": (other_axes, OTHER_AXES),
    "squeezes": (squeezes, SQUEEZES),
    "misses_inputs": (misses_inputs, MISSES_INPUTS),
    "concats_of_concats": (concats_of_concats, CONCATS_OF_CONCATS),
    "by_size": (by_size, BY_SIZE),
    "splits": (splits, SPLITS),
    "symbolic_batch": (symbolic_batch, SYMBOLIC_BATCH),
    "in_cond": (in_cond, IN_COND),
    "concat_used_elsewhere": (concat_used_elsewhere, CONCAT_USED_ELSEWHERE),
    "whole_concat": (whole_concat, WHOLE_CONCAT),
    "window_of_input_output": (window_of_input_output, WINDOW_OF_INPUT_OUTPUT),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_form(form):
    build, (before, after) = FORMS[form]
    assert mil(build()) == before.strip()
    rewritten = check_pass(build, PASS, sizes=3)
    assert mil(rewritten) == after.strip()
    assert windows_on_concats(rewritten) == []


def test_form_in_while_loop():
    before, after = IN_WHILE_LOOP
    assert in_while_loop_mil(in_while_loop()) == before.strip()
    rewritten = check_pass(
        in_while_loop,
        PASS,
        inputs={
            "cache": np.arange(16, dtype=np.float32).reshape(2, 8),
            "x": -np.arange(12, dtype=np.float32).reshape(2, 6),
            "steps": np.array([0], dtype=np.int32),
        },
    )
    assert in_while_loop_mil(rewritten) == after.strip()
    assert windows_on_concats(rewritten) == []


def test_shared_bounds_are_built_once():
    prog = streaming_cache_program(layers=3, channels=4)
    consts = op_counts(prog)  # consts excluded
    ConcatSliceToSliceConcat()(prog)
    counts = op_counts(prog)
    assert counts["concat"] == consts["concat"] + 3 and counts["slice_by_index"] == consts["slice_by_index"]
    pieces = [op for op in iter_ops(prog) if op.name.endswith("_piece0")]
    assert len(pieces) == 3 and len({op.begin for op in pieces}) == 1 and len({op.end for op in pieces}) == 1


def test_squeeze_with_begin_mask_reads_position_0():
    """coremltools' semantics (``solve_slice_by_index_slice``, its value inference): ``begin_mask``
    sets a squeezed axis' index to 0. The pieces spell the index out."""

    @program((2, 3), (3, 3))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=0, name="ab")
        return mb.slice_by_index(
            x=ab, begin=[3, 0], end=[0, 0], begin_mask=[T, F], end_mask=[F, T], squeeze_mask=[T, F], name="row"
        )

    ConcatSliceToSliceConcat()(prog)
    assert (
        mil(prog)
        == """
%row = slice_by_index(x=%a, begin=[0, 0], end=[1, 3], squeeze_mask=[True, False])
} -> (%row)
""".strip()
    )


@pytest.mark.parametrize(
    "selected, sizes, pieces",
    [
        (range(7, 15), [8, 7], [Piece(0, range(7, 8)), Piece(1, range(0, 7))]),
        (range(1, 11, 3), [5, 6], [Piece(0, range(1, 5, 3)), Piece(1, range(2, 6, 3))]),
        (range(10, -1, -2), [5, 6], [Piece(1, range(5, 0, -2)), Piece(0, range(4, -2, -2))]),
        (range(5, 11), [3, 4, 2, 5, 1], [Piece(1, range(2, 4)), Piece(2, range(0, 2)), Piece(3, range(0, 2))]),
        (range(3, 3), [2, 2], []),
    ],
)
def test_pieces_of(selected, sizes, pieces):
    assert pieces_of(selected, sizes) == pieces
    assert [list(p.part) for p in pieces_of(selected, sizes)] == [list(p.part) for p in pieces]


@pytest.mark.parametrize(
    "part, bounds",
    [
        (range(7, 8), (7, 8, 1)),
        (range(1, 5, 3), (1, 5, 3)),
        (range(4, -2, -2), (4, None, -2)),
        (range(5, 0, -2), (5, 0, -2)),
        (range(2, 3, 99), (2, 3, 1)),
        (range(0), (0, 0, 1)),
    ],
)
def test_index_bounds(part, bounds):
    assert index_bounds(part) == bounds


# -- refusals: the program is left as it was, with the reason --------------------------------------


def runtime_begin():
    @mb.program(
        input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 4)), mb.TensorSpec((2,), dtype=types.int32)],
        opset_version=IOS17,
    )
    def prog(a, b, begin):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_index(x=ab, begin=begin, end=[0, 5], end_mask=[T, F], name="window")

    return prog


def runtime_size():
    @mb.program(
        input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 4)), mb.TensorSpec((2,), dtype=types.int32)],
        opset_version=IOS17,
    )
    def prog(a, b, size):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_size(x=ab, begin=[0, 1], size=size, name="window")

    return prog


def runtime_concat_size():
    frames = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec((1, 4, 8)), mb.TensorSpec((1, 4, frames))], opset_version=IOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=-1, name="joined")
        return mb.slice_by_index(x=joined, begin=[0, 0, -8], end=[0, 0, 0], end_mask=[T, T, T], name="window")

    return prog


def interleaved():
    @program((2, 3), (2, 3))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, interleave=True, name="ab")
        return mb.slice_by_index(x=ab, begin=[0, 1], end=[0, 4], end_mask=[T, F], name="window")

    return prog


def split_other_axis():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        rows = mb.split(x=ab, num_splits=2, axis=0, name="rows")
        return rows[0], rows[1]

    return prog


def empty_window():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_index(x=ab, begin=[0, 4], end=[0, 4], end_mask=[T, F], name="window")

    return prog


def mistyped_size():
    @program((2, 3), (2, 4))
    def prog(a, b):
        ab = mb.concat(values=(a, b), axis=1, name="ab")
        return mb.slice_by_size(x=ab, begin=[0, -2], size=[-1, -1], name="window")

    return prog


REFUSALS = {
    "runtime_begin": (runtime_begin, "slice_by_index 'window': begin known only at run time"),
    "runtime_size": (runtime_size, "slice_by_size 'window': size known only at run time"),
    "runtime_concat_size": (
        runtime_concat_size,
        "slice_by_index 'window': concat input 'x' has a run-time size on axis 2",
    ),
    "interleave": (interleaved, "slice_by_index 'window': concat 'ab' interleaves its inputs"),
    "split_other_axis": (split_other_axis, "split 'rows': splits axis 0, not the concat axis 1: no window to move"),
    "empty_window": (empty_window, "slice_by_index 'window': 'window' reads no element of the concat axis"),
    "mistyped_slice_by_size": (
        mistyped_size,
        "slice_by_size 'window': begin -2 with size -1 on axis 1: its declared type is wrong",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusal(case, caplog):
    build, reason = REFUSALS[case]
    prog, before = build(), mil(build())
    rewrite = ConcatSliceToSliceConcat()
    with caplog.at_level(logging.DEBUG, logger="mil_passes"):
        rewrite(prog)
    assert mil(prog) == before
    assert rewrite.last_result.rewritten == 0
    assert [str(refusal) for refusal in rewrite.last_result.declined] == [reason]
    assert f"{PASS} left {reason}" in caplog.messages


def test_window_of_another_op_is_no_match():
    @program((2, 7))
    def prog(a):
        return mb.slice_by_index(x=mb.relu(x=a, name="r"), begin=[0, 1], end=[0, 3], end_mask=[T, F], name="w")

    rewrite = ConcatSliceToSliceConcat()
    rewrite(prog)
    assert rewrite.last_result.rewritten == 0 and rewrite.last_result.declined == []


# -- random concats and windows -------------------------------------------------------------------

DTYPES = {"fp32": types.fp32, "fp16": types.fp16, "int32": types.int32, "bool": types.bool}


@st.composite
def concats(draw):
    """Input shapes, dtype and axis of a concat of 1 to 5 inputs."""
    rank = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    shapes = [tuple(size if i == axis % rank else d for i, d in enumerate(dims)) for size in sizes]
    return shapes, draw(st.sampled_from(sorted(DTYPES))), axis


@st.composite
def index_windows(draw, shape):
    """slice_by_index params over every mask, stride, squeeze and sign; coremltools-valid."""
    rank = len(shape)
    squeezable = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    squeezable[draw(st.integers(0, rank - 1))] = False  # keep a tensor result
    params = {k: [] for k in ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask")}
    for n, squeeze in zip(shape, squeezable):
        begin_mask, end_mask = draw(st.booleans()), draw(st.booleans())
        stride = 1 if squeeze else draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        begin = draw(st.integers(-n, n - 1 if squeeze else n))
        end = draw(st.integers(-n, n))
        if not (begin_mask or end_mask) and (
            (begin >= 0 and end >= 0 and stride > 0 and end < begin)
            or (begin < 0 and end < 0 and stride < 0 and begin < end)
        ):
            end = begin  # coremltools refuses to type these; they are empty anyway
        for key, value in zip(params, (begin, end, stride, begin_mask, end_mask, squeeze)):
            params[key].append(value)
    return params


def numpy_window(params, shape):
    """The window as numpy indexing, coremltools' semantics."""
    index = []
    for i, n in enumerate(shape):
        begin = None if params["begin_mask"][i] else params["begin"][i]
        if params["squeeze_mask"][i]:
            index.append(range(n)[slice(begin, None, 2**31 - 1)][0])
        else:
            end = None if params["end_mask"][i] else params["end"][i]
            index.append(slice(begin, end, params["stride"][i]))
    return tuple(index)


# mb.program reads the function's argument names: one signature per input count.
SIGNATURES = {
    1: lambda body: lambda a: body(a),
    2: lambda body: lambda a, b: body(a, b),
    3: lambda body: lambda a, b, c: body(a, b, c),
    4: lambda body: lambda a, b, c, d: body(a, b, c, d),
    5: lambda body: lambda a, b, c, d, e: body(a, b, c, d, e),
}


def concat_program(shapes, dtype, axis, window):
    specs = [mb.TensorSpec(shape, dtype=DTYPES[dtype]) for shape in shapes]

    def body(*inputs):
        return window(mb.concat(values=inputs, axis=axis, name="joined"))

    return mb.program(input_specs=specs, opset_version=IOS17)(SIGNATURES[len(shapes)](body))


def check_random(shapes, dtype, axis, window, *, expect_rewrite: bool):
    rewritten = check_pass(lambda: concat_program(shapes, dtype, axis, window), PASS)
    left = windows_on_concats(rewritten)
    assert (left == []) == expect_rewrite, mil(rewritten)


@given(concats(), st.data())
def test_random_slice_by_index(concat, data):
    shapes, dtype, axis = concat
    total = list(shapes[0])
    total[axis] = sum(shape[axis] for shape in shapes)
    params = data.draw(index_windows(total))
    window = lambda x: mb.slice_by_index(x=x, name="window", **params)  # noqa: E731
    declared = concat_program(shapes, dtype, axis, window).functions["main"].outputs[0].shape
    expected = np.empty(total)[numpy_window(params, total)].shape
    assume(tuple(declared) == expected)  # coremltools mistypes a few windows of size-1 axes
    on_axis = numpy_window(params, total)[axis]
    reads = isinstance(on_axis, int) or len(range(total[axis])[on_axis]) > 0
    check_random(shapes, dtype, axis, window, expect_rewrite=reads)


@given(concats(), st.data())
def test_random_slice_by_size(concat, data):
    shapes, dtype, axis = concat
    total = list(shapes[0])
    total[axis] = sum(shape[axis] for shape in shapes)
    begin = [data.draw(st.integers(0, n - 1)) for n in total]
    size = [data.draw(st.sampled_from([-1, *range(1, n - b + 1)])) for n, b in zip(total, begin)]
    window = lambda x: mb.slice_by_size(x=x, begin=begin, size=size, name="window")  # noqa: E731
    check_random(shapes, dtype, axis, window, expect_rewrite=True)


@given(concats(), st.data())
def test_random_split(concat, data):
    shapes, dtype, axis = concat
    total = sum(shape[axis] for shape in shapes)
    cuts = sorted(data.draw(st.sets(st.integers(1, total - 1), max_size=4))) if total > 1 else []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
    window = lambda x: mb.split(x=x, split_sizes=sizes, axis=axis, name="window")  # noqa: E731
    check_random(shapes, dtype, axis, window, expect_rewrite=True)


# -- the streaming-cache program end to end --------------------------------------------------------


def test_streaming_program_end_to_end(tmp_path):
    build = lambda: streaming_cache_program(layers=24, channels=1024, dtype="fp16")  # noqa: E731
    before = build()
    assert len(windows_on_concats(before)) == 24
    rewritten = check_pass(build, PASS, trials=1)
    assert windows_on_concats(rewritten) == []
    assert op_counts(rewritten)["concat"] == 48

    pipeline = ct.PassPipeline(pass_names=[PASS], pipeline_name="EMPTY+concat_slice_to_slice_concat")
    mlmodel = ct.convert(
        build(),
        convert_to="mlprogram",
        pass_pipeline=pipeline,
        minimum_deployment_target=IOS17,
        skip_model_load=True,
    )
    assert windows_on_concats(mlmodel._mil_program) == []
    path = tmp_path / "streaming.mlpackage"
    mlmodel.save(str(path))
    assert (path / "Manifest.json").is_file()
    reloaded = ct.models.MLModel(str(path), skip_model_load=True)
    assert [o.name for o in reloaded.get_spec().description.output] == ["new_cache", "layer23_conv"]


def test_a_concat_of_scalars_is_refused():
    """Found by the fuzzer once it planted torch's concat of scalars: a piece of a scalar input would
    be a scalar where the window is a vector."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 1))], opset_version=ct.target.iOS17)
        def prog(x):
            first = mb.gather(x=mb.shape(x=x), indices=0, axis=0, name="first")
            joined = mb.concat(values=(first, np.int32(1)), axis=0, name="joined")
            return mb.slice_by_index(x=joined, begin=[0], end=[0], begin_mask=[True], end_mask=[True], name="window")

        return prog

    prog = build()
    graph_pass = PASS_REGISTRY[PASS]
    graph_pass(prog)
    assert [r.reason for r in graph_pass.last_result.declined] == ["concat input 'first' is a scalar"]
    check_pass(build, PASS)
