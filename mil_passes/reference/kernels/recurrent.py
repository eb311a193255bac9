"""Recurrent kernels: ``rnn``, ``lstm`` and ``gru`` (iOS15 forms; iOS17 adds fp16, iOS18's gru adds
``reset_after`` and ``input_bias``).

``x`` is ``<s, b, I>``; states are ``<b, D*H>``. Steps compute in fp32 (fp16 is widened), as Core ML's
CPU does. Each direction's sequence output is kept in processing order: a ``reverse`` layer's
``output[k]`` is its ``k``-th step, which read ``x[s-1-k]`` (what coremltools' op tests expect, and
what torch gives on a flipped input). A ``bidirectional`` lstm is ``[forward | backward]`` along the
last axis with each step's backward output at its input's position, as torch lays out its
bidirectional outputs; without ``output_sequence`` it is the final state of each direction.

(Before 0.2.0 ``core.py`` had rnn/lstm kernels that wrote reverse steps at their input's position
and had no ``clip``.)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import rounded
from ..errors import UnsupportedOpError
from . import kernel

Activation = Callable[[np.ndarray], np.ndarray]

# Activations at MIL's default parameters: scaled_tanh is tanh (alpha = beta = 1), hard_sigmoid
# (also spelled sigmoid_hard) is clip(0.2 x + 0.5, 0, 1).
# sigmoid and tanh are rounded once from float64 to the step's dtype (rounded.py): numpy's fp32
# exp and tanh differ by CPU.


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return rounded.rounded(lambda fn, x: 1.0 / (1.0 + fn.exp(-x)), v.dtype, v)


def _tanh(v: np.ndarray) -> np.ndarray:
    return rounded.unary("tanh", v)


ACTIVATIONS: dict[str, Activation] = {
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "scaled_tanh": _tanh,
    "relu": lambda v: np.maximum(v, 0),
    "linear": lambda v: v,
    "hard_sigmoid": lambda v: np.clip(0.2 * v + 0.5, 0.0, 1.0),
    "sigmoid_hard": lambda v: np.clip(0.2 * v + 0.5, 0.0, 1.0),
}


def _wide(value) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.float32) if value.dtype == np.float16 else value


def _initial_state(op, args: dict, name: str, batch: int) -> np.ndarray:
    """The state ``name`` as ``<b, D*H>``. The spec asks for ``b`` rows, but coremltools' conversion of
    torch's ``pack_padded_sequence`` sizes the zero state by the first sequence length instead, a
    shape Core ML runs. Where every row is the same (a fill), each sequence starts from that row
    whichever rows Core ML reads; where the rows differ, the interpreter declines."""
    state = _wide(args[name])
    rows = state.shape[0] if state.ndim == 2 else None
    if rows == batch:
        return state
    if rows and np.all(state == state[:1]):
        return np.repeat(state[:1], batch, axis=0)
    detail = f"input '{name}' has shape {tuple(state.shape)} for a batch of {batch}" + (
        ", and its rows differ: which rows Core ML reads is not specified" if rows else ""
    )
    raise UnsupportedOpError(op.op_type, op.name, detail)


def _optional(args: dict, name: str):
    return 0 if args.get(name) is None else _wide(args[name])


def _activation(op, args: dict, name: str, default: str) -> Activation:
    chosen = str(args.get(name) or default).lower()
    if chosen not in ACTIVATIONS:
        raise UnsupportedOpError(op.op_type, op.name, f"{name} '{chosen}' is not an activation MIL defines")
    return ACTIVATIONS[chosen]


def _direction(op, args: dict, allowed: tuple[str, ...]) -> str:
    direction = str(args.get("direction") or "forward")
    if direction not in allowed:
        raise ValueError(f"{op.op_type} '{op.name}': input 'direction' is '{direction}', expected one of {allowed}")
    return direction


def _sequence(x: np.ndarray, reverse: bool) -> np.ndarray:
    """The steps' inputs in processing order."""
    return x[::-1] if reverse else x


def _outputs(args: dict, steps: np.ndarray, final: np.ndarray) -> np.ndarray:
    return steps if bool(args.get("output_sequence")) else final[None]


@kernel("rnn")
def rnn(op, args: dict):
    """``h_t = activation(W_ih x_t + W_hh h_{t-1} + bias)``."""
    reverse = _direction(op, args, ("forward", "reverse")) == "reverse"
    weight_ih, weight_hh, bias = _wide(args["weight_ih"]), _wide(args["weight_hh"]), _optional(args, "bias")
    act = _activation(op, args, "activation", "tanh")
    x = _wide(args["x"])
    h = _initial_state(op, args, "initial_h", x.shape[1])
    steps = []
    for x_t in _sequence(x, reverse):
        h = act(x_t @ weight_ih.T + h @ weight_hh.T + bias)
        steps.append(h)
    return _outputs(args, _stack(steps, h), h), h


