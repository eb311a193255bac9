"""The stateful Llama decoder of testing/models/llama.py at its tiny shape: converted as the
stateful-model guide converts it, a prompt and decode steps on the reference interpreter match
torch stepped the same way, logits and caches, within fp16 error."""

import numpy as np
import pytest

from mil_passes.testing.models import llama
from mil_passes.testing.models.real import relative_error

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

FP16_TOLERANCE = 1e-2  # relative to torch's fp32 logits: the program computes in fp16


@pytest.fixture(scope="module")
def converted():
    module = llama.build(llama.TINY)
    return module, llama.convert(module, llama.TINY)


def test_the_program_has_the_two_fp16_cache_states_and_flexible_inputs(converted):
    _, mlmodel = converted
    func = mlmodel._mil_program.functions["main"]
    states = {name: var for name, var in func.inputs.items() if name in llama.STATE_NAMES}
    assert {name: tuple(var.shape) for name, var in states.items()} == dict.fromkeys(
        llama.STATE_NAMES, llama.TINY.cache_shape
    )
    ops = {op.op_type for op in func.operations}
    assert {"read_state", "slice_update", "coreml_update_state", "softmax"} <= ops
    assert all(not isinstance(dim, int) for dim in func.inputs["causalMask"].shape[2:])


def test_a_prompt_and_decode_steps_match_torch_in_logits_and_caches(converted):
    from mil_passes.reference import make_state, predict

    module, mlmodel = converted
    stepper, state = llama.TorchStepper(module), make_state(mlmodel)
    for feed in llama.decode_feeds(llama.TINY, prompt=4, steps=3):
        want = stepper.step(feed)
        got = predict(mlmodel, feed, state=state)["logits"]
        assert got.dtype == np.float16 and got.shape == want.shape == (1, feed["inputIds"].shape[1], llama.TINY.vocab)
        assert relative_error(got, want) <= FP16_TOLERANCE
    for name, cache in stepper.caches().items():
        assert np.abs(cache[:, :, :, :7]).max() > 0 and not cache[:, :, :, 7:].any()  # 7 positions written
        assert relative_error(state.read_state(name), cache) <= FP16_TOLERANCE


def test_the_mask_lets_each_token_see_its_own_position_and_those_before():
    mask = llama.causal_mask(2, 5)
    assert mask.shape == (1, 1, 2, 5) and mask.dtype == np.float16
    assert (mask[0, 0] == 0).tolist() == [[True] * 4 + [False], [True] * 5]


def test_feeds_and_shapes():
    feeds = llama.decode_feeds(llama.TINY, prompt=3, steps=2)
    assert [f["inputIds"].shape for f in feeds] == [(1, 3), (1, 1), (1, 1)]
    assert [f["causalMask"].shape[-1] for f in feeds] == [3, 4, 5]
    with pytest.raises(ValueError, match="do not fit a context of 16"):
        llama.decode_feeds(llama.TINY, prompt=10, steps=7)
    assert llama.LLAMA_1B.with_layers(4).layers == 4 and llama.LLAMA_1B.cache_shape == (16, 1, 8, 256, 64)
    assert 1.2e9 < llama.LLAMA_1B.parameters() < 1.25e9 and 1.3e8 < llama.SMOLLM_135M.parameters() < 1.36e8


def test_an_unknown_compression_is_named(converted):
    with pytest.raises(ValueError, match="unknown compression 'int2'"):
        llama.compress(converted[1], "int2")


def test_lint_of_a_decoder_reads_in_a_few_lines_whatever_its_depth(converted, tmp_path, capsys):
    """The grouped report: one line per rule and cause, so depth adds ops, not lines."""
    from mil_passes.cli import main

    deeper = llama.TINY.with_layers(6)
    texts = {}
    for layers, mlmodel in ((2, converted[1]), (6, llama.convert(llama.build(deeper), deeper))):
        path = tmp_path / f"decoder{layers}.mlpackage"
        mlmodel.save(str(path))
        capsys.readouterr()
        main(["lint", str(path)])
        texts[layers] = capsys.readouterr().out.splitlines()
    deep = texts[6]
    assert len(deep) == len(texts[2]) <= 25, "\n".join(deep)
    assert all(len(line) <= 200 for line in deep), max(deep, key=len)
    assert any(line.startswith("placement on every chip from M1/A14: ") for line in deep), "\n".join(deep)


def test_pipeline_leaves_no_run_time_state_write_and_decodes_as_default_bit_for_bit(converted):
    """webnn::dynamic_state_update_to_mask in pipeline(): the prompt and decode steps keep every
    bit of DEFAULT's logits and caches."""
    import mil_passes
    from mil_passes.ir import op_counts
    from mil_passes.reference.state import evaluate_steps

    module, default = converted
    optimized = llama.convert(module, llama.TINY, pass_pipeline=mil_passes.pipeline())
    assert "slice_update" not in op_counts(optimized._mil_program)
    feeds = llama.decode_feeds(llama.TINY, prompt=4, steps=3)
    (want_out, want_states), (got_out, got_states) = (
        evaluate_steps(mlmodel._mil_program, feeds) for mlmodel in (default, optimized)
    )
    for want, got in zip([*want_out, *want_states], [*got_out, *got_states]):
        assert list(want) == list(got)
        for name in want:
            assert want[name].view(np.uint16).tolist() == got[name].view(np.uint16).tolist(), name
