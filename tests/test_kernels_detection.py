"""non_maximum_suppression: coremltools' own smoke case, both forms, and the greedy rule checked as a
property (kept boxes overlap at most iou_threshold; each dropped candidate overlaps a better kept one)."""

from __future__ import annotations

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from hypothesis import given, strategies as st

from kernel_helpers import assert_same, run
from mil_passes.reference.kernels.detection import _corners, _iou, select

BOXES = np.array([[[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]], np.float32)
SCORES = np.array([[[-3.5], [9.4], [2.3], [0.7]]], np.float32)


def test_coremltools_smoke_case():
    build = lambda b, s: mb.non_maximum_suppression(
        boxes=b, scores=s, iou_threshold=0.2, score_threshold=0.4, max_boxes=2, per_class_suppression=True
    )
    boxes, scores, indices, count = run(build, {"b": BOXES, "s": SCORES}, opset=ct.target.iOS15)
    assert_same(boxes, np.array([[[1, 1, 1, 1], [2, 2, 2, 2]]], np.float32))
    assert_same(scores, np.array([[[9.4], [2.3]]], np.float32))
    assert_same(indices, np.array([[1, 2]], np.int32))
    assert_same(count, np.array([2], np.int32))


def test_ios17_form_puts_the_box_axis_last_and_pads():
    build = lambda b, s: mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.2, max_boxes=5)
    boxes, scores, indices = run(
        build, {"b": BOXES.transpose(0, 2, 1).copy(), "s": SCORES.transpose(0, 2, 1).copy()}, opset=ct.target.iOS17
    )
    # no score threshold: box 3 overlaps box 2 (IoU 2.25 / 10.75 > 0.2); the empty box 0 overlaps nothing
    assert_same(indices, np.array([[1, 2, 0, -1, -1]], np.int32))
    assert_same(boxes[0, :, 3:], np.zeros((4, 2), np.float32))
    assert_same(scores[0, 0, :3], np.array([9.4, 2.3, -3.5], np.float32))


def test_overlapping_boxes_are_suppressed_and_none_left_gives_the_best():
    boxes = np.array([[0, 0, 2, 2], [0.1, 0, 2, 2], [5, 5, 1, 1]], np.float32)
    scores = np.array([[0.9], [0.95], [0.5]], np.float32)
    assert select(boxes, scores, 0.5, 0.0, 3, False) == [1, 2]  # box 0 overlaps box 1 (IoU 0.9)
    assert select(boxes, scores, 0.5, 0.99, 3, False) == [1]  # nothing above the threshold: the best box


@given(st.integers(0, 2**31 - 1), st.booleans())
def test_greedy_selection_is_maximal_and_non_overlapping(seed, per_class):
    rng = np.random.default_rng(seed)
    n, classes, iou_threshold = 12, 3, 0.3
    boxes = np.concatenate([rng.uniform(0, 4, (n, 2)), rng.uniform(0.5, 2, (n, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, (n, classes)).astype(np.float32)
    kept = select(boxes, scores, iou_threshold, 0.2, n, per_class)
    corners, best, label = _corners(boxes), scores.max(axis=1), scores.argmax(axis=1)
    same = (lambda i, j: label[i] == label[j]) if per_class else (lambda i, j: True)
    for a in kept:
        for b in kept:
            if a != b and same(a, b):
                assert _iou(corners[a], corners[[b]])[0] <= iou_threshold
    for i in np.flatnonzero(best > 0.2):
        if i not in kept:
            assert any(
                same(i, k) and best[k] >= best[i] and _iou(corners[i], corners[[k]])[0] > iou_threshold for k in kept
            )
    assert [best[k] for k in kept] == sorted((best[k] for k in kept), reverse=True)
