"""The example programs: the streaming-cache reproducer of docs/evidence.md §1."""

import coremltools as ct
import numpy as np
import pytest

from mil_passes.examples import streaming_cache_program
from mil_passes.reference import evaluate
from mil_passes.testing import assert_equivalent, interface, op_counts, random_inputs


def _windows_on_concats(prog):
    return [
        op
        for op in prog.functions["main"].operations
        if op.op_type == "slice_by_index" and op.x.op is not None and op.x.op.op_type == "concat"
    ]


def test_streaming_program_is_the_reported_reproducer():
    prog = streaming_cache_program(layers=3, channels=16)
    assert interface(prog) == {
        "inputs": [("cache", "fp16", ("1", "3", "16", "8")), ("x", "fp16", ("1", "16", "7"))],
        "outputs": [("new_cache", "fp16", ("1", "3", "16", "8")), ("layer2_conv", "fp16", ("1", "16", "7"))],
    }
    assert op_counts(prog) == {"transpose": 2, "slice_by_index": 6, "concat": 3, "conv": 3, "stack": 1}
    windows = _windows_on_concats(prog)
    assert [w.name for w in windows] == ["layer0_next_cache", "layer1_next_cache", "layer2_next_cache"]
    assert (
        "%layer1_next_cache: (1, 16, 8, fp16)(Tensor) = slice_by_index(x=%layer1_joined, "
        'begin=[0, 0, -8], end=[0, 0, 0], end_mask=[True, True, True], name="layer1_next_cache")'
    ) in str(prog)
    conv = prog.functions["main"].find_ops(op_type="conv")[0]
    assert conv.groups.val == 16 and conv.weight.shape == (16, 1, 9) and conv.pad_type.val == "valid"


def test_next_cache_is_the_last_cached_frames_of_cache_and_input():
    prog = streaming_cache_program(layers=2, channels=4, new_frames=3, cached_frames=5, dtype="fp32")
    feeds = random_inputs(prog, seed=1)
    out = evaluate(prog, feeds)
    cache, x = feeds["cache"], feeds["x"]
    layer0 = np.concatenate([cache[:, 0], x], axis=-1)[..., -5:]
    np.testing.assert_array_equal(out["new_cache"][:, 0], layer0)
    assert out["layer1_conv"].shape == (1, 4, 3)


@pytest.mark.parametrize("new_frames, cached_frames", [(7, 8), (8, 8), (9, 4), (1, 3)])
def test_windows_on_inputs_computes_the_same(new_frames, cached_frames):
    def build(windows_on_inputs):
        return streaming_cache_program(
            layers=3,
            channels=4,
            new_frames=new_frames,
            cached_frames=cached_frames,
            windows_on_inputs=windows_on_inputs,
        )

    fixed = build(True)
    assert _windows_on_concats(fixed) == []
    assert_equivalent(build(False), fixed)


def test_fp32_and_opset():
    prog = streaming_cache_program(layers=1, channels=2, dtype="fp32", opset=ct.target.iOS16)
    assert prog.functions["main"].opset_version == ct.target.iOS16
    assert interface(prog)["inputs"][0][1] == "fp32"


def test_weights_are_seeded():
    a = streaming_cache_program(layers=1, channels=2, seed=3)
    b = streaming_cache_program(layers=1, channels=2, seed=3)
    weight = lambda p: p.functions["main"].find_ops(op_type="conv")[0].weight.val  # noqa: E731
    np.testing.assert_array_equal(weight(a), weight(b))
    other = streaming_cache_program(layers=1, channels=2, seed=4)
    assert not np.array_equal(weight(a), weight(other))  # the seed chooses the weights


@pytest.mark.parametrize(
    "kwargs, message",
    [({"dtype": "int8"}, "dtype must be one of fp16, fp32"), ({"layers": 0}, "at least 1")],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        streaming_cache_program(**kwargs)
