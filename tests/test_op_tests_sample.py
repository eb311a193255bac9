"""A fixed sample of coremltools' MIL op tests, numeric through the interpreter (``make op-tests``
runs the large sample): recurrent ops in both directions, lists in a while_loop, crop_resize,
reverse_sequence and Core ML's error on an invalid scatter index, in fp16 and fp32. Every case must
make a prediction and pass, except the one the interpreter declines: an iOS15 crop_resize box outside
the image, whose result the spec leaves undefined."""

import contextlib
import io

import pytest

pytest.importorskip("torch")  # the recurrent tests' expectations come from torch

from suite_helpers import benchmark, run_cases  # noqa: E402


def _backend(precision: str, opset: str, number: int) -> str:
    return (
        f"compute_unit=ComputeUnit.CPU_ONLY-backend=BackendConfig(backend='mlprogram', precision='{precision}', "
        f"opset_version=<AvailableTarget.{opset}: {number}>)"
    )


FP16_15, FP32_15 = _backend("fp16", "iOS15", 6), _backend("fp32", "iOS15", 6)
FP16_17, FP32_17 = _backend("fp16", "iOS17", 8), _backend("fp32", "iOS17", 8)
FP16_18 = _backend("fp16", "iOS18", 9)
F32 = "dtype=<class 'numpy.float32'>"

