"""Models whose Core ML compute plans are published, rebuilt from their public descriptions.

Each builder makes the MIL program a project describes (structure, widths, layout, deployment
target, precision) with seeded random weights: placement depends on the graph, not the weights.
None copies the authors' code; each says what it follows. :data:`CASES` pairs each model with the
plan its source publishes (:class:`Published`), the truth table ``tests/test_published_plans.py``
holds lint's prediction to and ``docs/neural-engine.md`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types

from ...lint.placement import OpPlace, Placement

FP16, FP32, INT32 = types.fp16, types.fp32, types.int32
ANE, CPU, GPU = "ane", "cpu", "gpu"


def _weights(seed: int) -> Callable[..., np.ndarray]:
    rng = np.random.default_rng(seed)
    return lambda *shape: np.asarray(rng.standard_normal(shape) * 0.02, dtype=np.float16)


# -- LuuOW/meridian-mcp mlcore/ane_encoder: an encoder in the Neural Engine idiom ----------------------


def _channel_norm(x):
    """Layer norm over axis 1 of (B, C, 1, S) as mean/var/rsqrt; the affine is ones and zeros, which
    coremltools removes (7 ops)."""
    mean = mb.reduce_mean(x=x, axes=[1], keep_dims=True)
    centred = mb.sub(x=x, y=mean)
    var = mb.reduce_mean(x=mb.square(x=centred), axes=[1], keep_dims=True)
    return mb.mul(x=centred, y=mb.rsqrt(x=mb.add(x=var, y=np.float16(1e-5))))


def _conv1x1(x, w, width_in: int, width_out: int):
    return mb.conv(x=x, weight=w(width_out, width_in, 1, 1), bias=w(width_out))


def _attention(x, w, width: int, heads: int, seq: int):
    """Q/K/V/out as 1x1 convs; scores as a broadcast multiply and a sum over the head axis (16 ops)."""
    head = width // heads
    q, k, v = (mb.reshape(x=_conv1x1(x, w, width, width), shape=[heads, head, 1, seq]) for _ in range(3))
    q_rows = mb.transpose(x=q, perm=[0, 1, 3, 2])  # (H, D, S, 1)
    scores = mb.reduce_sum(x=mb.mul(x=q_rows, y=k), axes=[1], keep_dims=True)  # (H, 1, S, S)
    weights = mb.softmax(x=mb.mul(x=scores, y=np.float16(1 / np.sqrt(head))), axis=-1)
    mixed = mb.reduce_sum(x=mb.mul(x=weights, y=v), axes=[-1], keep_dims=True)  # (H, D, S, 1)
    merged = mb.reshape(x=mb.transpose(x=mixed, perm=[0, 1, 3, 2]), shape=[1, width, 1, seq])
    return _conv1x1(merged, w, width, width)


def meridian_encoder(layers: int = 6, width: int = 384, heads: int = 6, seq: int = 64) -> Program:
    """The encoder of LuuOW/meridian-mcp ``mlcore/ane_encoder`` (README, ``ane_modules.py``): pre-norm
    blocks over (1, C, 1, S), 1x1 convs, channel layer norm, tanh GELU, FFN x4; fp16 input, iOS18, at
    its default length 64 (the source's input is ``RangeDim(32..256, default=64)``; Core ML plans the
    default shape). 35 ops a layer and 7 for the last norm: 217 for 6 x 384, 77 for 2 x 128."""
    w = _weights(0)

    @mb.program(input_specs=[mb.TensorSpec((1, width, 1, seq), dtype=FP16)], opset_version=ct.target.iOS18)
    def prog(x):
        for _ in range(layers):
            x = mb.add(x=x, y=_attention(_channel_norm(x), w, width, heads, seq))
            hidden = mb.gelu(x=_conv1x1(_channel_norm(x), w, width, 4 * width), mode="TANH_APPROXIMATION")
            x = mb.add(x=x, y=_conv1x1(hidden, w, 4 * width, width))
        return _channel_norm(x)

    return prog


# -- vx-lang/Vx#435, #436, #437: one matmul, one fused attention ----------------------------------------


def vx_matmul(n: int, fp16: bool = True) -> Program:
    """``c = a @ b`` of two n x n inputs as Vx builds it: fp32 inputs and output; at fp16 precision the
    inputs are cast to fp16 and the product back (cast, cast, matmul, cast), at fp32 one matmul."""

    @mb.program(input_specs=[mb.TensorSpec((n, n), dtype=FP32)] * 2, opset_version=ct.target.iOS17)
    def prog(a, b):
        if not fp16:
            return mb.matmul(x=a, y=b, name="matmul")
        product = mb.matmul(x=mb.cast(x=a, dtype="fp16"), y=mb.cast(x=b, dtype="fp16"), name="matmul")
        return mb.cast(x=product, dtype="fp32")

    return prog


def vx_attention(heads: int, seq: int, head_dim: int, fp16: bool = True) -> Program:
    """``mb.scaled_dot_product_attention`` of 1 x heads x seq x head_dim query, key and value, fp32 inputs
    cast to fp16 at fp16 precision (vx-lang/Vx#437's sweep)."""
    shape = (1, heads, seq, head_dim)

    @mb.program(input_specs=[mb.TensorSpec(shape, dtype=FP32)] * 3, opset_version=ct.target.iOS18)
    def prog(q, k, v):
        if not fp16:
            return mb.scaled_dot_product_attention(query=q, key=k, value=v, name="attention")
        q, k, v = (mb.cast(x=t, dtype="fp16") for t in (q, k, v))
        return mb.cast(x=mb.scaled_dot_product_attention(query=q, key=k, value=v, name="attention"), dtype="fp32")

    return prog


# -- roboflow/rf-detr#1495: the two-stage proposal selection of a DETR head ------------------------------


def detr_head(tokens: int = 576, width: int = 256, queries: int = 300, classes: int = 91) -> Program:
    """RF-DETR's two-stage selection as its PR describes it, fp16, iOS17: encoder tokens scored by a class
    head, the best ``queries`` picked by ``topk`` over the per-token maximum, and the proposals' boxes and
    features gathered by those indices (``expand_dims``/``tile``/``gather_along_axis``, twice); then a
    decoder-style FFN and the box and class heads on the picked queries. Nano reads 384 x 384 pixels:
    24 x 24 = 576 tokens of 256."""
    w = _weights(1)

    @mb.program(input_specs=[mb.TensorSpec((1, tokens, width), dtype=FP16)], opset_version=ct.target.iOS17)
    def prog(memory):
        memory = mb.layer_norm(x=mb.linear(x=memory, weight=w(width, width), bias=w(width)), axes=[-1])
        scores = mb.reduce_max(x=mb.linear(x=memory, weight=w(classes, width), bias=w(classes)), axes=[-1])
        picked = mb.topk(x=scores, k=queries, axis=-1, name="topk")[1]  # (1, queries) int32
        boxes = mb.linear(x=mb.relu(x=mb.linear(x=memory, weight=w(width, width), bias=w(width))), weight=w(4, width))

        def gather(source, depth, name):
            index = mb.tile(x=mb.expand_dims(x=picked, axes=[-1]), reps=[1, 1, depth])
            return mb.gather_along_axis(x=source, indices=index, axis=1, name=name)

        reference = mb.sigmoid(x=gather(boxes, 4, "gather_boxes"))
        query = gather(memory, width, "gather_memory")
        hidden = mb.linear(x=mb.relu(x=mb.linear(x=query, weight=w(2048, width))), weight=w(width, 2048))
        query = mb.layer_norm(x=mb.add(x=query, y=hidden), axes=[-1])
        delta = mb.linear(x=mb.relu(x=mb.linear(x=query, weight=w(width, width))), weight=w(4, width))
        logits = mb.linear(x=query, weight=w(classes, width), bias=w(classes))
        return mb.sigmoid(x=mb.add(x=reference, y=delta)), logits

    return prog


# -- FluidInference/FluidAudio: an RNN-T prediction net and joint in one graph ---------------------------


def rnnt_decoder_joint(vocab: int = 1025, hidden: int = 640, encoder: int = 1024) -> Program:
    """The fused ``decoder_joint`` of FluidAudio's Nemotron streaming RNN-T, one step, fp16, iOS17, as
    coremltools converts a torch prediction net and joint: fp32 inputs and outputs cast at the edges; the
    token embedded by ``gather``; two LSTM layers whose h/c inputs are split per layer and squeezed,
    and whose final states are stacked back; the joint: the encoder frame and the prediction projected by
    ``linear`` s, added, ``relu``, and the output ``linear``."""
    w = _weights(2)
    specs = [
        mb.TensorSpec((1, 1), dtype=INT32),
        mb.TensorSpec((2, 1, hidden), dtype=FP32),
        mb.TensorSpec((2, 1, hidden), dtype=FP32),
        mb.TensorSpec((1, encoder), dtype=FP32),
    ]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
    def prog(targets, h_in, c_in, frame):
        embedded = mb.gather(x=w(vocab, hidden), indices=targets, axis=0)  # (1, 1, hidden)
        hs = mb.split(x=mb.cast(x=h_in, dtype="fp16", name="h_in_fp16"), num_splits=2, axis=0)
        cs = mb.split(x=mb.cast(x=c_in, dtype="fp16", name="c_in_fp16"), num_splits=2, axis=0)
        x, h_out, c_out = embedded, [], []
        for layer in range(2):
            h0, c0 = (mb.squeeze(x=t[layer], axes=[0]) for t in (hs, cs))
            x, h, c = mb.lstm(
                x=x,
                initial_h=h0,
                initial_c=c0,
                weight_ih=w(4 * hidden, hidden),
                weight_hh=w(4 * hidden, hidden),
                bias=w(4 * hidden),
                output_sequence=True,
            )
            h_out.append(h)
            c_out.append(c)
        prediction = mb.squeeze(x=x, axes=[0])  # (1, hidden)
        joint = mb.add(
            x=mb.linear(x=mb.cast(x=frame, dtype="fp16"), weight=w(hidden, encoder), bias=w(hidden)),
            y=mb.linear(x=prediction, weight=w(hidden, hidden), bias=w(hidden)),
        )
        logits = mb.linear(x=mb.relu(x=joint), weight=w(vocab, hidden), bias=w(vocab))
        states = [mb.cast(x=mb.stack(values=t, axis=0), dtype="fp32", name=n) for t, n in ((h_out, "h"), (c_out, "c"))]
        return mb.cast(x=logits, dtype="fp32"), *states

    return prog


def rnnt_joint(vocab: int, hidden: int = 640, encoder: int = 1024) -> Program:
    """An RNN-T joint alone, one step, fp16, iOS17: the encoder frame and the prediction (fp32 inputs,
    cast) projected by ``linear`` s, added, ``relu``, the output ``linear``, the logits cast back."""
    w = _weights(5)
    specs = [mb.TensorSpec((1, encoder), dtype=FP32), mb.TensorSpec((1, hidden), dtype=FP32)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
    def prog(frame, prediction):
        joint = mb.add(
            x=mb.linear(x=mb.cast(x=frame, dtype="fp16"), weight=w(hidden, encoder), bias=w(hidden)),
            y=mb.linear(x=mb.cast(x=prediction, dtype="fp16"), weight=w(hidden, hidden), bias=w(hidden)),
        )
        return mb.cast(x=mb.linear(x=mb.relu(x=joint), weight=w(vocab, hidden), bias=w(vocab)), dtype="fp32")

    return prog


# -- FluidInference/mobius#77: a stateful decode step (Qwen3-0.6B) ---------------------------------------


def stateful_decoder(layers: int = 2, hidden: int = 1024, heads: int = 16, kv_heads: int = 8, context: int = 256):
    """A Qwen3-style decode step as coremltools' stateful-model guide converts it, fp16, iOS18: K and V
    caches in states ``[layers, 1, kv_heads, context, head_dim]``, this step's keys and values written at
    the position read from an input (``k_cache[:, :, past:end, :] = k``: ``read_state → slice_update →
    coreml_update_state``), attention over the cache with grouped-query heads, a gated MLP. Qwen3-0.6B:
    1024 wide, 16 heads, 8 key-value heads of 128, 28 layers (fewer here: placement is per op type)."""
    w = _weights(3)
    head = 128
    cache = (layers, 1, kv_heads, context, head)
    specs = [
        mb.TensorSpec((1, 1, hidden), dtype=FP16),
        mb.TensorSpec((1,), dtype=INT32),
        mb.StateTensorSpec(cache, dtype=FP16),
        mb.StateTensorSpec(cache, dtype=FP16),
    ]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(x, position, k_cache, v_cache):
        zero = np.zeros(1, np.int32)
        for layer in range(layers):
            normed = mb.mul(x=x, y=mb.rsqrt(x=mb.reduce_mean(x=mb.square(x=x), axes=[-1], keep_dims=True)))
            q = mb.transpose(
                x=mb.reshape(x=mb.linear(x=normed, weight=w(heads * head, hidden)), shape=[1, 1, heads, head]),
                perm=[0, 2, 1, 3],
            )
            written = []
            for kind, cache_state in (("k", k_cache), ("v", v_cache)):
                new = mb.reshape(x=mb.linear(x=normed, weight=w(kv_heads * head, hidden)), shape=[1, 1, kv_heads, head])
                new = mb.expand_dims(x=mb.transpose(x=new, perm=[0, 2, 1, 3]), axes=[0])
                begin = mb.concat(values=[np.array([layer, 0, 0], np.int32), position, zero], axis=0)
                end = mb.concat(
                    values=[
                        np.array([layer + 1, 1, kv_heads], np.int32),
                        mb.add(x=position, y=np.int32(1)),
                        np.array([head], np.int32),
                    ],
                    axis=0,
                )
                updated = mb.slice_update(
                    x=mb.read_state(input=cache_state), update=new, begin=begin, end=end, name=f"{kind}_update_{layer}"
                )
                mb.coreml_update_state(state=cache_state, value=updated)
                past = mb.slice_by_index(
                    x=updated, begin=[layer, 0, 0, 0, 0], end=[layer + 1, 1, kv_heads, context, head]
                )
                past = mb.squeeze(x=past, axes=[0])  # (1, kv_heads, context, head)
                written.append(mb.tile(x=past, reps=[1, heads // kv_heads, 1, 1]))
            attended = mb.scaled_dot_product_attention(query=q, key=written[0], value=written[1])
            merged = mb.reshape(x=mb.transpose(x=attended, perm=[0, 2, 1, 3]), shape=[1, 1, heads * head])
            x = mb.add(x=x, y=mb.linear(x=merged, weight=w(hidden, heads * head)))
            normed = mb.mul(x=x, y=mb.rsqrt(x=mb.reduce_mean(x=mb.square(x=x), axes=[-1], keep_dims=True)))
            gate = mb.silu(x=mb.linear(x=normed, weight=w(3072, hidden)))
            up = mb.linear(x=normed, weight=w(3072, hidden))
            x = mb.add(x=x, y=mb.linear(x=mb.mul(x=gate, y=up), weight=w(hidden, 3072)))
        return x

    return prog


# -- FluidInference/FluidAudio PocketTTS: a step whose KV cache is a rank-5 scatter ----------------------


def rank5_scatter_step(width: int = 512, heads: int = 8, context: int = 256) -> Program:
    """A transformer decode step of PocketTTS' flowlm as FluidAudio's profiler describes it, fp16, iOS18:
    a rank-5 KV cache ``[2, 1, context, heads, head_dim]`` passed in and out, this step's key and value
    written into it by ``scatter`` at the input position, attention over it, an MLP."""
    w = _weights(4)
    head = width // heads
    specs = [
        mb.TensorSpec((1, 1, width), dtype=FP16),
        mb.TensorSpec((2, 1, context, heads, head), dtype=FP16),
        mb.TensorSpec((1,), dtype=INT32),
    ]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(x, cache, position):
        q = mb.transpose(
            x=mb.reshape(x=mb.linear(x=x, weight=w(width, width)), shape=[1, 1, heads, head]), perm=[0, 2, 1, 3]
        )
        kv = mb.reshape(x=mb.linear(x=x, weight=w(2 * width, width)), shape=[2, 1, 1, heads, head])
        index = mb.tile(x=mb.reshape(x=position, shape=[1, 1, 1, 1, 1]), reps=[2, 1, 1, heads, head])
        cache = mb.scatter_along_axis(data=cache, indices=index, updates=kv, axis=2, name="cache_write")
        k, v = (
            mb.transpose(x=mb.squeeze(x=part, axes=[0]), perm=[0, 2, 1, 3])
            for part in mb.split(x=cache, num_splits=2, axis=0)
        )
        attended = mb.scaled_dot_product_attention(query=q, key=k, value=v)
        x = mb.add(
            x=x,
            y=mb.linear(
                x=mb.reshape(x=mb.transpose(x=attended, perm=[0, 2, 1, 3]), shape=[1, 1, width]), weight=w(width, width)
            ),
        )
        x = mb.add(
            x=x, y=mb.linear(x=mb.gelu(x=mb.linear(x=x, weight=w(4 * width, width))), weight=w(width, 4 * width))
        )
        return x, cache

    return prog


# -- apple/coremltools#2631: a stateful convolutional RNN ------------------------------------------------


def stateful_conv_rnn(width: int, channels: int = 16, height: int = 256) -> Program:
    """The stateful recurrent conv net of apple/coremltools#2631, fp16, iOS18: a hidden state
    ``[1, channels, height, width]`` in an iOS18 state, read and joined to the 3-channel input, a 3x3
    conv to the next hidden state (tanh), written back, and a 3x3 conv to 3 output channels. The issue
    names the width (270 fails, 256 works); channels and height are this rebuild's."""
    w = _weights(6)
    specs = [
        mb.TensorSpec((1, 3, height, width), dtype=FP16),
        mb.StateTensorSpec((1, channels, height, width), dtype=FP16),
    ]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(x, hidden):
        joined = mb.concat(values=[x, mb.read_state(input=hidden)], axis=1)
        new = mb.tanh(x=mb.conv(x=joined, weight=w(channels, channels + 3, 3, 3), pad_type="same"))
        mb.coreml_update_state(state=hidden, value=new)
        return mb.conv(x=new, weight=w(3, channels, 3, 3), pad_type="same")

    return prog


# -- The published plans ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """A plan a source publishes for a model: per op type, the unit Core ML prefers (``ops``: every op of
    that type; op types the source does not name are not compared), or one unit for the whole graph
    (``whole``), and the counts it gives (``counts``: unit → ops)."""

    case: str
    source: str
    url: str
    chip_os: str
    build: Callable[[], Program]
    counts: dict[str, int]
    ops: dict[str, str] = field(default_factory=dict)  # op name or op type -> unit
    whole: str | None = None
    by_type_count: bool = False  # the source gives op types and counts, not each op
    note: str = ""


_MERIDIAN = "https://github.com/LuuOW/meridian-mcp/tree/main/mlcore/ane_encoder"
_ENCODER_TYPES = tuple("add conv gelu mul reduce_mean reduce_sum reshape rsqrt softmax square sub transpose".split())
_PROFILER = "https://github.com/FluidInference/FluidAudio/blob/main/Documentation/ANE_Profiler.md"


_COREMLTOOLS_2631 = "https://github.com/apple/coremltools/issues/2631"
_XCODE_M4 = "M4, macOS 15.2, Xcode 16.3, coremltools 9.0"


def _whole(
    case: str, source: str, url: str, chip_os: str, build: Callable[[], Program], unit: str, ops: int, note: str = ""
) -> Published:
    """A case whose source gives one unit for every op of the graph (``ops`` of them)."""
    counts = {ANE: 0, CPU: 0, GPU: 0} | {unit: ops}
    return Published(case, source, url, chip_os, build, counts, whole=unit, note=note)


def _vx_matmul(n: int, unit: str, fp16: bool = True, issue: int = 435, note: str = "") -> Published:
    """A vx-lang/Vx matmul case: every op of the graph on ``unit`` (fp16: the casts and the matmul)."""
    ops = 4 if fp16 else 1
    return Published(
        f"{'fp16' if fp16 else 'fp32'} matmul {n} x {n}",
        f"vx-lang/Vx#{issue}",
        f"https://github.com/vx-lang/Vx/issues/{issue}",
        "M4, macOS",
        lambda: vx_matmul(n, fp16),
        {ANE: ops if unit == ANE else 0, CPU: ops if unit == CPU else 0, GPU: 0},
        whole=unit,
        note=note,
    )


def _vx_attention(heads: int, seq: int, head_dim: int, unit: str, fp16: bool = True, note: str = "") -> Published:
    """A vx-lang/Vx#437 attention case: the plan names the attention op's unit only."""
    return Published(
        f"{'fp16' if fp16 else 'fp32'} attention 1 x {heads} x {seq} x {head_dim}",
        "vx-lang/Vx#437",
        "https://github.com/vx-lang/Vx/issues/437",
        "M4, macOS",
        lambda: vx_attention(heads, seq, head_dim, fp16),
        {ANE: int(unit == ANE), CPU: int(unit == CPU), GPU: 0},
        ops={"scaled_dot_product_attention": unit},
        note=note,
    )


CASES: tuple[Published, ...] = (
    Published(
        "ANE-idiom encoder, 6 x 384",
        "LuuOW/meridian-mcp `build/proof/runtime_plan.json`",
        _MERIDIAN,
        "Apple Silicon Mac (chip not stated), coremltools 9.0",
        meridian_encoder,
        {ANE: 217, CPU: 0, GPU: 0},
        ops={t: ANE for t in _ENCODER_TYPES},
    ),
    Published(
        "ANE-idiom encoder, 2 x 128 (tiny preset)",
        "LuuOW/meridian-mcp README: all 77 ops ANE-supported, CPU-preferred",
        _MERIDIAN,
        "Apple Silicon Mac (chip not stated), coremltools 9.0",
        lambda: meridian_encoder(layers=2, width=128, heads=4),
        {ANE: 0, CPU: 77, GPU: 0},
        whole=CPU,
        note="a cost decision: the graph is too small",
    ),
    _vx_matmul(512, ANE),
    _vx_matmul(384, CPU, note="a cost decision: the ANE supports it"),
    _vx_matmul(4, CPU, issue=436, note="a cost decision: every op lists the ANE as supported"),
    _vx_matmul(512, CPU, fp16=False, note="no fp32 matmul is ANE-preferred at any size tried"),
    _vx_attention(16, 2048, 64, ANE),
    _vx_attention(32, 1024, 128, ANE),
    _vx_attention(16, 1024, 64, CPU, note="a cost decision: under ~2M query elements"),
    _vx_attention(32, 1024, 128, CPU, fp16=False),
    Published(
        "DETR detector head (two-stage topk)",
        "roboflow/rf-detr#1495 (RFDETRNano: 592 ANE, 7 CPU)",
        "https://github.com/roboflow/rf-detr/pull/1495",
        "M3 Pro, macOS 27.0, coremltools 9.0",
        detr_head,
        {ANE: 592, CPU: 7, GPU: 0},
        ops={"topk": CPU, "expand_dims": CPU, "tile": CPU, "gather_along_axis": CPU}
        | {t: ANE for t in ("linear", "layer_norm", "relu", "add", "sigmoid", "reduce_max")},
        by_type_count=True,
        note="the head only: the CPU ops compared one by one, the ANE ops by type",
    ),
    Published(
        "RNN-T decoder_joint (Nemotron)",
        "FluidInference/FluidAudio `Documentation/ANE_Profiler.md` (28 ops, 54% ANE)",
        _PROFILER,
        "M5, macOS 26",
        rnnt_decoder_joint,
        {ANE: 15, CPU: 13, GPU: 0},
        ops={t: CPU for t in ("lstm", "gather", "split", "stack", "squeeze", "h_in_fp16", "c_in_fp16", "h", "c")}
        | {t: ANE for t in ("linear", "relu", "add")},
        by_type_count=True,
        note="the lstms and their glue (their state casts) on the CPU, the joint on the ANE, by op type; "
        "the source's 28 ops are 5 more than this rebuild's",
    ),
    _whole(
        "RNN-T joint, multilingual (19 MB)",
        "FluidInference/FluidAudio `Documentation/ANE_Profiler.md` (12 ops, 100% ANE)",
        _PROFILER,
        "M5, macOS 26",
        lambda: rnnt_joint(vocab=14000),
        ANE,
        12,
    ),
    _whole(
        "RNN-T joint, English (4 MB)",
        "FluidInference/FluidAudio `Documentation/ANE_Profiler.md` (12 ops, 100% CPU)",
        _PROFILER,
        "M5, macOS 26",
        lambda: rnnt_joint(vocab=1025),
        CPU,
        12,
        note="lint's size bound (1 MiB, from the M4 and Meridian plans) is too low for this M5 plan: "
        "FluidAudio finds small models under ~50 MB often CPU by cost, with exceptions (a 7 MB decoder on the ANE)",
    ),
    _whole(
        "stateful conv RNN, state 256 wide",
        "apple/coremltools#2631: runs on the ANE",
        _COREMLTOOLS_2631,
        _XCODE_M4,
        lambda: stateful_conv_rnn(256),
        ANE,
        6,
        note="Xcode's performance report, whole-graph; counts are this rebuild's",
    ),
    _whole(
        "stateful conv RNN, state 270 wide",
        "apple/coremltools#2631: fails on the ANE, runs on CPU and GPU",
        _COREMLTOOLS_2631,
        _XCODE_M4,
        lambda: stateful_conv_rnn(270),
        CPU,
        6,
        note="a model-level rejection; Xcode's performance report, whole-graph (CPU and GPU both run it); "
        "counts are this rebuild's",
    ),
    Published(
        "stateful decode, KV cache written at the position (Qwen3-0.6B)",
        "FluidInference/mobius#77: ANECCompile -14, the whole graph on the GPU",
        "https://github.com/FluidInference/mobius/pull/77",
        "M5 Pro, macOS 26, coremltools 9.0",
        stateful_decoder,
        {ANE: 0, CPU: 0, GPU: 1},
        whole=GPU,
        note="a model-level rejection; counts are whole-graph",
    ),
    Published(
        "TTS decode step with a rank-5 KV-cache scatter (PocketTTS flowlm)",
        "FluidInference/FluidAudio `Documentation/ANE_Profiler.md` (556 ops, 100% GPU)",
        _PROFILER,
        "M-series, macOS 26",
        rank5_scatter_step,
        {ANE: 0, CPU: 0, GPU: 556},
        whole=GPU,
        note="a model-level rejection; counts are whole-graph",
    ),
)


@dataclass(frozen=True)
class Compared:
    """lint's prediction for a case, against what its source publishes."""

    case: Published
    placement: Placement
    compared: int  # ops with published truth
    agreeing: int
    differing: tuple[OpPlace, ...] = ()  # the ops lint places on the other side

    @property
    def counts(self) -> dict[str, int]:
        """lint's counts: on the ANE, off it (CPU/GPU)."""
        return {
            ANE: self.placement.ops - self.placement.off_ane - self.placement.unknown,
            "off": self.placement.off_ane,
        }

    @property
    def agrees(self) -> bool:
        return self.agreeing == self.compared and self.compared > 0


def truth_of(case: Published, name: str, op_type: str) -> str | None:
    """The unit the source publishes for an op, ``None`` when it says nothing of it."""
    return case.whole or case.ops.get(name) or case.ops.get(op_type)


def compare(case: Published, placement: Placement | None = None) -> Compared:
    """Lint ``case``'s rebuilt model (or take ``placement``, lint's prediction for another model of the
    same form) and hold each op with published truth to it (the CPU and the GPU are one side for lint:
    off the Neural Engine)."""
    from ...lint import lint_report

    if placement is None:
        _, placement = lint_report(case.build())
    compared, differing = 0, []
    for place in placement.places:
        truth = truth_of(case, place.name, place.op_type)
        if truth is None:
            continue
        compared += 1
        if place.side != ("ane" if truth == ANE else "off"):
            differing.append(place)
    return Compared(case, placement, compared, compared - len(differing), tuple(differing))


def truth_table(results: list[Compared]) -> str:
    """docs/neural-engine.md's table of the published plans against lint (a test keeps it current)."""
    rows = [
        "| case | source | chip, OS | published ANE / CPU / GPU | lint ANE / off (CPU, GPU) | ops compared | agree? |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        case, counts, placement = result.case, result.counts, result.placement
        published = " / ".join(str(case.counts[unit]) for unit in (ANE, CPU, GPU))
        lint_counts = f"{counts[ANE]} / {counts['off']}"
        if placement.rejected_by:
            lint_counts += f" (rejected: `{placement.rejected_by[0]}`)"
        elif placement.by_cost:
            lint_counts += f" ({placement.by_cost} by cost)"
        verdict = "yes" if result.agrees else f"no: {result.compared - result.agreeing} of {result.compared} ops differ"
        note = f"; {case.note}" if case.note else ""
        rows.append(
            f"| {case.case} | [{case.source}]({case.url}) | {case.chip_os} | {published} | {lint_counts} | "
            f"{result.agreeing} of {result.compared}{' (by op type)' if case.by_type_count else ''} | {verdict}{note} |"
        )
    return "\n".join(rows)
