"""rnn, lstm and gru kernels against torch: both directions, bidirectional lstm, lstm clip, and the
iOS15 and iOS18 forms of gru."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import run

torch = pytest.importorskip("torch")

STEPS, BATCH, INPUT, HIDDEN = 4, 2, 3, 5


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((STEPS, BATCH, INPUT)).astype(np.float32)


def _h(seed: int, directions: int = 1, hidden: int = HIDDEN) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, directions * hidden)).astype(np.float32)


def _np(tensor) -> np.ndarray:
    return tensor.detach().numpy()


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _torch_in(x: np.ndarray, reverse: bool):
    """What torch reads: the sequence in processing order (a reverse layer reads it flipped)."""
    return torch.from_numpy(np.ascontiguousarray(x[::-1] if reverse else x))


# -- rnn ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
def test_rnn_matches_torch(direction, output_sequence):
    torch.manual_seed(0)
    cell = torch.nn.RNN(INPUT, HIDDEN)
    w_ih, w_hh = _np(cell.weight_ih_l0), _np(cell.weight_hh_l0)
    bias = _np(cell.bias_ih_l0 + cell.bias_hh_l0)
    x, h0 = _x(), _h(1)
    out, h = run(
        lambda x, h0: mb.rnn(
            x=x,
            initial_h=h0,
            weight_ih=w_ih,
            weight_hh=w_hh,
            bias=bias,
            direction=direction,
            output_sequence=output_sequence,
        ),
        {"x": x, "h0": h0},
    )
    want_out, want_h = cell(_torch_in(x, direction == "reverse"), torch.from_numpy(h0)[None])
    _close(out, _np(want_out) if output_sequence else _np(want_h))
    _close(h, _np(want_h)[0])


# -- lstm ---------------------------------------------------------------------------------------


def _ifoz(weight: np.ndarray) -> np.ndarray:
    """torch's [input, forget, cell, output] gates in MIL's [input, forget, output, cell] order."""
    i, f, z, o = np.split(weight, 4)
    return np.concatenate([i, f, o, z])


def _lstm_weights(cell, suffix: str = "") -> dict[str, np.ndarray]:
    get = lambda name: _np(getattr(cell, name + suffix))  # noqa: E731
    return {
        "weight_ih": _ifoz(get("weight_ih_l0")),
        "weight_hh": _ifoz(get("weight_hh_l0")),
        "bias": _ifoz(get("bias_ih_l0") + get("bias_hh_l0")),
    }


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
def test_lstm_matches_torch(direction, output_sequence):
    torch.manual_seed(1)
    cell = torch.nn.LSTM(INPUT, HIDDEN)
    weights = _lstm_weights(cell)
    x, h0, c0 = _x(), _h(2), _h(3)
    out, h, c = run(
        lambda x, h0, c0: mb.lstm(
            x=x, initial_h=h0, initial_c=c0, direction=direction, output_sequence=output_sequence, **weights
        ),
        {"x": x, "h0": h0, "c0": c0},
    )
    want_out, (want_h, want_c) = cell(
        _torch_in(x, direction == "reverse"), (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None])
    )
    _close(out, _np(want_out) if output_sequence else _np(want_h))
    _close(h, _np(want_h)[0])
    _close(c, _np(want_c)[0])


@pytest.mark.parametrize("output_sequence", [True, False])
def test_bidirectional_lstm_matches_torch(output_sequence):
    torch.manual_seed(2)
    cell = torch.nn.LSTM(INPUT, HIDDEN, bidirectional=True)
    forward, backward = _lstm_weights(cell), _lstm_weights(cell, "_reverse")
    back = {f"{name}_back": value for name, value in backward.items()}
    x, h0, c0 = _x(), _h(4, 2), _h(5, 2)
    out, h, c = run(
        lambda x, h0, c0: mb.lstm(
            x=x,
            initial_h=h0,
            initial_c=c0,
            direction="bidirectional",
            output_sequence=output_sequence,
            **forward,
            **back,
        ),
        {"x": x, "h0": h0, "c0": c0},
    )
    as_torch = lambda s: torch.from_numpy(np.stack([s[:, :HIDDEN], s[:, HIDDEN:]]))  # noqa: E731
    want_out, (want_h, want_c) = cell(torch.from_numpy(x), (as_torch(h0), as_torch(c0)))
    final = np.concatenate(list(_np(want_h)), axis=-1)  # [forward | backward] final states
    _close(out, _np(want_out) if output_sequence else final[None])
    _close(h, final)
    _close(c, np.concatenate(list(_np(want_c)), axis=-1))


def test_lstm_clip_bounds_the_cell_state_and_a_loose_clip_changes_nothing():
    torch.manual_seed(3)
    cell = torch.nn.LSTM(INPUT, HIDDEN)
    weights = {name: value * 4 for name, value in _lstm_weights(cell).items()}  # saturating gates
    x, h0, c0 = _x() * 3, _h(6), _h(7) * 3
    feeds = {"x": x, "h0": h0, "c0": c0}

    def build(clip):
        return lambda x, h0, c0: mb.lstm(
            x=x, initial_h=h0, initial_c=c0, output_sequence=True, clip=np.float32(clip), **weights
        )

    free = run(build(1e6), feeds)
    without = run(lambda x, h0, c0: mb.lstm(x=x, initial_h=h0, initial_c=c0, output_sequence=True, **weights), feeds)
    for got, want in zip(free, without):
        np.testing.assert_array_equal(got, want)
    assert np.abs(without[2]).max() > 1.5  # the unclipped cell state leaves [-1.5, 1.5]
    out, h, c = run(build(1.5), feeds)
    assert np.abs(c).max() <= 1.5
    # one step by hand: the clipped cell state is what the output gate and tanh read
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, z = np.split(x[0] @ weights["weight_ih"].T + h0 @ weights["weight_hh"].T + weights["bias"], 4, axis=-1)
    c1 = np.clip(sig(f) * c0 + sig(i) * np.tanh(z), -1.5, 1.5)
    _close(out[0], sig(o) * np.tanh(c1))


# -- gru ----------------------------------------------------------------------------------------


def _rzn(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's [reset, update, new] gates."""
    return tuple(np.split(weight, 3))


