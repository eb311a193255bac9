"""A package whose op output reuses a function input's name (``ct.convert`` with
``PassPipeline.EMPTY`` skips ``common::dedup_op_and_var_names``, and a traced model's internal
``mask`` then shadows an input named ``mask``, as in CLIP's text model). Read as the file says,
every later use reads the op, not the input; verify refuses the program, naming the file's own
inconsistency before the failure it causes, never a pass."""

import coremltools as ct
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol

from mil_passes.cli import main
from mil_passes.verify import FailsBeforeAnyPass, VerifyError, verify_package


def converted(tmp_path, square_name: str):
    """``y = reshape(mask * x, shape(x))`` after an op ``square = expand_dims(x^T @ x)`` named ``square_name``,
    saved by ``ct.convert`` with EMPTY (every flexible dim in 1..8)."""
    length = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec((1, length)), mb.TensorSpec((1, length))], opset_version=ct.target.iOS17)
    def prog(x, mask):
        mb.expand_dims(x=mb.matmul(x=x, y=x, transpose_x=True), axes=[0], name=square_name)  # [1, S, S]
        return mb.reshape(x=mb.mul(x=mask, y=x), shape=mb.shape(x=x), name="y")

    flexible = ct.Shape((1, ct.RangeDim(1, 8, default=4)))
    model = ct.convert(
        prog,
        inputs=[ct.TensorType(name="x", shape=flexible), ct.TensorType(name="mask", shape=flexible)],
        convert_to="mlprogram",
        pass_pipeline=ct.PassPipeline.EMPTY,
        minimum_deployment_target=ct.target.iOS17,
    )
    path = tmp_path / f"{square_name}.mlpackage"
    model.save(str(path))
    return path


def test_an_input_shadowed_by_an_op_is_named_as_the_cause(tmp_path):
    path = converted(tmp_path, "mask")
    with pytest.raises(FailsBeforeAnyPass) as failure:
        verify_package(path, "empty", feeds=1)
    message = str(failure.value)
    assert message.startswith("the file itself is inconsistent, so it is read as it says, not as its converter meant: ")
    assert "[duplicate-name] 'mask' is defined 2 times in function 'main' (input 'mask', expand_dims 'mask')" in message
    assert (
        "[declared-type-mismatch] 1 op's declared type contradicts its inputs" in message
    )  # mul: [1, S] read as [1, S, S]
    assert "the program fails on a random feed before any pass: ValueError: cannot reshape" in message
    assert isinstance(failure.value, VerifyError)


def test_the_command_refuses_it_with_exit_2(tmp_path, capsys):
    assert main(["verify", str(converted(tmp_path, "mask")), "--pipeline", "empty", "--feeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "[duplicate-name] 'mask'" in err and "Traceback" not in err


def test_the_same_program_with_distinct_names_verifies(tmp_path):
    verification = verify_package(converted(tmp_path, "square"), "cleanup", feeds=2)
    assert verification.culprit is None and verification.rows
