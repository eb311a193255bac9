"""predict(): MLModel.predict's contract through the reference interpreter."""

import numpy as np
import pytest
import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.reference import evaluate, predict
from mil_passes.reference.predict import NotAnMLProgramError

torch = pytest.importorskip("torch")


def _convert(prog, **kwargs):
    kwargs.setdefault("compute_precision", ct.precision.FLOAT32)
    return ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS17,
        skip_model_load=True,
        **kwargs,
    )


def _affine_model():
    @mb.program(
        input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((3,), dtype=ct.converters.mil.mil.types.int32)],
        opset_version=ct.target.iOS17,
    )
    def prog(x, k):
        scaled = mb.mul(x=x, y=mb.cast(x=k, dtype="fp32"), name="scaled")
        total = mb.reduce_sum(x=scaled, keep_dims=False, name="total")
        return scaled, total

    return _convert(prog)


class Affine(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2 + 1, x.sum(dim=0)


def test_outputs_keyed_and_ordered_by_the_description_and_match_torch():
    x = torch.randn(3, 4)
    traced = torch.jit.trace(Affine().eval(), x)
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    out = predict(model, {"x": x.numpy()})
    names = [feature.name for feature in model.get_spec().description.output]
    assert list(out) == names
    expected = [t.numpy() for t in Affine()(x)]
    for name, want in zip(names, expected):
        np.testing.assert_allclose(out[name], want, rtol=1e-6, atol=1e-6)


def test_inputs_are_cast_to_the_declared_dtype_and_torch_tensors_taken():
    model = _affine_model()
    x = np.arange(6, dtype=np.float64).reshape(2, 3) / 4
    k = [1.0, 2.0, 3.0]  # a list of floats for an int32 input, as Core ML casts it
    out = predict(model, {"x": x, "k": k})
    np.testing.assert_array_equal(out["scaled"], (x * np.array([1, 2, 3])).astype(np.float32))
    assert out["scaled"].dtype == np.float32
    again = predict(model, {"x": torch.from_numpy(x), "k": torch.tensor([1, 2, 3])})
    np.testing.assert_array_equal(again["scaled"], out["scaled"])


def test_float_to_int_cast_truncates_like_a_c_cast():
    model = _affine_model()
    out = predict(model, {"x": np.ones((2, 3)), "k": np.array([1.9, -1.9, 2.5])})
    np.testing.assert_array_equal(out["scaled"][0], [1.0, -1.0, 2.0])


def test_rank0_output_comes_back_with_shape_1():
    model = _affine_model()
    out = predict(model, {"x": np.ones((2, 3), np.float32), "k": np.array([1, 1, 1], np.int32)})
    assert out["total"].shape == (1,)
    assert out["total"][0] == 6.0


def test_batch_of_dicts_gives_a_list():
    model = _affine_model()
    feeds = [{"x": np.full((2, 3), v, np.float32), "k": np.array([1, 1, 1], np.int32)} for v in (1, 2)]
    results = predict(model, feeds)
    assert [r["total"][0] for r in results] == [6.0, 12.0]


def test_model_loaded_from_a_package_matches_the_converted_one(tmp_path):
    model = _affine_model()
    path = tmp_path / "affine.mlpackage"
    model.save(str(path))
    loaded = ct.models.MLModel(str(path), skip_model_load=True)
    assert loaded._mil_program is None
    feeds = {
        "x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32),
        "k": np.array([3, -2, 5], np.int32),
    }
    want = predict(model, feeds)
    got = predict(loaded, feeds)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_model_with_weights_loaded_from_a_package(tmp_path):
    conv = torch.nn.Conv1d(4, 6, 3).eval()
    x = torch.randn(1, 4, 10)
    model = ct.convert(
        torch.jit.trace(conv, x),
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    path = tmp_path / "conv.mlpackage"
    model.save(str(path))
    loaded = ct.models.MLModel(str(path), skip_model_load=True)
    (name,) = [feature.name for feature in loaded.get_spec().description.output]
    out = predict(loaded, {"x": x.numpy()})[name]
    np.testing.assert_allclose(out, conv(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_unknown_input_name_is_a_key_error():
    with pytest.raises(KeyError, match='"y".*does not match any of the model input'):
        predict(_affine_model(), {"x": np.ones((2, 3)), "k": [1, 1, 1], "y": 1})


def test_missing_input_names_it_and_its_type():
    with pytest.raises(ValueError, match=r"missing input 'k': expected tensor<int32, \[3\]>"):
        predict(_affine_model(), {"x": np.ones((2, 3))})


def test_misshaped_input_names_it():
    with pytest.raises(ValueError, match="input 'x' has shape"):
        predict(_affine_model(), {"x": np.ones((3, 2)), "k": [1, 1, 1]})


def test_data_must_be_a_dict_or_list_of_dicts():
    with pytest.raises(TypeError, match="dict"):
        predict(_affine_model(), np.ones((2, 3)))
    with pytest.raises(TypeError, match="only dictionaries"):
        predict(_affine_model(), [np.ones((2, 3))])


def test_neural_network_model_is_refused_clearly():
    x = torch.randn(2, 3)
    model = ct.convert(
        torch.jit.trace(Affine().eval(), x),
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="neuralnetwork",
        skip_model_load=True,
    )
    with pytest.raises(NotAnMLProgramError, match="'neuralNetwork' model, which has no MIL program"):
        predict(model, {"x": x.numpy()})


def test_not_a_model_is_a_type_error():
    with pytest.raises(TypeError, match="needs a coremltools MLModel"):
        predict(object(), {})


# -- images ------------------------------------------------------------------------------------

try:
    from PIL import Image
except ModuleNotFoundError:
    Image = None

needs_pil = pytest.mark.skipif(Image is None, reason="image inputs and outputs need Pillow")


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 0.5


def _image_model(layout, out_layout=None):
    channels = 1 if layout in (ct.colorlayout.GRAYSCALE, ct.colorlayout.GRAYSCALE_FLOAT16) else 3
    x = torch.rand(1, channels, 4, 5)
    outputs = None if out_layout is None else [ct.ImageType(name="out", color_layout=out_layout)]
    target = ct.target.iOS16 if layout == ct.colorlayout.GRAYSCALE_FLOAT16 or out_layout else None
    return ct.convert(
        torch.jit.trace(Scale().eval(), x),
        inputs=[ct.ImageType(name="image", shape=x.shape, color_layout=layout)],
        outputs=outputs,
        convert_to="mlprogram",
        minimum_deployment_target=target,
        compute_precision=ct.precision.FLOAT32 if layout != ct.colorlayout.GRAYSCALE_FLOAT16 else None,
        skip_model_load=True,
    )


def _pixels(channels):
    return np.random.default_rng(1).integers(0, 256, (4, 5, channels), dtype=np.uint8)


@needs_pil
@pytest.mark.parametrize("layout, reverse", [(ct.colorlayout.RGB, False), (ct.colorlayout.BGR, True)])
def test_color_image_input_is_planar_in_the_declared_channel_order(layout, reverse):
    model = _image_model(layout)
    pixels = _pixels(3)
    (name,) = [feature.name for feature in model.get_spec().description.output]
    out = predict(model, {"image": Image.fromarray(pixels)})[name]
    planes = np.moveaxis(pixels, -1, 0).astype(np.float32)
    if reverse:
        planes = planes[::-1]
    np.testing.assert_array_equal(out, planes[None] * 0.5)


@needs_pil
def test_grayscale_image_input():
    model = _image_model(ct.colorlayout.GRAYSCALE)
    pixels = _pixels(1)[..., 0]
    (name,) = [feature.name for feature in model.get_spec().description.output]
    out = predict(model, {"image": Image.fromarray(pixels)})[name]
    np.testing.assert_array_equal(out, pixels[None, None].astype(np.float32) * 0.5)


@needs_pil
def test_image_input_of_the_wrong_mode_or_type_is_refused():
    model = _image_model(ct.colorlayout.RGB)
    with pytest.raises(TypeError, match="mode=='RGB'"):
        predict(model, {"image": Image.fromarray(_pixels(1)[..., 0])})
    with pytest.raises(TypeError, match="must be of type PIL.Image.Image"):
        predict(model, {"image": _pixels(3)})


@needs_pil
def test_image_output_is_a_pil_image():
    model = _image_model(ct.colorlayout.RGB, out_layout=ct.colorlayout.BGR)
    pixels = _pixels(3) & 0xFE  # even values: halving them is exact, no rounding question
    out = predict(model, {"image": Image.fromarray(pixels)})["out"]
    assert isinstance(out, Image.Image) and out.mode == "RGB" and out.size == (5, 4)
    # BGR output planes are the model's channels reversed back into an RGB image.
    want = (pixels // 2)[..., ::-1]
    np.testing.assert_array_equal(np.asarray(out), want.astype(np.uint8))


def test_predict_uses_the_models_program_as_evaluate_does():
    model = _affine_model()
    feeds = {"x": np.ones((2, 3), np.float32), "k": np.array([1, 2, 3], np.int32)}
    direct = evaluate(model._mil_program, feeds)
    np.testing.assert_array_equal(predict(model, feeds)["scaled"], direct["scaled"])


# -- recurrent and random ops (kernels added for the peer suite) --------------------------------


class Recurrent(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


@pytest.mark.parametrize(
    "layer",
    [
        torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True),
        torch.nn.LSTM(3, 4, bias=False),
        torch.nn.RNN(3, 4, num_layers=2, nonlinearity="relu"),
    ],
    ids=["lstm-bidirectional-2-layers", "lstm-no-bias", "rnn-relu-2-layers"],
)
def test_recurrent_models_match_torch(layer):
    torch.manual_seed(0)
    model = Recurrent(layer).eval()
    x = torch.randn(2, 5, 3)
    converted = ct.convert(
        torch.jit.trace(model, x),
        inputs=[ct.TensorType(name="x", shape=x.shape)],
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    out = list(predict(converted, {"x": x.numpy()}).values())
    output, states = model(x)
    want = [output] + (list(states) if isinstance(states, tuple) else [states])
    assert len(out) == len(want)
    for got, expected in zip(out, want):
        np.testing.assert_allclose(got, expected.detach().numpy(), rtol=1e-5, atol=1e-5)


def _lstm_program(direction, peephole=None, hidden=2, steps=3):
    rng = np.random.default_rng(0)
    weight_ih = rng.standard_normal((4 * hidden, 3)).astype(np.float32)
    weight_hh = rng.standard_normal((4 * hidden, hidden)).astype(np.float32)

    @mb.program(
        input_specs=[mb.TensorSpec((steps, 1, 3)), mb.TensorSpec((1, hidden)), mb.TensorSpec((1, hidden))],
        opset_version=ct.target.iOS17,
    )
    def prog(x, h, c):
        return mb.lstm(
            x=x,
            initial_h=h,
            initial_c=c,
            weight_ih=weight_ih,
            weight_hh=weight_hh,
            peephole=peephole,
            direction=direction,
            output_sequence=True,
            name="lstm",
        )

    return prog, weight_ih, weight_hh


def test_reverse_lstm_reads_backwards_and_keeps_its_outputs_in_processing_order():
    x = np.random.default_rng(1).standard_normal((3, 1, 3)).astype(np.float32)
    zeros = np.zeros((1, 2), np.float32)
    forward, *_ = _lstm_program("forward")
    reverse, *_ = _lstm_program("reverse")
    fwd = evaluate(forward, {"x": x[::-1].copy(), "h": zeros, "c": zeros})
    rev = evaluate(reverse, {"x": x, "h": zeros, "c": zeros})
    seq_name, h_name, c_name = list(rev)
    np.testing.assert_allclose(rev[seq_name], fwd[list(fwd)[0]], rtol=1e-6)  # coremltools' op tests' layout
    np.testing.assert_allclose(rev[h_name], fwd[list(fwd)[1]], rtol=1e-6)


def test_lstm_peepholes_read_the_previous_cell_for_input_and_forget_and_the_new_one_for_output():
    peephole = np.array([0.5, -1.0, 2.0], np.float32)  # [input, forget, output] for H = 1
    prog, w_ih, w_hh = _lstm_program("forward", peephole=peephole, hidden=1, steps=1)
    x = np.array([[[0.3, -0.2, 0.1]]], np.float32)
    h0, c0 = np.array([[0.4]], np.float32), np.array([[0.7]], np.float32)
    out = evaluate(prog, {"x": x, "h": h0, "c": c0})
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, z = (w_ih @ x[0, 0] + w_hh @ h0[0]).astype(np.float64)
    c1 = sigmoid(f + peephole[1] * c0[0, 0]) * c0[0, 0] + sigmoid(i + peephole[0] * c0[0, 0]) * np.tanh(z)
    h1 = sigmoid(o + peephole[2] * c1) * np.tanh(c1)
    _, h_name, c_name = list(out)
    np.testing.assert_allclose(out[c_name][0, 0], c1, rtol=1e-5)
    np.testing.assert_allclose(out[h_name][0, 0], h1, rtol=1e-5)


def test_random_ops_draw_from_their_distributions_in_the_declared_shape():
    shape = np.array([20000], np.int32)

    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return (
            mb.random_uniform(shape=shape, low=2.0, high=3.0, name="uniform"),
            mb.random_normal(shape=shape, mean=1.0, stddev=2.0, name="normal"),
            mb.random_bernoulli(shape=shape, prob=0.25, name="bernoulli"),
            mb.random_categorical(x=x, mode="probs", size=7, name="categorical"),
        )

    out = evaluate(prog, {"x": np.array([[0, 0, 1], [0, 1, 0]], np.float32)})
    assert 2.0 <= out["uniform"].min() and out["uniform"].max() < 3.0
    assert abs(out["normal"].mean() - 1.0) < 0.1 and abs(out["normal"].std() - 2.0) < 0.1
    assert set(np.unique(out["bernoulli"])) == {0.0, 1.0} and abs(out["bernoulli"].mean() - 0.25) < 0.02
    np.testing.assert_array_equal(out["categorical"], [[2.0] * 7, [1.0] * 7])  # one-hot probabilities


def test_a_seeded_random_op_repeats_its_draws():
    @mb.program(input_specs=[mb.TensorSpec((1,))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.random_normal(shape=np.array([5], np.int32), seed=7, name="normal")

    first, second = (evaluate(prog, {"x": np.zeros(1, np.float32)})["normal"] for _ in range(2))
    np.testing.assert_array_equal(first, second)
