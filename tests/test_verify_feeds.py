"""verify's random feeds: flexible dims drawn one by one can break a relation the program needs
between them (a decoder's query no longer than its mask); such a feed is drawn again with every
flexible dim at one size, and the run says so."""

import json

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.cli import main
from mil_passes.package import io as mlpackage
from mil_passes.verify import VerifyError, verify_program


def decoder_like():
    """The stateful decoder's write: ``x [1, T]`` into the cache at ``E - T``, ``E`` the mask's length."""

    @mb.program(
        input_specs=[
            mb.StateTensorSpec((1, 8), dtype=types.fp16),
            mb.TensorSpec((1, get_new_symbol()), dtype=types.fp16),
            mb.TensorSpec((1, get_new_symbol()), dtype=types.fp16),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(cache, x, mask):
        tokens = mb.slice_by_index(x=mb.shape(x=x), begin=[1], end=[2])
        end = mb.slice_by_index(x=mb.shape(x=mask), begin=[1], end=[2])
        begin = mb.concat(values=[np.zeros(1, np.int32), mb.sub(x=end, y=tokens)], axis=0)
        written = mb.slice_update(
            x=mb.read_state(input=cache),
            update=x,
            begin=begin,
            end=mb.concat(values=[np.ones(1, np.int32), end], axis=0),
        )
        mb.coreml_update_state(state=cache, value=written)
        return mb.reduce_sum(x=mask, axes=[1], keep_dims=True, name="y")

    return prog


def test_a_feed_the_program_fails_on_is_drawn_again_at_one_size():
    verification = verify_program(decoder_like(), ["common::dead_code_elimination"], feeds=3)
    assert verification.culprit is None and verification.rows[0].status == "same"
    assert verification.shared_sizes.startswith("flexible dims drawn one by one, the program failed: ValueError: ")
    assert "slice_update" in verification.shared_sizes


def test_without_flexible_dims_or_with_given_feeds_the_failure_is_the_error():
    feed = {"x": np.ones((1, 3), np.float16), "mask": np.ones((1, 2), np.float16)}  # a query longer than its mask
    with pytest.raises(VerifyError, match="^the program fails on feed 1 before any pass: ValueError: "):
        verify_program(decoder_like(), ["common::dead_code_elimination"], feeds=[feed])


def test_a_program_that_fails_at_one_size_too_names_both_errors():
    @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(),), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(i):  # an index out of range of [0, 0] whatever its size
        return mb.gather(x=np.zeros(2, np.float32), indices=mb.add(x=i, y=np.int32(10)), name="y")

    with pytest.raises(VerifyError, match="before any pass: .*; with every flexible dim at one size too: "):
        verify_program(prog, ["common::dead_code_elimination"], feeds=1)


def test_the_command_says_so(tmp_path, capsys):
    path = mlpackage.save(decoder_like(), tmp_path / "d.mlpackage")
    assert main(["verify", str(path), "--pipeline", "common::dead_code_elimination"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("feeds: "))
    assert line.startswith("feeds: every flexible dim at one size; flexible dims drawn one by one") and len(line) <= 200
    assert main(["verify", str(path), "--pipeline", "common::dead_code_elimination", "--json"]) == 0
    assert "slice_update" in json.loads(capsys.readouterr().out)["shared_sizes"]


def test_the_command_verifies_a_stateful_llama_with_its_defaults(tmp_path, capsys):
    pytest.importorskip("torch", reason="the Llama decoder is converted from torch")
    pytest.importorskip("transformers", reason="the Llama decoder is transformers' LlamaForCausalLM")
    from mil_passes.testing.models import llama

    path = tmp_path / "llama.mlpackage"
    llama.convert(llama.build(llama.TINY), llama.TINY).save(str(path))
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "feeds: every flexible dim at one size; " in out and "slice_update" in out
    assert out.splitlines()[-1].startswith("no pass changed the outputs: ")