def _stack(steps: list[np.ndarray], h: np.ndarray) -> np.ndarray:
    return np.stack(steps) if steps else np.zeros((0,) + h.shape, h.dtype)


def _lstm_layer(op, args: dict, x, h, c, suffix: str, reverse: bool):
    """One direction of an lstm: its steps' hidden states in processing order, final h and c."""
    weight_ih, weight_hh = _wide(args["weight_ih" + suffix]), _wide(args["weight_hh" + suffix])
    bias = _optional(args, "bias" + suffix)
    peephole = args.get("peephole" + suffix)
    p_i, p_f, p_o = (0, 0, 0) if peephole is None else np.split(_wide(peephole), 3)
    gate = _activation(op, args, "recurrent_activation", "sigmoid")
    cell_act = _activation(op, args, "cell_activation", "tanh")
    act = _activation(op, args, "activation", "tanh")
    clip = None if args.get("clip") is None else float(np.asarray(args["clip"]))
    steps = []
    for x_t in _sequence(x, reverse):
        i, f, o, z = np.split(x_t @ weight_ih.T + h @ weight_hh.T + bias, 4, axis=-1)
        i, f = gate(i + p_i * c), gate(f + p_f * c)
        c = f * c + i * cell_act(z)
        if clip is not None:  # the cell state, before the output gate's peephole reads it
            c = np.clip(c, -clip, clip)
        h = gate(o + p_o * c) * act(c)
        steps.append(h)
    return _stack(steps, h), h, c


@kernel("lstm")
def lstm(op, args: dict):
    """Gates in MIL's [input, forget, output, cell] order; peepholes [input, forget, output];
    ``clip`` bounds the cell state to ``[-clip, clip]`` after each update."""
    direction = _direction(op, args, ("forward", "reverse", "bidirectional"))
    x = _wide(args["x"])
    h0, c0 = (_initial_state(op, args, name, x.shape[1]) for name in ("initial_h", "initial_c"))
    if direction != "bidirectional":
        steps, h, c = _lstm_layer(op, args, x, h0, c0, "", direction == "reverse")
        return _outputs(args, steps, h), h, c
    hidden = h0.shape[-1] // 2
    f_steps, f_h, f_c = _lstm_layer(op, args, x, h0[:, :hidden], c0[:, :hidden], "", False)
    b_steps, b_h, b_c = _lstm_layer(op, args, x, h0[:, hidden:], c0[:, hidden:], "_back", True)
    steps = np.concatenate([f_steps, b_steps[::-1]], axis=-1)  # backward steps at their input's position
    h, c = np.concatenate([f_h, b_h], axis=-1), np.concatenate([f_c, b_c], axis=-1)
    return _outputs(args, steps, h), h, c


@kernel("gru")
def gru(op, args: dict):
    """Weights and biases in MIL's [reset, output (new), update] order:
    ``r = σ(W_ir x + W_hr h + b_r)``, ``z = σ(W_iz x + W_hz h + b_z)``,
    ``o = act(W_io x + b_io + W_ho (r * h) + b_ho)`` (or ``... + r * (W_ho h + b_ho)`` with iOS18's
    ``reset_after``), ``h = (1 - z) * o + z * h``. ``bias`` is the hidden bias; iOS18's
    ``input_bias`` is added to the input products (before iOS18 ``bias`` is the only bias)."""
    reverse = _direction(op, args, ("forward", "reverse")) == "reverse"
    weight_ih, weight_hh = _wide(args["weight_ih"]), _wide(args["weight_hh"])
    w_ir, w_io, w_iz = np.split(weight_ih, 3)
    w_hr, w_ho, w_hz = np.split(weight_hh, 3)
    b_hr, b_ho, b_hz = np.split(np.broadcast_to(_optional(args, "bias"), (weight_hh.shape[0],)), 3)
    b_ir, b_io, b_iz = np.split(np.broadcast_to(_optional(args, "input_bias"), (weight_ih.shape[0],)), 3)
    reset_after = bool(args.get("reset_after", False))
    gate = _activation(op, args, "recurrent_activation", "sigmoid")
    act = _activation(op, args, "activation", "tanh")
    x = _wide(args["x"])
    h = _initial_state(op, args, "initial_h", x.shape[1])
    steps = []
    for x_t in _sequence(x, reverse):
        r = gate(x_t @ w_ir.T + b_ir + h @ w_hr.T + b_hr)
        z = gate(x_t @ w_iz.T + b_iz + h @ w_hz.T + b_hz)
        hidden = r * (h @ w_ho.T + b_ho) if reset_after else (r * h) @ w_ho.T + b_ho
        o = act(x_t @ w_io.T + b_io + hidden)
        h = (1 - z) * o + z * h
        steps.append(h)
    return _outputs(args, _stack(steps, h), h), h
