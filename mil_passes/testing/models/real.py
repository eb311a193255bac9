"""Real architectures at tiny sizes with random weights, and their conversion by coremltools.

Each :class:`RealModel` builds a torch module of a kind users convert (torchvision classifiers,
transformers GPT-2/BERT/T5/Whisper from a tiny config, a bidirectional LSTM, streaming decoder steps
keeping ``torch.cat([cache, x], -1)[..., -K:]``) and draws named example inputs. Nothing is
downloaded: every model is built from a config with random weights.

torch and transformers are optional (the ``models`` extra); they are imported when a model is built.
The PyPI torchvision wheel is linked against CUDA torch, so its C extension does not load beside the
CPU torch and ``import torchvision`` fails registering fake kernels for its ops (``operator
torchvision::nms does not exist``), which breaks ``transformers`` too when torchvision sits in
site-packages. ``make test`` therefore installs it apart, in :data:`VISION_DIR`;
:func:`torchvision_models` finds it there (or installed normally) and imports its pure-Python
classification models with only those two registration modules stubbed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class RealModel:
    """A module builder, its named example inputs, and how to declare them to ``ct.convert``."""

    name: str
    build: Callable[[], Any]
    example_inputs: Callable[[np.random.Generator], Inputs]
    flexible: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)  # input -> axis -> range
    streaming_windows: int = 0  # cache windows lint must call errors before the pipeline rewrites them

    def instantiate(self, seed: int = 0):
        """The module with weights drawn from ``seed``, in eval mode."""
        import torch

        torch.manual_seed(seed)
        return self.build().eval()


# --- torchvision ---------------------------------------------------------------------------------

_TORCHVISION_REGISTRATIONS = ("torchvision._meta_registrations", "torchvision._autograd_registrations")
# Where `make test` installs torchvision, out of site-packages (its --target folder in the venv).
VISION_DIR = Path(sys.prefix) / "torchvision-models"


def torchvision_available() -> bool:
    """Whether :func:`torchvision_models` can import torchvision: installed, or in :data:`VISION_DIR`."""
    return importlib.util.find_spec("torchvision") is not None or (VISION_DIR / "torchvision").is_dir()


def torchvision_models():
    """``torchvision.models``, imported without torchvision's C extension.

    Only the two modules that register fake and autograd kernels for torchvision's C++ ops (nms,
    roi_align, …) are replaced by empty modules; the classification models never call those ops.
    Any half-finished earlier import (``import coremltools`` tries ``import torchvision``) is
    forgotten first. With a torchvision whose extension loads, nothing is stubbed.
    """
    loaded = sys.modules.get("torchvision")
    if loaded is not None and hasattr(loaded, "models"):
        return loaded.models
    if importlib.util.find_spec("torchvision") is None and (VISION_DIR / "torchvision").is_dir():
        sys.path.append(str(VISION_DIR))
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    try:
        import torchvision
    except RuntimeError:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        for name in _TORCHVISION_REGISTRATIONS:
            sys.modules[name] = types.ModuleType(name, "stubbed: torchvision's C extension did not load")
        import torchvision
    return torchvision.models


def resnet18():
    return _randomize_norms(torchvision_models().resnet18(weights=None, num_classes=10))


def mobilenet_v3_small():
    return _randomize_norms(torchvision_models().mobilenet_v3_small(weights=None, num_classes=10))


def vit_tiny():
    """torchvision's VisionTransformer at a small size; its head, initialized to zeros, drawn at random
    (a zero head gives zeros whatever the body computes)."""
    import torch

    vision_transformer = torchvision_models().vision_transformer
    model = vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    torch.nn.init.normal_(model.heads.head.weight, std=0.2)
    torch.nn.init.normal_(model.heads.head.bias, std=0.2)
    return model


# --- transformers --------------------------------------------------------------------------------

_TINY_TEXT = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
_TINY_T5 = dict(vocab_size=96, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)


def _transformers():
    """``transformers``, imported after torchvision (which it imports when installed) is loadable."""
    if importlib.util.find_spec("torchvision") is not None:
        torchvision_models()
    import transformers

    return transformers


def tensors_only(model, keys: tuple[str, ...], **options: Any):
    """``model`` as a module taking tensors (as ``keys``) and returning its first output; ``options``
    go to every call (``use_cache=False``)."""
    import torch

    class TensorsOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(**dict(zip(keys, tensors)), **options, return_dict=False)[0]

    return TensorsOnly()


def transformers_model(
    config_class: str,
    model_class: str,
    keys: tuple[str, ...],
    config: dict[str, Any],
    *,
    eager: bool = False,
    model_options: dict[str, Any] | None = None,
    **options: Any,
):
    """transformers' ``model_class`` built from ``config_class(**config)`` (``eager``: its attention
    written out, as an attention mask's ``finfo.min`` is converted), as :func:`tensors_only` calls it."""
    transformers = _transformers()
    settings = getattr(transformers, config_class)(**config)
    if eager:
        settings._attn_implementation = "eager"
    model = getattr(transformers, model_class)(settings, **(model_options or {}))
    return tensors_only(model, keys, **options)


