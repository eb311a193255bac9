"""A model too big for the machine gets one line naming what it needs, before anything large is
allocated (mil_passes/reference/memory.py): reading a package, verifying, predicting; and a
MemoryError past the check is one line too, never a traceback."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.cli import main
from mil_passes.package import io as mlpackage
from mil_passes.package.files import loaded_weight_bytes, locate, read_spec
from mil_passes.reference import make_state, predict
from mil_passes.reference import memory
from mil_passes.reference.memory import NotEnoughMemoryError, interpretation_bytes, size_text
from mil_passes.verify import verify_package, verify_program

WEIGHT = (64, 96)


def compressed_program():
    """An int4 weight decoded to fp16 [64, 96] and an fp16 weight [64, 96], added to ``x``."""
    rng = np.random.default_rng(0)

    @mb.program(input_specs=[mb.TensorSpec(WEIGHT, dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        data = rng.integers(-8, 8, WEIGHT).astype(types.np_int4_dtype)
        scale = rng.uniform(1e-3, 0.1, (64, 3)).astype(np.float16)
        decoded = mb.constexpr_blockwise_shift_scale(data=data, scale=scale)
        plain = rng.standard_normal(WEIGHT).astype(np.float16)
        return mb.add(x=mb.add(x=x, y=decoded), y=plain, name="y")

    return prog


def stateful_program():
    @mb.program(
        input_specs=[
            mb.TensorSpec((1, 8), dtype=types.fp16),
            mb.StateTensorSpec((4, 8), dtype=types.fp16),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(x, cache):
        old = mb.read_state(input=cache)
        new = mb.concat(values=(mb.slice_by_index(x=old, begin=[1, 0], end=[4, 8]), x), axis=0)
        mb.coreml_update_state(state=cache, value=new)
        return mb.reduce_sum(x=old, axes=[0], keep_dims=True, name="y")

    return prog


@pytest.fixture
def tiny_machine(monkeypatch):
    """A machine with 1 KiB available."""
    monkeypatch.delenv(memory.CHECK_VARIABLE, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1024)


def test_available_bytes_reads_this_machine():
    available = memory.available_bytes()
    assert available is not None and 0 < available  # Linux: MemAvailable


def test_size_text():
    assert [size_text(n) for n in (512, 2048, 5 << 20, 3 << 30)] == ["512 bytes", "2.0 KiB", "5.0 MiB", "3.0 GiB"]


def test_interpretation_counts_decoded_weights_state_copies_and_a_widened_weight():
    elements = WEIGHT[0] * WEIGHT[1]
    assert interpretation_bytes(compressed_program()) == {
        "compressed weights decoded": 2 * elements,
        "states": 0,
        "the largest fp16 weight widened": 4 * elements,
    }
    parts = interpretation_bytes(stateful_program(), state_copies=9)
    assert parts["states x9"] == 9 * 4 * 8 * 2 and parts["compressed weights decoded"] == 0


def test_loaded_weights_count_sub_byte_types_a_byte_an_element(tmp_path):
    path = mlpackage.save(compressed_program(), tmp_path / "c.mlpackage")
    elements = WEIGHT[0] * WEIGHT[1]
    # int4 data (a byte an element once loaded), the fp16 scale [64, 3] and the fp16 weight
    assert loaded_weight_bytes(read_spec(locate(path))) == elements + 2 * 64 * 3 + 2 * elements


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_reading_a_package_too_big_is_one_line_naming_the_size(tmp_path, capsys, tiny_machine):
    path = mlpackage.save(compressed_program(), tmp_path / "c.mlpackage")
    before = sorted(p.read_bytes() for p in path.rglob("*") if p.is_file())
    for command in (["lint", path], ["optimize", path, "-o", tmp_path / "out.mlpackage"], ["verify", path]):
        status, out, err = run(capsys, *command)
        assert status == 2 and out == "" and len(err.splitlines()) == 1, err
        assert err.startswith(f"mil-passes: error: {path}: reading it needs at least 18.4 KiB (weights 18.4 KiB); ")
        assert "this machine has 1.0 KiB available (MIL_PASSES_MEMORY_CHECK=0 skips this check)" in err
    assert not (tmp_path / "out.mlpackage").exists()
    assert sorted(p.read_bytes() for p in path.rglob("*") if p.is_file()) == before


def test_the_check_can_be_turned_off(tmp_path, capsys, tiny_machine, monkeypatch):
    path = mlpackage.save(compressed_program(), tmp_path / "c.mlpackage")
    monkeypatch.setenv(memory.CHECK_VARIABLE, "0")
    assert run(capsys, "lint", path)[0] in (0, 1)


def test_verify_names_what_stepping_keeps(tmp_path, tiny_machine):
    with pytest.raises(
        NotEnoughMemoryError, match=r"^the program: verifying it needs at least 1.3 KiB \(states x21 1.3 KiB\)"
    ):
        verify_program(stateful_program(), ["common::dead_code_elimination"], feeds=2, steps=4)
    path = mlpackage.save(stateful_program(), tmp_path / "s.mlpackage")  # no weight file: it reads
    with pytest.raises(NotEnoughMemoryError, match=rf"^{path}: verifying it needs"):
        verify_package(path, ["common::dead_code_elimination"], feeds=2)


def test_predict_checks_a_loaded_model_once(tmp_path, monkeypatch):
    path = mlpackage.save(compressed_program(), tmp_path / "c.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    files = size_text(memory.weight_file_bytes(model.weights_dir))  # int4 packed: 15.6 KiB
    monkeypatch.setattr(memory, "available_bytes", lambda: 20 << 10)  # the files fit, decoding them does not
    with pytest.raises(NotEnoughMemoryError, match=rf"^{path}: loading it needs at least 27.6 KiB \(weights {files}, "):
        predict(model, {"x": np.zeros(WEIGHT, np.float16)})
    answers = iter([1 << 40, 1024])  # loading fits; interpreting (a weight widened: 24 KiB) does not
    monkeypatch.setattr(memory, "available_bytes", lambda: next(answers))
    with pytest.raises(NotEnoughMemoryError, match=rf"^{path}: interpreting it needs at least 24.0 KiB"):
        make_state(model)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 40)
    assert predict(model, {"x": np.zeros(WEIGHT, np.float16)})["y"].shape == WEIGHT
    monkeypatch.setattr(memory, "available_bytes", lambda: 1024)  # checked once: the program is loaded
    assert predict(model, {"x": np.zeros(WEIGHT, np.float16)})["y"].shape == WEIGHT


def test_a_memory_error_past_the_check_is_one_line(tmp_path, capsys, monkeypatch):
    path = mlpackage.save(compressed_program(), tmp_path / "c.mlpackage")

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 8.00 GiB for an array with shape (1073741824, 2) and data type float32")

    monkeypatch.setattr(mlpackage, "read", out_of_memory)
    status, out, err = run(capsys, "lint", path)
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("mil-passes: error: out of memory: Unable to allocate 8.00 GiB for an array")
    assert "available" in err
