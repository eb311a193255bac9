"""The program rules: what the model's inputs, outputs, states and weights say of its placement."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Function, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ...passes.concat_slice_to_slice_concat import WindowOfConcat
from ..dims import DimNames
from .facts import FunctionView, dtype_of, is_const, is_weight_op, rank_of, static_shape
from .op_rules import NE_RULES
from .refused_window import REFUSED_CAUSE, refusal_why, refused_join
from .rule import (
    APPLE,
    CORE_AI,
    COST,
    CPU_BY_COST,
    ELSEWHERE,
    MEASURED,
    WHOLE_MODEL,
    Hit,
    PlacementRule,
    ProgramHit,
    Source,
)

GIB = 1 << 30
MIB = 1 << 20
ALIGNMENT_BYTES = 64  # the Neural Engine pads the last axis of inputs and outputs to 64 bytes
#: Below this many bytes of weights and model inputs and outputs, Core ML's planner has preferred
#: the CPU for every op in each published plan (docs/neural-engine.md, "Published compute plans").
SMALL_GRAPH_BYTES = MIB


def states(func: Function):
    return [(name, var) for name, var in func.inputs.items() if types.is_state(var.sym_type)]


def state_shape(var) -> tuple | None:
    wrapped = var.sym_type.wrapped_type()
    return tuple(wrapped.get_shape()) if types.is_tensor(wrapped) else None


def _state_ops(view: FunctionView, state) -> tuple:
    """The ops that read or write ``state``: its ``read_state`` s, its ``coreml_update_state`` s, and the
    ``slice_update`` s between them (a cache written in place)."""
    ops = [op for op in view.ops_of("read_state") if op.input is state]
    ops += [op for op in view.ops_of("coreml_update_state") if op.state is state]
    ops += [op for op in view.ops_of("slice_update") if _reads_state(op.x, state) or _writes_state(op, state)]
    return tuple(ops)


def _reads_state(var, state=None) -> bool:
    """``var`` is a ``read_state`` of ``state`` (of any state when None)."""
    producer = var.op
    return producer is not None and producer.op_type == "read_state" and (state is None or producer.input is state)


def _writes_state(op, state=None) -> bool:
    """An output of ``op`` goes to ``coreml_update_state`` of ``state`` (of any state when None)."""
    return any(
        reader.op_type == "coreml_update_state" and (state is None or reader.state is state)
        for reader in op.outputs[0].child_ops
    )


def state_width(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    hits = []
    for name, var in states(view.func):
        shape = state_shape(var)
        if not shape or is_symbolic(shape[-1]) or int(shape[-1]) % 32 == 0:
            continue
        hits.append(
            ProgramHit("state", name, Hit(f"is {int(shape[-1])} wide (not a multiple of 32)"), _state_ops(view, var))
        )
    return hits


def range_shape(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    hits = []
    for name, var in view.func.inputs.items():
        if types.is_state(var.sym_type) or name in dims.enumerated:
            continue
        flexible = [axis for axis, d in enumerate(getattr(var, "shape", ()) or ()) if is_symbolic(d)]
        if flexible:
            axes = ", ".join(str(a) for a in flexible)
            hits.append(ProgramHit("input", name, Hit(f"has a flexible (RangeDim) size on axis {axes}")))
    return hits


def _element_bytes(dtype) -> int:
    return 1 if dtype in (types.int8, types.uint8) else 2  # floats reach the Neural Engine as fp16


def last_axis_padding(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    hits, seen = [], set()
    func = view.func
    edges = [("input", n, v) for n, v in func.inputs.items() if not types.is_state(v.sym_type)]
    edges += [("output", v.name, v) for v in func.outputs]
    edges += [("state", n, v) for n, v in states(func)]
    for kind, label, var in edges:
        shape = state_shape(var) if types.is_state(var.sym_type) else static_shape(var)
        dtype = var.sym_type.wrapped_type().get_primitive() if types.is_state(var.sym_type) else dtype_of(var)
        if not shape or dtype is None or is_symbolic(shape[-1]) or label in seen:
            continue
        seen.add(label)
        last, size = int(shape[-1]), _element_bytes(dtype)
        if last * size < ALIGNMENT_BYTES:
            why = f"has a last axis of {last} ({last * size} bytes)"
            hits.append(ProgramHit(kind, label, Hit(why)))
    return hits


def _var_bytes(var) -> int | None:
    """The bytes of a tensor as the Neural Engine holds it (fp16 for floats), None when a size is not known."""
    shape, dtype = static_shape(var), dtype_of(var)
    if shape is None or dtype is None:
        return None
    return int(np.prod(shape, dtype=np.int64)) * _element_bytes(dtype)


def small_graph(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    """Weights, states and model inputs and outputs under :data:`SMALL_GRAPH_BYTES`: every op Core ML could run
    on the Neural Engine it runs on the CPU, by cost. Not judged when an input's size is known only
    at run time and the weights alone are under the bound."""
    func = view.func
    total = view.weight_bytes
    for _, state in states(func):
        shape = state_shape(state)
        if shape is None or any(is_symbolic(d) for d in shape):
            return []
        total += int(np.prod(shape, dtype=np.int64)) * _element_bytes(state.sym_type.wrapped_type().get_primitive())
    edges = [v for v in func.inputs.values() if not types.is_state(v.sym_type)] + list(func.outputs)
    for var in edges:
        size = _var_bytes(var)
        if size is None:
            return []
        total += size
    if total >= SMALL_GRAPH_BYTES:
        return []
    ops = tuple(op for op in func.operations if not is_weight_op(op.op_type))  # the top level
    why = f"reads {total / 1024:.0f} KiB of weights, inputs and outputs (under {SMALL_GRAPH_BYTES // 1024} KiB)"
    return [ProgramHit("model", "", Hit(why), ops)]


def refused_windows(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    """The windows of a concat the Neural Engine compiler refuses (:mod:`.refused_window`), found by
    ``webnn::concat_slice_to_slice_concat``'s own matcher."""
    hits = []
    pattern = WindowOfConcat()
    for op in view.ops_of("slice_by_index"):
        if op.x.op is None or op.x.op.op_type != "concat":
            continue
        windows = pattern.match(op)
        for window in windows if isinstance(windows, tuple) else ():
            join = refused_join(op, window)
            if join is not None:
                hits.append(
                    ProgramHit(
                        op.op_type, op.name, Hit(refusal_why(op, window, join), shared=REFUSED_CAUSE), (op, join)
                    )
                )
    return hits


