"""A fixed sample of the peer suite: coremltools' own torch-op tests, numeric through the interpreter.

Runs ``benchmarks/peer_suite.py`` on a few cases chosen across op families (convolution, pooling,
normalization, resampling, indexing, reductions, sorting, recurrent, random, ...): as shipped and
with ``mil_passes.pipeline()``, in parallel. Every case must agree with torch in both runs.
``make peer-suite`` runs the large sample.
"""

import pytest

pytest.importorskip("torch")
pytest.importorskip("PIL", reason="coremltools' test utilities import Pillow")

from suite_helpers import benchmark, run_cases  # noqa: E402

FP16 = "compute_unit=ComputeUnit.CPU_ONLY-backend=('mlprogram', 'fp16')-frontend=TorchFrontend.TORCHSCRIPT"

CASES = [
    f"TestConv::test_convolution3d[{FP16}-padding=1-stride=1-depth=3-height=5-width=4-in_channels=3"
    "-out_channels=3-kernel_size=1-dilation=3-bias=True]",
    f"TestConvTranspose::test_convolution_transpose1d[{FP16}-width=5-in_channels=3-out_channels=3"
    "-kernel_size=1-stride=3-padding=0-dilation=1_1]",
    f"TestBatchNorm::test_batchnorm1d_rank2[{FP16}-shape=(1, 10)-eps=0.1-affine=True]",
    f"TestGroupNorm::test_groupnorm_rank3_input[{FP16}-group_features=(1, 1)-eps=0.1-affine=False]",
    f"TestMaxPool::test_max_pool1d[{FP16}-input_shape=(1, 3, 15)-kernel_size=3-stride=2-padding=0-ceil_mode=True]",
    f"TestAdaptiveAvgPool::test_adaptive_avg_pool2d[{FP16}-output_size=(1, 1)-magnification=1-delta=0-depth=3-n=1]",
    f"TestUpsample::test_upsample_linear1d_with_output_size[{FP16}-output_size=3-align_corners=True]",
    "TestGridSample::test[compute_unit=ComputeUnit.CPU_ONLY-backend=('mlprogram', 'fp16')"
    "-data_grid_shapes=[(1, 1, 3, 3), (1, 3, 3, 2)]-mode=nearest-padding_mode=reflection-align_corners=True]",
    f"TestActivation::test_silu[{FP16}-shape=(1, 3, 4)]",
    f"TestEinsum::test_binary_einsum[{FP16}-equation=ij,ij->-reverse_input_order=False-dynamic=False]",
    f"TestLogicalAnd::test_logical_and[{FP16}-x_y=([2, 0, -1, 0, 5], [1, 1, 0, 0, -5])]",
    f"TestScatter::test_scatter_with_reduce[{FP16}-shapes_dims=[(2, 3), (1, -1)]-mode=add-minimum_deployment_target=8]",
    f"TestIndex::test_index_int_index_case_9[{FP16}-input_dtype=<class 'numpy.bool'>-shape=(2, 3, 4, 5)"
    "-minimum_deployment_target=8]",
    f"TestTopk::test_topk[{FP16}-largest=True-sort=True-dynamic=False-shape_dim_k=((10, 3, 4), 2, 2)]",
    f"TestCumSum::test_logcumsumexp[{FP16}-axis=1]",
    f"TestLinAlgMatrixNorms::test_norm[{FP16}-shape=(1, 3, 5, 6)-order=fro-keepdim=False-dim=(0, -1)]",
    f"TestPixelShuffle::test_pixel_shuffle[{FP16}-batch_size=1-CHW=(1, 4, 4)-r=4]",
    "TestLSTM::test_lstm[compute_unit=ComputeUnit.CPU_ONLY-backend=('mlprogram', 'fp16')-input_size=1"
    "-hidden_size=1-num_layers=1-bias=False-batch_first=True-dropout=0.3-bidirectional=False]",
    "TestRNN::test_rnn[compute_unit=ComputeUnit.CPU_ONLY-backend=('mlprogram', 'fp16')-input_size=1"
    "-hidden_size=1-num_layers=1-bias=False-batch_first=True-dropout=0.3-activation=tanh]",
    # its zero state has 10 rows (the first sequence length) for a batch of 3: Core ML runs it
    "TestLSTMWithPackedSequence::test_lstm[compute_unit=ComputeUnit.CPU_ONLY-backend=('mlprogram', 'fp16')"
    "-pack_batch_first=True-pad_batch_first=False-LSTM_batch_first=False-pad_value=0]",
    "TestRandLike::test_rand_like[compute_unit=ComputeUnit.CPU_ONLY-frontend=TorchFrontend.TORCHSCRIPT"
    "-backend=('mlprogram', 'fp16')-shape=(1,)-dtype=torch.float64]",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("peer_suite")
    peer_suite = benchmark("peer_suite")
    code = run_cases(peer_suite, CASES, work, "peer_suite.md")
    results = {run: peer_suite.load_rows(work / f"{run}.jsonl") for run in peer_suite.RUNS}
    return code, results, (work / "peer_suite.md").read_text()


def test_every_case_of_the_sample_agrees_with_torch_in_both_runs(runs):
    code, results, _ = runs
    for run, rows in results.items():
        assert sorted(rows) == sorted(CASES), f"{run}: the sample did not run as chosen"
        wrong = {
            case: (row["outcome"], row.get("message", ""))
            for case, row in rows.items()
            if row["outcome"] != "agree" or row["predictions"] < 1
        }
        assert not wrong, f"{run}: {wrong}"
    assert code == 0


def test_the_package_passes_rewrite_real_conversions_of_the_sample(runs):
    _, results, report = runs
    rewritten = {}
    for row in results["pipeline"].values():
        for name, count in row.get("rewrites", {}).items():
            rewritten[name] = rewritten.get(name, 0) + count
    assert rewritten.get("webnn::fold_shape_ops", 0) > 0  # the einsum's shape arithmetic
    assert rewritten.get("webnn::canonicalize_uint8_select", 0) > 0  # logical_and's numeric truth values
    assert not any(row.get("rewrites") for row in results["shipped"].values())
    assert "## What the package's passes rewrote" in report and "`webnn::fold_shape_ops`" in report


def test_the_report_states_the_numbers(runs):
    _, _, report = runs
    assert f"| as shipped | {len(CASES)} | {len(CASES)} | 0 |" in report
    assert f"| with mil_passes.pipeline() | {len(CASES)} | {len(CASES)} | 0 |" in report
    assert "Failures introduced by `mil_passes.pipeline()`" in report and "**0**" in report


def test_a_failure_the_pipeline_introduces_is_reported_and_fails_the_run():
    peer_suite = benchmark("peer_suite")
    agree = {"outcome": "agree", "class": "TestX", "predictions": 1}
    broken = {"outcome": "disagree", "class": "TestX", "predictions": 1, "message": "Mismatched elements: 1 / 4"}
    results = {"shipped": {"TestX::test_a": agree}, "pipeline": {"TestX::test_a": broken}}
    assert peer_suite.introduced_failures(results) == ["TestX::test_a"]
    report = peer_suite.render(results, {"sample": 1, "date": "today"})
    assert "| `TestX::test_a` | agree | disagree |" in report
    assert "**unclassified**" in report  # a new disagreement is never silently explained away