CASES = [
    f"iOS14/test_recurrent.py::TestGRU::test_builder_to_backend_smoke[{FP16_15}-seq_len=3-batch_size=1-input_size=1"
    f"-hidden_size=2-has_bias=True-output_sequence=True-direction=reverse-activation_functions=['tanh', 'sigmoid']"
    f"-symbolic=False-{F32}]",
    f"iOS18/test_recurrent.py::TestGRU::test_builder_to_backend_smoke[{FP16_18}-seq_len=3-batch_size=1-input_size=1"
    f"-hidden_size=2-has_bias=True-output_sequence=True-direction=reverse-activation_functions=['sigmoid', 'tanh']"
    f"-symbolic=False-{F32}]",
    f"iOS14/test_recurrent.py::TestLSTM::test_numpy_numerical[{FP32_15}-input_dims=[8, 32, 32]-output_dim=1"
    "-activation=sigmoid-inner_activation=tanh-outer_activation=relu-return_seq=True-has_bias=False"
    f"-forget_bias=False-has_peephole=True-coupled_input_forget=False-clip=0.2-{F32}]",
    f"iOS14/test_recurrent.py::TestLSTM::test_builder_to_backend_smoke_unilstm[{FP16_15}-seq_len=8-batch_size=1"
    f"-input_size=1-hidden_size=1-has_bias=True-output_sequence=True-direction=reverse-symbolic=False-{F32}]",
    f"iOS14/test_recurrent.py::TestLSTM::test_builder_to_backend_smoke_bidirlstm[{FP16_15}-seq_len=8-batch_size=1"
    f"-input_size=1-hidden_size=2-has_bias=True-output_sequence=True-symbolic=False-{F32}]",
    f"iOS14/test_recurrent.py::TestRNN::test_builder_to_backend_smoke[{FP16_15}-seq_len=8-batch_size=1-input_size=1"
    f"-hidden_size=1-has_bias=True-output_sequence=True-direction=reverse-symbolic=False-{F32}]",
    f"iOS14/test_control_flow.py::TestList::test_builder_to_backend_smoke[{FP32_15}]",
    f"iOS14/test_control_flow.py::TestList::test_builder_to_backend_while[{FP16_15}]",
    f"iOS14/test_tensor_transformation.py::TestReverseSequence::test_builder_to_backend_smoke[{FP32_15}]",
    f"iOS14/test_tensor_transformation.py::TestReverseSequence::test_builder_to_backend_symbolic[{FP16_15}]",
    f"iOS17/test_image_resizing.py::TestCropResize::test_builder_to_backend_ios17[{FP32_17}-N=1]",
    f"iOS17/test_scatter_gather.py::TestScatter::test_ios17_invalid_indices[{FP16_17}-indices_val=[10, 0]"
    "-validate_indices=True-dynamic=True]",
    f"iOS17/test_scatter_gather.py::TestScatter::test_ios17_invalid_indices[{FP32_17}-indices_val=[-1, 0]"
    "-validate_indices=False-dynamic=False]",
]
# The box [2, 2, 1, 1] (normalized) lies outside the image; iOS15's crop_resize has no pad_value.
DECLINED = [f"iOS15/test_image_resizing.py::TestCropResize::test_builder_to_backend_smoke[{FP16_15}-is_symbolic=False]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("op_tests")
    op_tests = benchmark("op_tests")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_cases(op_tests, CASES + DECLINED, work, "op_tests.md")
    return code, op_tests.load_results(work), (work / "op_tests.md").read_text(), printed.getvalue()


def test_every_case_of_the_sample_predicts_and_passes(run):
    code, rows, _, _ = run
    assert sorted(rows) == sorted(CASES + DECLINED), "the sample did not run as chosen"
    wrong = {
        case: (row["outcome"], row.get("message", ""))
        for case, row in rows.items()
        if case in CASES and (row["outcome"] != "agree" or row["predictions"] < 1)
    }
    assert not wrong
    assert code == 0


def test_the_report_tables_the_sample_per_folder_and_precision(run):
    _, _, report, printed = run
    # folder | precision | cases | run | predicted | agree | documented | failed | xfail | declined | ...
    total, n = len(CASES) + len(DECLINED), len(CASES)
    assert f"| **all** | **all** | {total} | {total} | {n} | {n} | 0 | 0 | 0 | {len(DECLINED)} | 0 |" in report
    assert "| iOS17 | fp32 | 2 | 2 | 2 | 2 | 0 | 0 | 0 | 0 |" in report
    totals = f"| **all** | **all** | {total} | {total} | {n} | {n} | 0 | 0 | 0 | {len(DECLINED)} | 0 |"
    assert "| folder | precision | cases | run | predicted | agree |" in printed and totals in printed
    assert "## Failed after a prediction, unexplained\n\nNone." in report


def test_the_interpreter_declines_a_crop_resize_box_the_ios15_spec_leaves_undefined(run):
    _, rows, report, _ = run
    (row,) = (rows[case] for case in DECLINED)
    assert (row["outcome"], row["predictions"], row["error"]) == ("declined", 0, "UnsupportedOpError")
    assert benchmark("op_tests").category(row) == "declined"
    assert "## Declined by the interpreter" in report
    assert "height 3..6, outside the image's [0, 3]; before iOS16 (no pad_value)" in report


def test_a_failure_is_unexplained_unless_a_documented_cause_verifies_it():
    op_tests = benchmark("op_tests")
    fp32 = (
        f"iOS18/test_recurrent.py::TestGRU::test_builder_to_backend_smoke[{_backend('fp32', 'iOS18', 9)}"
        "-dtype=<class 'numpy.float16'>]"
    )
    message = (
        "Not equal to tolerance rtol=1e-05, atol=0.0001\nMax relative difference among violations: {}\n"
        " ACTUAL: array([[[0.6514]]], dtype=float16)"
    )
    within = {"nodeid": fp32, "outcome": "disagree", "predictions": 1, "message": message.format("0.0001824")}
    beyond = {**within, "message": message.format("0.01")}
    assert op_tests.category(within) == "documented"
    assert op_tests.category(beyond) == "failed"
    assert op_tests.category({**within, "nodeid": fp32.replace("fp32", "fp16")}) == "failed"
    assert op_tests.category({**within, "nodeid": fp32.replace("float16", "float32")}) == "failed"
    report = op_tests.render({"a": within, "b": beyond}, {"sample": 1, "date": "today"})
    assert "| **all** | **all** | 2 | 2 | 2 | 0 | 1 | 1 | 0 | 0 |" in report


def test_the_typed_expectation_is_documented_whatever_numpy_prints_around_it():
    op_tests = benchmark("op_tests")
    case = (
        f"iOS16/test_image_resizing.py::TestCropResize::test_builder_to_backend_ios16[{_backend('fp32', 'iOS16', 7)}"
        "-pad_value=1.0]"
    )
    report = "Not equal to tolerance rtol=1e-05, atol=0.0001\nMismatched elements: 1 / 12 (8.33%)\n"
    report += "Max absolute difference among violations: {}\n"
    numpy_23 = report + " ACTUAL: array([[[[[ 3.1     ,  5.2     ],"
    numpy_24 = (
        report + "First 5 mismatches are at indices:\n [0, 0, 0, 1, 1]: 7.900000095367432 (ACTUAL), 7.89900016784668"
    )
    row = {"nodeid": case, "outcome": "disagree", "predictions": 1}
    for message in (numpy_23, numpy_24):
        assert op_tests.category({**row, "message": message.format("0.00099993")}) == "documented"
        assert op_tests.category({**row, "message": message.format("0.0019999")}) == "failed"


def test_a_declined_op_counts_as_declined_however_its_row_was_recorded():
    category = benchmark("op_tests").category
    row = {"nodeid": DECLINED[0], "predictions": 0, "error": "UnsupportedOpError"}
    assert category({**row, "outcome": "declined"}) == "declined"
    assert category({**row, "outcome": "interpreter-error"}) == "declined"  # a row from before the outcome existed
    assert category({**row, "outcome": "interpreter-error", "error": "ValueError"}) == "not the interpreter's"