def runtime_state_writes(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    """``slice_update`` s of an iOS 18 state at run-time positions (a KV cache written at the position)."""
    hits = []
    for op in view.ops_of("slice_update"):
        bounds = [getattr(op, name, None) for name in ("begin", "end")]
        if all(is_const(var) for var in bounds if var is not None):
            continue
        if _reads_state(op.x) or _writes_state(op):
            hits.append(ProgramHit(op.op_type, op.name, Hit("writes a state at run-time positions"), (op,)))
    return hits


def rank5_scatters(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    """A ``scatter`` family op on a rank-5 tensor (a KV cache written by scatter)."""
    hits = []
    for op in view.ops_of("scatter", "scatter_along_axis", "scatter_nd"):
        if (rank_of(op.data) or 0) >= 5:
            hits.append(ProgramHit(op.op_type, op.name, Hit(f"scatters into a rank-{rank_of(op.data)} tensor"), (op,)))
    return hits


def int4_blockwise(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    """Weights decompressed from 4-bit blocks (``constexpr_blockwise_shift_scale`` of int4/uint4 data)."""
    hits = []
    for op in view.ops_of("constexpr_blockwise_shift_scale"):
        if dtype_of(op.data) in (types.int4, types.uint4):
            hits.append(ProgramHit(op.op_type, op.name, Hit("decompresses 4-bit blockwise weights")))
    return hits


def model_size(view: FunctionView, dims: DimNames) -> list[ProgramHit]:
    total = view.weight_bytes
    if total <= GIB:
        return []
    return [ProgramHit("model", "", Hit(f"holds {total / GIB:.1f} GiB of weights (over 1 GiB)"))]


MERIDIAN = "LuuOW/meridian-mcp mlcore/ane_encoder/README.md"
PROFILER = "FluidInference/FluidAudio Documentation/ANE_Profiler.md"

#: Model-level rejections: one hit and the Neural Engine compiler rejects the whole model.
MODEL_RULES: tuple[PlacementRule, ...] = (
    PlacementRule(
        "ane-refused-slice-of-concat",
        "a `slice_by_index` on a concat's last axis, offset not a multiple of 8, width a multiple of 8 "
        "but not of 32, joined by `concat`/`stack`",
        WHOLE_MODEL,
        (
            Source(
                "docs/evidence.md §1",
                MEASURED,
                'M2 Pro, macOS 27.2, coremltools 9.0, iOS17: the Neural Engine compiler fails ("Graph traversal '
                'failure", code 22) and Core ML runs all 1,674 ops on the CPU, ~15x slower',
            ),
        ),
        "cut the window out of the concat's inputs instead",
        refused_windows,
        on_program=True,
        says="the Neural Engine compiler refuses this and Core ML runs the whole model on the CPU",
        chips="M2 Pro measured",
    ),
    PlacementRule(
        "ane-dynamic-state-update",
        "a slice_update of an iOS 18 state whose begin or end is computed at run time "
        "(a KV cache written at the position, as coremltools' stateful-model guide converts it)",
        WHOLE_MODEL,
        (
            Source(
                "FluidInference/mobius#77",
                MEASURED,
                "M5 Pro, coremltools 9.0: Qwen3-0.6B decode (stateful, in-graph KV mutation) under CPU_AND_NE: "
                '"ANE REJECTED — ANECCompile -14"; it runs under CPU_AND_GPU; the stateless prefill plans '
                "1918 of 1919 ops on the Neural Engine",
            ),
            Source(
                "apple/coreai-torch#6",
                CORE_AI,
                "Core AI: a KV-cache write offset computed from an input's values segfaults inside "
                "ANECompiler at load; compile-time constants run",
            ),
        ),
        "keep the cache outside the model (the cache in, this step's entries out), or write it at constant offsets",
        runtime_state_writes,
        on_program=True,
        chips="M5 Pro measured",
    ),
    PlacementRule(
        "ane-rank5-scatter",
        "a scatter, scatter_along_axis or scatter_nd into a rank-5 tensor (a KV cache written by scatter)",
        WHOLE_MODEL,
        (
            Source(
                PROFILER,
                MEASURED,
                'PocketTTS, MLComputePlan, M-series: flowlm runs 100% on the GPU, "the rank-5 KV-cache scatter '
                'is rejected by the ANE compiler at any precision"; the scatter-free graph plans 100% ANE',
            ),
        ),
        "write the cache as a one-hot multiply-add on rank-4 tensors, or keep it outside the model",
        rank5_scatters,
        on_program=True,
        chips="M-series measured",
    ),
    PlacementRule(
        "ane-state-width",
        "an iOS 18 state whose last axis is not a multiple of 32",
        WHOLE_MODEL,
        (
            Source(
                "apple/coremltools#2631",
                MEASURED,
                'M4, Xcode 16.3, macOS 15.2, coremltools 9.0: a stateful model "fails to run on the Apple Neural '
                'Engine ... if the state tensor dimensions ... are not a multiple of 32": "When w = 270, the model '
                'fails on ANE. When w = 256, it works perfectly"; CPU and GPU run it',
            ),
        ),
        "pad the state's last axis to a multiple of 32 and slice what you read",
        state_width,
        on_program=True,
        chips="M4 measured",
    ),
)

PROGRAM_RULES: tuple[PlacementRule, ...] = MODEL_RULES + (
    PlacementRule(
        "ane-small-graph",
        "a model whose weights, states, inputs and outputs come to under 1 MiB "
        "(shown in the placement, not as a finding)",
        CPU_BY_COST,
        (
            Source(
                MERIDIAN,
                MEASURED,
                "MLComputePlan: the 2-layer x 128 preset (~0.8 MB) has the Neural Engine supported for all 77 ops "
                "and preferred for none; the 6-layer x 384 preset (~20 MB) plans 217 of 217 on it",
            ),
            Source(
                "vx-lang/Vx#435",
                MEASURED,
                'M4, MLComputePlan: an fp16 matmul of two 512x512 inputs plans on the Neural Engine; "In f16, '
                'CoreML picks the CPU at 384 and below"',
            ),
            Source(
                "vx-lang/Vx#436",
                MEASURED,
                "M4: a 4x4 matmul's casts and matmul list the Neural Engine as supported; the CPU is preferred "
                "for every op, with the GPU excluded too",
            ),
        ),
        "nothing to fix: on a graph this small the CPU is faster; batch work into one larger model if it matters",
        small_graph,
        on_program=True,
        reported=False,  # about the whole model, and the CPU is the right place for it: the summary says it
        says="Core ML's planner prefers the CPU for every op (a cost decision)",
        chips="M4 and M-series measured",
    ),
    PlacementRule(
        "ane-range-shape",
        "a model input with a flexible (RangeDim) size",
        ELSEWHERE,
        (
            Source(
                "https://developer.apple.com/forums/thread/724930",
                APPLE,
                "an Apple engineer: \"we currently only support running on the Neural Engine for the input's default "
                'shape. Other shapes will be run on either GPU or CPU"',
            ),
            Source(
                "https://apple.github.io/coremltools/docs-guides/source/flexible-inputs.html",
                APPLE,
                '"Use EnumeratedShapes for best performance"',
            ),
        ),
        "convert with ct.EnumeratedShapes (up to 128 shapes) or one function per shape",
        range_shape,
        severity_override="warning",  # the default shape still runs on the Neural Engine
        on_program=True,
        says="at any other than its default shape, Core ML runs the model on the CPU/GPU",
    ),
    PlacementRule(
        "ane-last-axis-padding",
        "a model input, output or state whose last axis holds fewer than 64 bytes (32 fp16 elements)",
        COST,
        (
            Source(
                NE_RULES,
                APPLE,
                '"A singleton last axis (dimension = 1) gets padded to 64 bytes, resulting in 32x memory cost at fp16"',
            ),
        ),
        "move a larger axis last (a transpose), or make the last axis at least 32 wide",
        last_axis_padding,
        on_program=True,
        says="the Neural Engine pads it to 64 bytes",
    ),
    PlacementRule(
        "ane-model-size",
        "weights over 1 GiB in one model",
        COST,
        (
            Source(
                "xhighhongo41/eeANE release 1.6.1",
                MEASURED,
                '"From macOS 27 on, the limit is 1 GiB … Every operation of the model simply runs on the CPU"',
            ),
        ),
        "split the model into chunks of ≤ 1 GiB of weights (one function or model each)",
        model_size,
        severity_override="warning",  # one measurement, on one macOS release
        on_program=True,
        says="from macOS 27 Core ML is reported to run every op of such a model on the CPU",
        chips="M2 measured (macOS 27)",
    ),
    PlacementRule(
        "ane-int4-blockwise",
        "weights compressed to 4-bit blocks (constexpr_blockwise_shift_scale of int4 or uint4 data)",
        COST,
        (
            Source(
                "apple/coreai-models#205",
                CORE_AI,
                "Core AI, macOS 27: a linear blockwise-INT4 static LLM compiled with --preferred-compute "
                "neural-engine fails ANE compilation internally and is written GPU-only (0 ANE regions)",
            ),
        ),
        "palettize (4-bit lookup tables) or quantize to int8 per channel for the Neural Engine",
        int4_blockwise,
        severity_override="warning",  # Core AI evidence: a warning at most
        on_program=True,
        says="Core AI compiles such a model for the GPU only (not measured through Core ML)",
        chips="M-series measured (Core AI)",
    ),
)