def _roz(weight: np.ndarray) -> np.ndarray:
    """torch's gates in MIL's [reset, output (new), update] order."""
    r, z, n = _rzn(weight)
    return np.concatenate([r, n, z])


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
def test_ios18_gru_with_reset_after_matches_torch(direction, output_sequence):
    torch.manual_seed(4)
    cell = torch.nn.GRU(INPUT, HIDDEN)
    x, h0 = _x(), _h(8)
    out, h = run(
        lambda x, h0: mb.gru(
            x=x,
            initial_h=h0,
            weight_ih=_roz(_np(cell.weight_ih_l0)),
            weight_hh=_roz(_np(cell.weight_hh_l0)),
            input_bias=_roz(_np(cell.bias_ih_l0)),
            bias=_roz(_np(cell.bias_hh_l0)),
            reset_after=True,
            direction=direction,
            output_sequence=output_sequence,
        ),
        {"x": x, "h0": h0},
        opset=ct.target.iOS18,
    )
    want_out, want_h = cell(_torch_in(x, direction == "reverse"), torch.from_numpy(h0)[None])
    _close(out, _np(want_out) if output_sequence else _np(want_h))
    _close(h, _np(want_h)[0])


@pytest.mark.parametrize("opset", [ct.target.iOS15, ct.target.iOS17, ct.target.iOS18])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_gru_resetting_before_the_product_matches_torch_where_the_orders_agree(opset, direction):
    """With H = 1 and no hidden bias on the new gate, ``W (r h) == r (W h)``: torch's GRU is then
    the iOS15 form, whose single ``bias`` is the input bias of torch."""
    torch.manual_seed(5)
    cell = torch.nn.GRU(INPUT, 1)
    with torch.no_grad():
        cell.bias_hh_l0[2:] = 0
    x, h0 = _x(), _h(9, hidden=1)
    bias = _roz(_np(cell.bias_ih_l0 + cell.bias_hh_l0))
    out, h = run(
        lambda x, h0: mb.gru(
            x=x,
            initial_h=h0,
            weight_ih=_roz(_np(cell.weight_ih_l0)),
            weight_hh=_roz(_np(cell.weight_hh_l0)),
            bias=bias,
            direction=direction,
            output_sequence=True,
        ),
        {"x": x, "h0": h0},
        opset=opset,
    )
    want_out, want_h = cell(_torch_in(x, direction == "reverse"), torch.from_numpy(h0)[None])
    _close(out, _np(want_out))
    _close(h, _np(want_h)[0])


