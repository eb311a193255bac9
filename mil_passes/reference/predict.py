"""``MLModel.predict`` through the reference interpreter: Core ML's contract, on any platform.

``predict(model, data)`` takes what ``MLModel.predict`` takes (a dict of inputs keyed by the model
description's names, or a list of such dicts) and answers the same way: outputs keyed by the
description's output names, in its order. Multiarray inputs (numpy arrays, lists, scalars, torch
tensors) are cast to the declared dtype, as Core ML casts an ``MLMultiArray`` it is given; image
inputs are ``PIL.Image`` objects of the mode coremltools requires (RGB for RGB/BGR, L for
GRAYSCALE, F for GRAYSCALE_FLOAT16) and image outputs come back as ``PIL.Image``. A rank-0 output
comes back with shape ``(1,)``, as Core ML returns it. A classifier (``ct.ClassifierConfig``) gives
its label (``str``, or ``int`` for integer classes) and a dict of probabilities keyed by label.
An optional input (declared with a default value) that ``data`` leaves out gets its default.

The program is the model's (:mod:`.model_program`); neural-network models have none:
:class:`NotAnMLProgramError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import PredictionError
from .interpreter import evaluate, numpy_dtype
from .model_program import NotAnMLProgramError, description_of, program_of, spec_of
from .optional_inputs import input_defaults
from .state import State

__all__ = ["predict", "NotAnMLProgramError"]

# Image color spaces of FeatureTypes.proto: (PIL mode coremltools requires, channels, reversed).
_IMAGE_SPACES = {
    "RGB": ("RGB", 3, False),
    "BGR": ("RGB", 3, True),
    "GRAYSCALE": ("L", 1, False),
    "GRAYSCALE_FLOAT16": ("F", 1, False),
}


# What Core ML's predict says when an ML Program fails at run time (an invalid index, for example).
PREDICTION_FAILED = (
    "Unable to compute the prediction using ML Program. It can be an invalid input data or broken/unsupported model"
)


def predict(model: Any, data: Mapping[str, Any] | list[Mapping[str, Any]], state: Any = None) -> Any:
    """Outputs of ``model`` on ``data``, as ``MLModel.predict`` gives them.

    A stateful model (iOS18 ``ct.StateType``) reads and updates ``state`` in place, a
    :class:`~mil_passes.reference.state.State` from :func:`~mil_passes.reference.state.make_state`
    (``MLModel.make_state()``); without one it runs from zero states, which are then dropped.

    ``data`` is a dict from input name to value, or a list of such dicts (then a list of
    results is returned). Raises :class:`NotAnMLProgramError` for a model that is not an ML
    Program, ``KeyError`` for an input name the model does not have, ``TypeError`` for an image
    input that is not a ``PIL.Image`` of the required mode, ``ValueError`` for a missing or
    mis-shaped input (see :func:`~mil_passes.reference.evaluate`), and ``RuntimeError`` with
    Core ML's message where the model fails at run time (an out-of-range index).
    """
    if isinstance(data, list):
        if not all(isinstance(item, Mapping) for item in data):
            raise TypeError('"data" list must contain only dictionaries')
        if state is not None:
            raise ValueError("State can only be used for unbatched predictions")
        return [predict(model, item) for item in data]
    if not isinstance(data, Mapping):
        raise TypeError(f'"data" must be a dict or a list of dicts, got {type(data).__name__}')
    spec = spec_of(model)
    kind = spec.WhichOneof("Type")
    if kind != "mlProgram":
        raise NotAnMLProgramError(
            f"predict() interprets ML Programs; this model is a '{kind}' model, which has no MIL "
            "program (convert with convert_to='mlprogram')"
        )
    description, function_name = description_of(model, spec)
    prog = program_of(model, spec)
    func = prog.functions[function_name]
    feeds = _feeds(description, func, data)
    cells = _state_cells(state, function_name)
    try:
        results = evaluate(prog, feeds, function=function_name, states=cells)
    except PredictionError as error:  # where Core ML's predict fails, it fails so
        raise RuntimeError(f"{PREDICTION_FAILED}: {error}") from error
    return {feature.name: _output(feature, results[feature.name]) for feature in description.output}


def _state_cells(state: Any, function_name: str) -> dict | None:
    if state is None:
        return None
    if not isinstance(state, State):
        raise TypeError(f"state must come from mil_passes.reference.make_state(model), got {type(state).__name__}")
    if state.function != function_name:
        raise ValueError(f"the state was made for function '{state.function}', not '{function_name}'")
    return state.cells


def _feeds(description, func, data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    features = {feature.name: feature for feature in description.input}
    for name in data:
        if name not in features:
            raise KeyError(
                f'Provided key "{name}", in the input dict, does not match any of the model '
                f"input name(s), which are: {set(features)}"
            )
    defaults = input_defaults(description)
    feeds = {}
    for name, feature in features.items():
        if name not in data and name in defaults:
            data = {**data, name: defaults[name]}
        if name not in data:
            continue  # evaluate() names the missing input and its type
        var = func.inputs.get(name)
        if var is None:
            raise ValueError(f"input '{name}' of the model description is not an input of its program")
        kind = feature.type.WhichOneof("Type")
        if kind == "multiArrayType":
            feeds[name] = _array(data[name]).astype(numpy_dtype(var), copy=False)
        elif kind == "imageType":
            feeds[name] = _image_to_array(name, feature.type.imageType, data[name], numpy_dtype(var))
        else:
            raise NotImplementedError(f"input '{name}' is of type '{kind}', which predict() does not take")
    return feeds


def _array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _color_space(image_type) -> str:
    return type(image_type).ColorSpace.Name(image_type.colorSpace)


def _image_to_array(name: str, image_type, image: Any, dtype: np.dtype) -> np.ndarray:
    try:
        from PIL import Image
    except ModuleNotFoundError:
        raise NotImplementedError(f"image input '{name}' needs Pillow (pip install pillow)") from None
    space = _color_space(image_type)
    if space not in _IMAGE_SPACES:
        raise NotImplementedError(f"image input '{name}' has color space {space}, which predict() does not take")
    mode, _, reverse = _IMAGE_SPACES[space]
    if not isinstance(image, Image.Image):
        raise TypeError(f"Image input, '{name}' must be of type PIL.Image.Image in the input dict")
    if image.mode != mode:
        raise TypeError(f"{space} image input, '{name}', must be of type PIL.Image.Image with mode=='{mode}'")
    pixels = np.asarray(image)
    pixels = pixels[None] if pixels.ndim == 2 else np.moveaxis(pixels, -1, 0)
    if reverse:
        pixels = pixels[::-1]
    return np.ascontiguousarray(pixels[None]).astype(dtype)


def _output(feature, value: Any) -> Any:
    kind = feature.type.WhichOneof("Type")
    if kind == "imageType":
        return _array_to_image(feature.name, feature.type.imageType, value)
    if kind == "dictionaryType":  # a classifier's probabilities, keyed by label
        return dict(value)
    if kind == "stringType":  # a classifier's label
        return str(value)
    if kind == "int64Type":
        return int(np.asarray(value).reshape(-1)[0])
    value = np.asarray(value)
    return value.reshape(1) if value.ndim == 0 else value


def _array_to_image(name: str, image_type, value: np.ndarray) -> Any:
    from PIL import Image

    space = _color_space(image_type)
    if space not in _IMAGE_SPACES:
        raise NotImplementedError(f"image output '{name}' has color space {space}, which predict() does not give")
    mode, channels, reverse = _IMAGE_SPACES[space]
    planes = np.asarray(value).reshape(channels, *np.shape(value)[-2:])
    if reverse:
        planes = planes[::-1]
    if mode == "F":
        return Image.fromarray(planes[0].astype(np.float32))
    pixels = np.clip(np.rint(planes.astype(np.float32)), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels[0] if channels == 1 else np.ascontiguousarray(np.moveaxis(pixels, 0, -1)))