def gpt2():
    config = dict(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    return transformers_model("GPT2Config", "GPT2LMHeadModel", ("input_ids",), config, use_cache=False)


def bert():
    config = dict(max_position_embeddings=64, **_TINY_TEXT)
    keys = ("input_ids", "attention_mask")
    unpooled = dict(add_pooling_layer=False)
    return transformers_model("BertConfig", "BertModel", keys, config, model_options=unpooled, use_cache=False)


def t5():
    config = dict(_TINY_T5, num_decoder_layers=2, decoder_start_token_id=0)
    return transformers_model("T5Config", "T5Model", ("input_ids", "decoder_input_ids"), config, use_cache=False)


def whisper():
    config = dict(
        vocab_size=96,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    keys = ("input_features", "decoder_input_ids")
    return transformers_model("WhisperConfig", "WhisperModel", keys, config, use_cache=False)


# --- torch.nn ------------------------------------------------------------------------------------


def bilstm():
    """Two bidirectional LSTM layers, then a linear head on every step."""
    import torch

    class BiLSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(12, 16, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(32, 5)

        def forward(self, x):
            return self.head(self.lstm(x)[0])

    return BiLSTM()


def attention_head_split(heads: int = 4):
    """``B, T, D = x.shape; x.reshape(B, T, H, D // H)``: the head split of every attention."""
    import torch

    class HeadSplit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (t.reshape(B, T, heads, D // heads).transpose(1, 2) for t in (q, k, v))
            attended = torch.softmax(q @ k.transpose(-1, -2) * (D // heads) ** -0.5, dim=-1) @ v
            return attended.transpose(1, 2).reshape(B, T, D)

    return HeadSplit()


def streaming_decoder(cached: int, layers: int = 2, channels: int = 16):
    """One step of a causal conv decoder keeping the last ``cached`` frames per layer.

    The cache update is ``torch.cat([cache, x], -1)[..., -K:]`` and the new caches are stacked: the
    window the Neural Engine compiler refuses when ``K`` is a multiple of 8 but not of 32 and the
    step's frame count is not a multiple of 8.
    """
    import torch

    class StreamingDecoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                torch.nn.Conv1d(channels, channels, 5, dilation=cached // 4, groups=channels) for _ in range(layers)
            )
            self.mix = torch.nn.ModuleList(torch.nn.Conv1d(channels, channels, 1) for _ in range(layers))

        def forward(self, x, cache):
            steps = x.shape[-1]
            next_caches = []
            for i, (conv, mix) in enumerate(zip(self.convs, self.mix)):
                joined = torch.cat([cache[i], x], dim=-1)
                next_caches.append(joined[..., -cached:])
                x = x + mix(torch.tanh(conv(joined)[..., -steps:]))
            return x, torch.stack(next_caches, dim=0)

    return StreamingDecoder()


def _randomize_norms(module):
    """Give batch norms non-trivial statistics so folding mistakes show."""
    import torch

    generator = torch.Generator().manual_seed(0)
    for sub in module.modules():
        if isinstance(sub, torch.nn.BatchNorm2d):
            sub.running_mean.copy_(torch.randn(sub.num_features, generator=generator) * 0.1)
            sub.running_var.copy_(torch.rand(sub.num_features, generator=generator) + 0.5)
    return module


def _normal(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def _tokens(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.integers(3, 96, shape).astype(np.int32)


def _named(**draws: Callable[[np.random.Generator], np.ndarray]) -> Callable[[np.random.Generator], Inputs]:
    return lambda rng: {name: draw(rng) for name, draw in draws.items()}


def _attention_mask(rng: np.random.Generator) -> np.ndarray:
    mask = np.ones((1, 9), np.int32)
    mask[0, 7:] = 0
    return mask


STREAMING_FRAMES = 7

MODELS: tuple[RealModel, ...] = (
    RealModel("resnet18", resnet18, _named(image=_normal(1, 3, 32, 32))),
    RealModel("mobilenet_v3_small", mobilenet_v3_small, _named(image=_normal(1, 3, 32, 32))),
    RealModel("vit", vit_tiny, _named(image=_normal(1, 3, 32, 32))),
    RealModel("bert", bert, _named(input_ids=_tokens(1, 9), attention_mask=_attention_mask)),
    RealModel("gpt2", gpt2, _named(input_ids=_tokens(1, 9))),
    RealModel("gpt2_flexible", gpt2, _named(input_ids=_tokens(1, 9)), flexible={"input_ids": {1: (1, 64)}}),
    RealModel("t5", t5, _named(input_ids=_tokens(1, 9), decoder_input_ids=_tokens(1, 5))),
    RealModel("whisper", whisper, _named(input_features=_normal(1, 8, 32), decoder_input_ids=_tokens(1, 5))),
    RealModel("bilstm", bilstm, _named(x=_normal(1, 11, 12))),
    RealModel("attention_head_split", attention_head_split, _named(x=_normal(2, 5, 32))),
    RealModel(
        "streaming_k40",
        lambda: streaming_decoder(40),
        _named(x=_normal(1, 16, STREAMING_FRAMES), cache=_normal(2, 1, 16, 40)),
        streaming_windows=2,
    ),
    RealModel(
        "streaming_k72",
        lambda: streaming_decoder(72),
        _named(x=_normal(1, 16, STREAMING_FRAMES), cache=_normal(2, 1, 16, 72)),
        streaming_windows=2,
    ),
)

BY_NAME = {model.name: model for model in MODELS}


def trace(module, inputs: Inputs):
    """``torch.jit.trace`` of ``module`` on ``inputs`` (in their order).

    Traced with autograd on, as coremltools' guide does: under ``torch.no_grad()``,
    ``nn.MultiheadAttention`` (the ViT's) takes its fast path, ``_native_multi_head_attention``, which
    coremltools 9.0 cannot convert.
    """
    import torch

    return torch.jit.trace(module, tuple(torch.from_numpy(x) for x in inputs.values()), check_trace=False)


class FrontendLimitation(RuntimeError):
    """The installed coremltools' torch frontend cannot convert the model (the message says why, in one line)."""


def _frontend_limitation(error: ValueError) -> FrontendLimitation | None:
    """coremltools 8.x's torch ``slice`` calls ``np.issubdtype`` on a Var when the end is a run-time
    value; NumPy 2.3 refuses an object whose ``dtype`` attribute is not a numpy dtype (1.x and 2.0-2.2
    answered False). coremltools 9.0 asks about ``end.dtype`` instead."""
    import coremltools as ct

    if "dtype attribute is not a valid dtype instance" not in str(error) or ct.__version__.startswith("9."):
        return None
    return FrontendLimitation(
        f"coremltools {ct.__version__}'s torch frontend cannot convert a slice with a run-time end under "
        f"NumPy {np.__version__} (np.issubdtype of a Var); coremltools 9 can"
    )


def _wrong_expand(prog) -> FrontendLimitation | None:
    """coremltools 8.3's torch frontend converts ``expand(1, 1, -1, -1)`` of a tensor with run-time dims
    to ``tile(x, reps=real_div([1, 1, -1, -1], shape(x)))``: the -1s become reps of 0 and the tensor
    empty (GPT-2's causal mask with a flexible sequence). coremltools 9.0 replaces the -1s first."""
    import coremltools as ct

    for function in prog.functions.values():
        for op in function.operations:
            reps = op.reps.op if op.op_type == "tile" else None
            if reps is not None and reps.op_type == "real_div" and reps.x.val is not None and -1 in reps.x.val:
                return FrontendLimitation(
                    f"coremltools {ct.__version__}'s torch frontend converts expand(-1) of a run-time dim to "
                    f"tile '{op.name}' with reps real_div({reps.x.val.tolist()}, shape), which are 0; coremltools 9 can"
                )
    return None


def convert(model: RealModel, traced, inputs: Inputs, *, fp16: bool = False, pass_pipeline=None):
    """The ML Program of ``traced`` (iOS17), FLOAT32 or FLOAT16, inputs named as in ``inputs``.

    Raises :class:`FrontendLimitation` where the installed coremltools cannot convert it."""
    import coremltools as ct

    specs = []
    for name, example in inputs.items():
        shape: list[Any] = list(example.shape)
        for axis, (lower, upper) in model.flexible.get(name, {}).items():
            shape[axis] = ct.RangeDim(lower_bound=lower, upper_bound=upper, default=example.shape[axis])
        specs.append(ct.TensorType(name=name, shape=shape, dtype=example.dtype.type))
    try:
        mlmodel = ct.convert(
            traced,
            inputs=specs,
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
            minimum_deployment_target=ct.target.iOS17,
            pass_pipeline=pass_pipeline,
            skip_model_load=True,
        )
    except ValueError as error:
        limitation = _frontend_limitation(error)
        if limitation is None:
            raise
        raise limitation from None
    limitation = _wrong_expand(mlmodel._mil_program)
    if limitation is not None:
        raise limitation
    return mlmodel


def torch_outputs(module, inputs: Inputs) -> list[np.ndarray]:
    """The module's outputs on ``inputs``, as numpy arrays, in order."""
    import torch

    with torch.no_grad():
        result = module(*(torch.from_numpy(x) for x in inputs.values()))
    result = result if isinstance(result, tuple) else (result,)
    return [r.numpy() for r in result]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (0 for empty arrays)."""
    if want.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)))) / scale


# --- checking a conversion -----------------------------------------------------------------------

PIPELINES = ("DEFAULT", "pipeline")
TOLERANCE = {False: 1e-5, True: 1e-2}  # relative error allowed vs torch: fp32, fp16


def pass_pipeline(name: str):
    """coremltools' DEFAULT, or ``mil_passes.pipeline()`` (DEFAULT with the package's passes)."""
    import coremltools as ct

    import mil_passes

    return {"DEFAULT": ct.PassPipeline.DEFAULT, "pipeline": mil_passes.pipeline()}[name]


@dataclass
class Prepared:
    """A model built and traced once, with torch's outputs on every trial's inputs."""

    model: RealModel
    module: Any
    inputs: Inputs
    traced: Any
    trials: list[tuple[Inputs, list[np.ndarray]]]


def trial_inputs(model: RealModel, inputs: Inputs) -> list[Inputs]:
    """The example inputs and, for flexible axes, the same at the smallest size and at 2x + 2."""
    trials = [inputs]
    for size in ("lower", "larger"):
        if not model.flexible:
            break
        trial = dict(inputs)
        for name, axes in model.flexible.items():
            shape = list(inputs[name].shape)
            for axis, (lower, upper) in axes.items():
                shape[axis] = lower if size == "lower" else min(upper, 2 * shape[axis] + 2)
            trial[name] = np.resize(inputs[name], shape).astype(inputs[name].dtype)
        trials.append(trial)
    return trials


def prepare(model: RealModel, seed: int = 0) -> Prepared:
    module = model.instantiate(seed)
    inputs = model.example_inputs(np.random.default_rng(seed))
    trials = [(trial, torch_outputs(module, trial)) for trial in trial_inputs(model, inputs)]
    return Prepared(model, module, inputs, trace(module, inputs), trials)


def max_error(mlmodel, trials: Sequence[tuple[Inputs, list[np.ndarray]]]) -> float:
    """The largest relative error of any output on any trial (reference interpreter vs torch);
    NaN when a NaN shows up in either."""
    from ...reference import predict

    worst = 0.0
    for inputs, wanted in trials:
        got = list(predict(mlmodel, inputs).values())
        if [g.shape for g in got] != [w.shape for w in wanted]:
            raise AssertionError(f"shapes {[g.shape for g in got]}, torch gives {[w.shape for w in wanted]}")
        for error in (relative_error(g, w) for g, w in zip(got, wanted)):
            if np.isnan(error):
                return float("nan")  # max() would pass over it
            worst = max(worst, error)
    return worst


@dataclass(frozen=True)
class RoundTrip:
    """The command on a saved model: exit statuses of ``optimize`` and of ``lint`` of its output,
    the reloaded output's largest relative error vs torch, and the rules of the errors lint left."""

    optimize_status: int
    lint_status: int
    error: float
    errors_left: tuple[str, ...] = ()


def round_trip(mlmodel, folder: str, trials: Sequence[tuple[Inputs, list[np.ndarray]]]) -> RoundTrip:
    """Save ``mlmodel`` under ``folder``, ``mil-passes optimize`` it, ``lint`` the result, predict it."""
    import contextlib
    import io
    import os

    import coremltools as ct

    from ...cli import main

    source, fixed = os.path.join(folder, "model.mlpackage"), os.path.join(folder, "fixed.mlpackage")
    mlmodel.save(source)
    with contextlib.redirect_stdout(io.StringIO()):
        optimized = main(["optimize", source, "-o", fixed, "--quiet"])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        linted = main(["lint", fixed, "--json"])
    findings = json.loads(printed.getvalue())["findings"]
    errors = tuple(sorted({f["rule"] for f in findings if f["severity"] == "error"}))
    return RoundTrip(optimized, linted, max_error(ct.models.MLModel(fixed, skip_model_load=True), trials), errors)