def test_gru_resets_the_state_before_the_product_unless_reset_after():
    rng = np.random.default_rng(10)
    w_ih = rng.standard_normal((3 * HIDDEN, INPUT)).astype(np.float32)
    w_hh = rng.standard_normal((3 * HIDDEN, HIDDEN)).astype(np.float32)
    x, h0 = _x()[:1], _h(11)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    (x_r, x_o, x_z), (w_r, w_o, w_z) = (np.split(x[0] @ w_ih.T, 3, axis=-1), np.split(w_hh, 3))
    r, z = sig(x_r + h0 @ w_r.T), sig(x_z + h0 @ w_z.T)
    for reset_after, hidden in ((False, (r * h0) @ w_o.T), (True, r * (h0 @ w_o.T))):
        _, h = run(
            lambda x, h0: mb.gru(x=x, initial_h=h0, weight_ih=w_ih, weight_hh=w_hh, reset_after=reset_after),
            {"x": x, "h0": h0},
            opset=ct.target.iOS18,
        )
        _close(h, (1 - z) * np.tanh(x_o + hidden) + z * h0)


@pytest.mark.parametrize("op", ["rnn", "gru"])
def test_an_unknown_activation_or_direction_is_refused_with_the_op_named(op):
    from mil_passes.reference.kernels import KERNELS

    class FakeOp:
        op_type, name = op, f"{op}_0"

    args = {
        "x": _x(),
        "initial_h": _h(0),
        "weight_ih": np.zeros((3 * HIDDEN, INPUT), np.float32),
        "weight_hh": np.zeros((3 * HIDDEN, HIDDEN), np.float32),
        "direction": "sideways",
    }
    with pytest.raises(ValueError, match=f"{op} '{op}_0': input 'direction' is 'sideways'"):
        KERNELS[op](FakeOp, args)
    with pytest.raises(NotImplementedError, match="activation 'swish'"):
        KERNELS[op](FakeOp, {**args, "direction": "forward", "activation": "swish"})


def _recurrent(op: str, x, h0):
    """One ``op`` (rnn, lstm or gru) with random weights and initial state ``h0``; its sequence output first."""
    gates = {"rnn": 1, "lstm": 4, "gru": 3}[op]
    rng = np.random.default_rng(3)
    weights = {
        "weight_ih": rng.standard_normal((gates * HIDDEN, INPUT)).astype(np.float32),
        "weight_hh": rng.standard_normal((gates * HIDDEN, HIDDEN)).astype(np.float32),
    }
    states = {"initial_c": h0} if op == "lstm" else {}
    return getattr(mb, op)(x=x, initial_h=h0, output_sequence=True, **states, **weights)


@pytest.mark.parametrize("op", ["rnn", "lstm", "gru"])
def test_a_state_of_equal_rows_serves_any_batch(op):
    """coremltools' conversion of torch's pack_padded_sequence sizes the zero state by the first
    sequence length (here 10 rows for a batch of 2): every sequence starts from the one row there is."""
    x = _x()
    (want, *_) = run(lambda x, h0: _recurrent(op, x, h0), {"x": x, "h0": np.full((BATCH, HIDDEN), 0.5, np.float32)})
    for rows in (10, 1):
        h0 = np.full((rows, HIDDEN), 0.5, np.float32)
        (got, *_) = run(lambda x, h0: _recurrent(op, x, h0), {"x": x, "h0": h0})
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["rnn", "lstm", "gru"])
def test_a_state_of_other_rows_that_differ_is_declined(op):
    from mil_passes.reference import UnsupportedOpError

    h0 = np.arange(10 * HIDDEN, dtype=np.float32).reshape(10, HIDDEN)
    with pytest.raises(
        UnsupportedOpError, match=r"input 'initial_h' has shape \(10, 5\) for a batch of 2, and its rows"
    ):
        run(lambda x, h0: _recurrent(op, x, h0), {"x": _x(), "h0": h0})
