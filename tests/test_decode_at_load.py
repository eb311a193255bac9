"""A package predict loads has its compressed weights decoded in place (model_program.py): the
same bits as decoding them at every evaluation, no constexpr op or compressed input left, and the
memory checked before loading counts the decoded weights."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.package import io as mlpackage
from mil_passes.package.files import locate, read_spec
from mil_passes.reference import evaluate, predict
from mil_passes.reference import memory
from mil_passes.reference.frozen import is_frozen
from mil_passes.reference.model_program import model_program
from test_decoded_weights import DECODERS, SHAPE, _program


@pytest.mark.parametrize("op_type", sorted(DECODERS))
def test_a_loaded_package_decodes_its_weights_in_place_with_the_same_bits(op_type, tmp_path):
    prog = _program(op_type)
    path = mlpackage.save(prog, tmp_path / "c.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    feed = {"x": np.random.default_rng(1).standard_normal(SHAPE).astype(np.float16)}
    want = evaluate(mlpackage.load(path), feed)  # the constexpr op decoded by an evaluation
    got = predict(model, feed)
    name = next(iter(want))
    assert got[name].tobytes() == want[name].tobytes()
    loaded, _ = model_program(model)
    ops = loaded.functions["main"].operations
    assert not any(op.op_type.startswith("constexpr_") for op in ops)
    consts = [op for op in ops if op.op_type == "const" and isinstance(op.outputs[0].val, np.ndarray)]
    assert [c.outputs[0].val.shape for c in consts if c.outputs[0].val.size > 1] == [SHAPE]  # no compressed input
    assert all(is_frozen(c.outputs[0].val) for c in consts)


def test_a_decoded_weight_a_function_returns_stays_a_constexpr(tmp_path):
    rng = np.random.default_rng(0)

    @mb.program(input_specs=[mb.TensorSpec((2,), dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        data = rng.integers(-8, 8, SHAPE).astype(types.np_int4_dtype)
        scale = rng.uniform(1e-3, 0.1, (64, 3)).astype(np.float16)
        return mb.add(x=x, y=np.float16(1.0), name="y"), mb.constexpr_blockwise_shift_scale(
            data=data, scale=scale, name="w"
        )

    path = mlpackage.save(prog, tmp_path / "r.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    loaded, _ = model_program(model)
    assert any(op.op_type == "constexpr_blockwise_shift_scale" for op in loaded.functions["main"].operations)


def test_the_load_check_counts_the_decoded_weights(tmp_path, monkeypatch):
    path = mlpackage.save(_program("constexpr_blockwise_shift_scale"), tmp_path / "c.mlpackage")
    assert memory.decoded_bytes(read_spec(locate(path))) == 2 * SHAPE[0] * SHAPE[1]
    model = ct.models.MLModel(str(path), skip_model_load=True)
    files = memory.weight_file_bytes(model.weights_dir)
    monkeypatch.setattr(memory, "available_bytes", lambda: files + 1024)  # the files fit, decoding does not
    with pytest.raises(
        memory.NotEnoughMemoryError, match=r"loading it needs at least .*compressed weights decoded 12.0 KiB"
    ):
        predict(model, {"x": np.zeros(SHAPE, np.float16)})
