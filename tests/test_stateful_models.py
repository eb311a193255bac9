"""Real stateful models (iOS18 states): a streaming conv whose cache is a state (K = 40, 72) and a
GPT-2-style KV-cache attention step, converted under DEFAULT and the pipeline, stepped 8 times with
make_state / predict(state=) against torch stepped the same way; verify on their packages."""

import numpy as np
import pytest

import mil_passes

from coremltools.converters.mil.mil import types

from mil_passes.cli import main
from mil_passes.testing.models import stateful as stateful_models
from mil_passes.testing.models.real import pass_pipeline, relative_error

torch = pytest.importorskip("torch")
ct = pytest.importorskip("coremltools")

STEPS = 8
TOLERANCE = {False: 1e-5, True: 1e-2}  # relative to torch: fp32 compute (states are fp16 either way), fp16
CASES = [
    (name, pipeline, fp16)
    for name in stateful_models.BY_NAME
    for pipeline in ("DEFAULT", "pipeline")
    for fp16 in (False, True)
]


@pytest.fixture(scope="module")
def stepped_torch():
    """Per model: the module, the feeds of 8 steps, torch's outputs per step and its final buffers."""
    prepared = {}
    for name, model in stateful_models.BY_NAME.items():
        module = model.instantiate()
        feeds = model.feeds(STEPS)
        prepared[name] = (module, feeds, *stateful_models.torch_steps(module, feeds))
    return prepared


@pytest.mark.parametrize("name, pipeline, fp16", CASES)
def test_stepped_8_times_matches_torch_in_outputs_and_final_states(stepped_torch, name, pipeline, fp16):
    model = stateful_models.BY_NAME[name]
    module, feeds, want, want_states = stepped_torch[name]
    mlmodel = stateful_models.convert(model, module, feeds[0], pass_pipeline=pass_pipeline(pipeline), fp16=fp16)
    got, got_states = stateful_models.reference_steps(mlmodel, feeds)
    assert len(got) == STEPS
    for step, (outputs, expected) in enumerate(zip(got, want)):
        assert [o.shape for o in outputs] == [e.shape for e in expected]
        for output, reference in zip(outputs, expected):
            assert relative_error(output, reference) <= TOLERANCE[fp16], f"step {step + 1}"
    assert set(got_states) == set(want_states) == set(model.states)
    for state, value in got_states.items():
        assert value.dtype == np.float16 and np.abs(want_states[state]).max() > 0  # written, not left at zero
        assert relative_error(value, want_states[state]) <= TOLERANCE[fp16], state


def test_the_pipeline_cuts_the_state_window_from_the_concats_inputs(stepped_torch):
    model = stateful_models.BY_NAME["streaming_conv_k40"]
    module, feeds, *_ = stepped_torch[model.name]
    ops = {}
    for pipeline in ("DEFAULT", "pipeline"):
        prog = stateful_models.convert(
            model, module, feeds[0], pass_pipeline=pass_pipeline(pipeline), fp16=True
        )._mil_program
        ops[pipeline] = list(prog.functions["main"].operations)
    concat_slices = {
        pipeline: [op for op in found if op.op_type == "slice_by_index" and op.x.op.op_type == "concat"]
        for pipeline, found in ops.items()
    }
    assert len(concat_slices["DEFAULT"]) == 1 and concat_slices["pipeline"] == []
    window_reads = [op for op in ops["pipeline"] if op.op_type == "slice_by_index" and op.x.op.op_type == "read_state"]
    assert len(window_reads) == 1


def test_default_narrows_the_kv_position_to_int16(stepped_torch):
    """coremltools' add_int16_cast (DEFAULT at FLOAT16, ct.convert's default precision) casts the
    squeeze of ``pos`` to int16: past 32,767 tokens the position would wrap. At FLOAT32 it does not."""
    model = stateful_models.BY_NAME["kv_cache_attention_t1"]
    module, feeds, *_ = stepped_torch[model.name]
    for fp16, want in ((True, ["int16"]), (False, [])):
        prog = stateful_models.convert(
            model, module, feeds[0], pass_pipeline=pass_pipeline("DEFAULT"), fp16=fp16
        )._mil_program
        casts = [op for op in prog.functions["main"].operations if op.op_type == "cast" and op.x.name == "pos"]
        assert [op.dtype.val for op in casts] == want


def test_the_pipeline_keeps_the_kv_position_int32(stepped_torch):
    """mil_passes.pipeline() gives add_int16_cast a selector that refuses run-time int32 data: the
    squeeze of ``pos`` is not narrowed to int16 at FLOAT16 (nor at FLOAT32), so positions past
    32,767 do not wrap."""
    model = stateful_models.BY_NAME["kv_cache_attention_t1"]
    module, feeds, *_ = stepped_torch[model.name]
    for fp16 in (True, False):
        prog = stateful_models.convert(
            model, module, feeds[0], pass_pipeline=pass_pipeline("pipeline"), fp16=fp16
        )._mil_program
        ops = list(prog.functions["main"].operations)
        assert [op.dtype.val for op in ops if op.op_type == "cast" and op.x.name == "pos"] == []
        position = [op for op in ops if op.op_type == "squeeze" and "pos" in {v.name for v in op.inputs.values()}]
        assert position and all(types.builtin_to_string(op.outputs[0].dtype) == "int32" for op in position)


@pytest.mark.parametrize("name", ["streaming_conv_k72", "kv_cache_attention_t2"])
def test_verify_exits_0_on_the_packages_with_its_table(stepped_torch, name, tmp_path, capsys):
    model = stateful_models.BY_NAME[name]
    module, feeds, *_ = stepped_torch[name]
    path = str(tmp_path / f"{name}.mlpackage")
    stateful_models.convert(model, module, feeds[0], pass_pipeline=ct.PassPipeline.DEFAULT, fp16=True).save(path)
    status = main(["verify", path, "--pipeline", "mil_passes", "--feeds", "1"])
    out, err = capsys.readouterr()
    assert status == 0 and "Traceback" not in out + err
    rows = [line for line in out.splitlines() if line[:4].strip().isdigit()]
    count = len(mil_passes.pipeline().passes)
    assert len(rows) == count and all(" state " in row for row in rows)
    assert out.splitlines()[-1].startswith(f"no pass changed the outputs: {count} passes")
