"""Plants of the mask rewrites: an fp16 ±inf sentinel into a softmax, and its look-alikes."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..programs.grower import Grower, dtype_of, is_static, numel, shape_of
from ..programs.recipe import Ref
from .glue import seeded


def plant_infinite_mask(g: Grower) -> list[Ref]:
    """``softmax(add(x, mask))`` / ``softmax(select(keep, x, fill(-inf)))`` with an fp16 const that
    holds -inf (or +inf, subtracted), every row keeping a position; now and then the masked logits
    are also an output (the sentinel's value escapes: left), or the mask is fp32 (not a candidate)."""
    dtype = "fp16" if not g.chance(8) else "fp32"
    x = g.pick(
        lambda v: (
            dtype_of(v) == dtype
            and 1 <= len(shape_of(v))
            and all(map(is_static, shape_of(v)))
            and numel(shape_of(v)) <= 64
            and int(shape_of(v)[-1]) >= 1
        )
    )
    if x is None:
        x = g.emit("identity", {"x": seeded(g, dtype, (2, 5))})[0]
    shape = tuple(int(d) for d in shape_of(g.var(x)))
    width = shape[-1]
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    masked = rng.random(shape[-1:] if g.draw(st.booleans()) else shape) < 0.5
    masked[..., int(rng.integers(0, width))] = False  # every row keeps a position
    np_dtype = np.float16 if dtype == "fp16" else np.float32
    form = g.choose(("add", "add", "sub", "select", "fill"))
    sentinel: np.ndarray | Ref | None = None
    if form in ("add", "sub"):
        sign = -1.0 if form == "add" else 1.0
        mask = np.where(masked, sign * np.inf, 0.0).astype(np_dtype)
        scores = g.emit(form, {"x": x, "y": mask})[0]
    else:
        cond = np.broadcast_to(~masked, shape).copy()
        sentinel = np.array(-np.inf, np_dtype)
        if form == "fill":
            sentinel = g.emit("fill", {"shape": g.ints(shape), "value": np.array(-np.inf, np_dtype)})[0]
        scores = g.emit("select", {"cond": cond, "a": x, "b": sentinel})[0]
    out = g.emit("softmax", {"x": scores, "axis": g.ints(-1)})
    if g.chance(8):
        return out + [scores]
    # Out of sight: other plants would build on the infinite values (band_part_difference_to_select
    # leaves an infinite v, and would find work in fewer programs).
    g.scopes[-1][:] = [ref for ref in g.scopes[-1] if ref != scores and ref != sentinel]
    return out


MASK_PLANTS = {"finite_mask_sentinels": plant_infinite_mask}
