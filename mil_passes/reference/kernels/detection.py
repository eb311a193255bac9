"""Detection kernels: ``non_maximum_suppression`` (iOS15 form; iOS17 moves the box axis last, drops
``score_threshold`` and the count output).

Greedy NMS as TensorFlow's ``non_max_suppression``, which coremltools' op tests use as the reference
of Core ML's: a box's score is its best class score; candidates (score above ``score_threshold``) are
taken in descending score (ties: lower index first), and a candidate is dropped when its IoU with a
box already taken exceeds ``iou_threshold``. With ``per_class_suppression`` this runs within each
class (a box's class is its best one) and the selections are merged in descending score. At most
``max_boxes`` are kept; when none survives, the best-scoring box is returned (the tests' reference
does this). Outputs are padded with zeros, and with -1 for the indices.
"""

from __future__ import annotations

import numpy as np

from . import kernel


def _corners(boxes: np.ndarray) -> np.ndarray:
    """``[B, 4]`` centre-size boxes ``(x, y, w, h)`` as ``(x1, y1, x2, y2)``."""
    x, y, w, h = (boxes[:, k] for k in range(4))
    return np.stack([x - w / 2, y - h / 2, x + w / 2, y + h / 2], axis=1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = width * height
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    union = area(box) + area(others) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _greedy(
    corners: np.ndarray, scores: np.ndarray, candidates: np.ndarray, iou_threshold: float, max_boxes: int
) -> list[int]:
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    kept: list[int] = []
    for index in order:
        if len(kept) == max_boxes:
            break
        if not kept or np.all(_iou(corners[index], corners[kept]) <= iou_threshold):
            kept.append(int(index))
    return kept


def select(
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, score_threshold: float, max_boxes: int, per_class: bool
) -> list[int]:
    """The indices NMS keeps for one batch: ``boxes [B, 4]``, ``scores [B, K]``; best first."""
    best = scores.max(axis=1)
    corners = _corners(boxes)
    candidates = np.flatnonzero(best > score_threshold)
    if per_class:
        classes = scores.argmax(axis=1)
        kept = [
            i
            for c in np.unique(classes[candidates])
            for i in _greedy(corners, best, candidates[classes[candidates] == c], iou_threshold, max_boxes)
        ]
        kept = sorted(kept, key=lambda i: (-best[i], i))[:max_boxes]
    else:
        kept = _greedy(corners, best, candidates, iou_threshold, max_boxes)
    return (kept or [int(np.argmax(best))])[:max_boxes]


@kernel("non_maximum_suppression")
def non_maximum_suppression(op, args: dict):
    iOS17 = "score_threshold" not in op.inputs
    boxes, scores = np.asarray(args["boxes"]), np.asarray(args["scores"])
    if iOS17:  # [n, 4, B] and [n, K, B]
        boxes, scores = boxes.transpose(0, 2, 1), scores.transpose(0, 2, 1)
    max_boxes = int(np.asarray(args["max_boxes"]))
    iou_threshold = float(np.asarray(args["iou_threshold"]))
    score_threshold = -np.inf if iOS17 else float(np.asarray(args["score_threshold"]))
    per_class = bool(np.asarray(args.get("per_class_suppression") or False))
    batch = boxes.shape[0]
    out_boxes = np.zeros((batch, max_boxes, 4), boxes.dtype)
    out_scores = np.zeros((batch, max_boxes, scores.shape[2]), scores.dtype)
    out_indices = np.full((batch, max_boxes), -1, np.int32)
    counts = np.zeros(batch, np.int32)
    for b in range(batch):
        kept = select(
            boxes[b].astype(np.float32),
            scores[b].astype(np.float32),
            iou_threshold,
            score_threshold,
            max_boxes,
            per_class,
        )
        out_boxes[b, : len(kept)] = boxes[b, kept]
        out_scores[b, : len(kept)] = scores[b, kept]
        out_indices[b, : len(kept)] = kept
        counts[b] = len(kept)
    if iOS17:
        return out_boxes.transpose(0, 2, 1), out_scores.transpose(0, 2, 1), out_indices
    return out_boxes, out_scores, out_indices, counts
