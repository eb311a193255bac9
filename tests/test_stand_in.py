"""stand_in_for_coreml(): MLModel.predict and coremltools' test utilities on the interpreter, and the
pytest plugin that turns it on for a session."""

import importlib
import importlib.util
import json
import sys
import types

import numpy as np
import pytest
import coremltools as ct
import coremltools.models.utils as coremltools_utils
from coremltools.converters.mil import Builder as mb
from coremltools.models.model import MLModel

from mil_passes.reference import stand_in as stand_in_module
from mil_passes.reference import stand_in_for_coreml
from mil_passes.reference.kernels import KERNELS
from mil_passes.reference.stand_in import GATED_MODULES, STAND_IN_MACOS_VERSION, coreml_present

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.skipif(coreml_present(), reason="Core ML is present: the stand-in stays off")


def _model():
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=x, y=1.0, name="y")

    return ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS17,
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )


def test_predict_answers_through_the_interpreter_and_is_restored_after():
    model = _model()
    core_ml_predict = MLModel.__dict__["predict"]
    with pytest.raises(Exception, match="only supported on macOS|Unable to load CoreML"):
        model.predict({"x": np.zeros((2, 3), np.float32)})
    with stand_in_for_coreml() as stand_in:
        assert stand_in.active
        out = model.predict({"x": np.zeros((2, 3), np.float32)})
        np.testing.assert_array_equal(out["y"], np.ones((2, 3), np.float32))
        assert stand_in.predictions == 1
    assert MLModel.__dict__["predict"] is core_ml_predict


def test_a_declined_prediction_is_not_counted_as_answered(monkeypatch):
    from mil_passes.reference import UnsupportedOpError
    from mil_passes.reference.kernels import KERNELS

    def refuse(op, args):
        raise UnsupportedOpError(op.op_type, op.name, "declined for the test")

    model = _model()
    with stand_in_for_coreml() as stand_in:
        monkeypatch.setitem(KERNELS, "add", refuse)
        with pytest.raises(UnsupportedOpError, match="declined for the test"):
            model.predict({"x": np.zeros((2, 3), np.float32)})
        assert (stand_in.predictions, stand_in.declined) == (0, 1)
        monkeypatch.setitem(KERNELS, "add", lambda op, args: 1 / 0)  # a kernel bug is an answer to explain
        with pytest.raises(ZeroDivisionError):
            model.predict({"x": np.zeros((2, 3), np.float32)})
        assert (stand_in.predictions, stand_in.declined) == (1, 1)


def test_everything_is_restored_when_the_block_raises():
    core_ml_predict = MLModel.__dict__["predict"]
    with pytest.raises(RuntimeError, match="inside"):
        with stand_in_for_coreml():
            raise RuntimeError("inside")
    assert MLModel.__dict__["predict"] is core_ml_predict


def _stateful_model():
    @mb.program(
        input_specs=[mb.StateTensorSpec((2,), dtype=ct.converters.mil.mil.types.fp16)], opset_version=ct.target.iOS18
    )
    def prog(counter):
        return mb.coreml_update_state(state=counter, value=mb.add(x=mb.read_state(input=counter), y=np.float16(1)))

    return ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18, skip_model_load=True)


def test_make_state_and_stateful_predict_run_on_the_stand_in_and_are_restored_after():
    model = _stateful_model()
    core_ml_make_state = MLModel.__dict__["make_state"]
    with pytest.raises(Exception, match="macOS 15"):
        model.make_state()
    with stand_in_for_coreml() as stand_in:
        state = model.make_state()
        assert isinstance(state, ct.models.model.MLState)
        outputs = [next(iter(model.predict({}, state=state).values())) for _ in range(3)]
        assert [o.tolist() for o in outputs] == [[1, 1], [2, 2], [3, 3]]
        np.testing.assert_array_equal(state.read_state("counter"), [3, 3])
        assert stand_in.predictions == 3
    assert MLModel.__dict__["make_state"] is core_ml_make_state


def test_nothing_is_patched_where_core_ml_is_present(monkeypatch):
    monkeypatch.setattr(stand_in_module, "coreml_present", lambda: True)
    core_ml_predict = MLModel.__dict__["predict"]
    with stand_in_for_coreml() as stand_in:
        assert not stand_in.active
        assert MLModel.__dict__["predict"] is core_ml_predict
        assert stand_in.patched_modules == []


def test_gated_modules_imported_later_are_patched_by_refresh_and_restored(monkeypatch):
    fake = types.ModuleType("fake_gated_testing_utils")
    fake._IS_MACOS = False
    fake.coremltoolsutils = coremltools_utils
    monkeypatch.setattr(stand_in_module, "GATED_MODULES", ("fake_gated_testing_utils",))
    with stand_in_for_coreml() as stand_in:
        assert stand_in.patched_modules == []
        monkeypatch.setitem(sys.modules, "fake_gated_testing_utils", fake)
        stand_in.refresh()
        assert fake._IS_MACOS is True
        assert fake.coremltoolsutils._macos_version() == STAND_IN_MACOS_VERSION
        assert fake.coremltoolsutils._has_custom_layer is coremltools_utils._has_custom_layer
        assert coremltools_utils._macos_version() == ()  # the real module is untouched
    assert fake._IS_MACOS is False
    assert fake.coremltoolsutils is coremltools_utils


# -- coremltools' own torch test utilities -----------------------------------------------------

# coremltools' torch test utilities import torch and Pillow.
needs_test_utilities = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("PIL") is None,
    reason="coremltools' torch test utilities need torch and Pillow",
)


@pytest.fixture
def torch_testing_utils():
    return importlib.import_module("coremltools.converters.mil.frontend.torch.test.testing_utils")


def _run_compare(torch_testing_utils):
    import torch

    class AddRelu(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x + y)

    return torch_testing_utils.TorchBaseTest.run_compare_torch(
        [(2, 3), (2, 3)],
        AddRelu(),
        backend=("mlprogram", "fp32"),
    )


@needs_test_utilities
def test_convert_and_compare_returns_early_without_the_stand_in(torch_testing_utils):
    *_, coreml_results, _, _ = _run_compare(torch_testing_utils)
    assert coreml_results is None


@needs_test_utilities
def test_convert_and_compare_compares_numbers_under_the_stand_in(torch_testing_utils):
    with stand_in_for_coreml() as stand_in:
        assert GATED_MODULES[0] in stand_in.patched_modules
        *_, coreml_results, _, _ = _run_compare(torch_testing_utils)
        assert coreml_results is not None and stand_in.predictions == 1
    assert torch_testing_utils._IS_MACOS is False
    assert torch_testing_utils.coremltoolsutils is coremltools_utils


@needs_test_utilities
def test_a_wrong_kernel_makes_convert_and_compare_fail(monkeypatch, torch_testing_utils):
    add = KERNELS["add"]
    monkeypatch.setitem(KERNELS, "add", lambda op, args: add(op, args) + 1)
    with stand_in_for_coreml():
        with pytest.raises(AssertionError, match="Not equal to tolerance"):
            _run_compare(torch_testing_utils)


# -- the pytest plugin -------------------------------------------------------------------------

INNER_TESTS = """
import time
import numpy as np
import pytest
import torch
import coremltools as ct
from coremltools.converters.mil.frontend.torch.test.testing_utils import TorchBaseTest
from mil_passes.reference import UnsupportedOpError
from mil_passes.reference.kernels import KERNELS


class AddRelu(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y)


class CacheWindow(torch.nn.Module):
    def forward(self, cache, x):
        return torch.cat([cache, x], dim=-1)[:, :, -8:]


def compare():
    return TorchBaseTest.run_compare_torch([(2, 3), (2, 3)], AddRelu(), backend=("mlprogram", "fp32"))


class TestOutcomes:
    def test_agree(self):
        compare()

    def test_cache_window(self):
        TorchBaseTest.run_compare_torch([(1, 4, 8), (1, 4, 7)], CacheWindow(), backend=("mlprogram", "fp32"))

    def test_disagree(self, monkeypatch):
        add = KERNELS["add"]
        monkeypatch.setitem(KERNELS, "add", lambda op, args: add(op, args) + 1)
        compare()

    def test_interpreter_error(self, monkeypatch):
        def broken(op, args):
            raise ValueError("broken kernel")
        monkeypatch.setitem(KERNELS, "add", broken)
        compare()

    def test_conversion_failure(self):
        traced = torch.jit.trace(AddRelu(), (torch.rand(2, 3), torch.rand(2, 3)))
        ct.convert(traced, inputs=[ct.TensorType(shape=(2, 3))], convert_to="mlprogram")

    def test_converted(self):
        traced = torch.jit.trace(AddRelu(), (torch.rand(2, 3), torch.rand(2, 3)))
        ct.convert(traced, inputs=[ct.TensorType(shape=(2, 3)), ct.TensorType(shape=(2, 3))], convert_to="mlprogram")

    def test_failed(self):
        assert 1 == 2

    def test_skipped(self):
        pytest.skip("not here")

    def test_xfail(self):
        pytest.xfail("known to fail")

    def test_neural_network(self):
        TorchBaseTest.run_compare_torch([(2, 3), (2, 3)], AddRelu())  # the suite's default backend

    def test_declined(self, monkeypatch):
        def refuse(op, args):
            raise UnsupportedOpError(op.op_type, op.name, "not specified")
        monkeypatch.setitem(KERNELS, "add", refuse)
        compare()

    def test_timeout(self):
        time.sleep(3)
"""


def _outcomes(pytester, *args):
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(
        "-p",
        "mil_passes.reference.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "--reference-outcomes=outcomes.jsonl",
        *args,
    )
    rows = [json.loads(line) for line in (pytester.path / "outcomes.jsonl").read_text().splitlines()]
    return result, {row["nodeid"].rsplit("::", 1)[1]: row for row in rows}


@needs_test_utilities
def test_plugin_classifies_each_outcome(pytester):
    result, rows = _outcomes(pytester, "-k", "not timeout and not cache")
    assert {name: row["outcome"] for name, row in rows.items()} == {
        "test_agree": "agree",
        "test_disagree": "disagree",
        "test_interpreter_error": "interpreter-error",
        "test_conversion_failure": "conversion-failure",
        "test_converted": "converted",
        "test_failed": "failed",
        "test_skipped": "skipped",
        "test_xfail": "xfail",
        "test_neural_network": "neural-network",
        "test_declined": "declined",
    }
    assert rows["test_declined"]["predictions"] == 0 and "not specified" in rows["test_declined"]["message"]
    assert rows["test_agree"]["predictions"] == 1 and rows["test_agree"]["class"] == "TestOutcomes"
    assert "Mismatched elements" in rows["test_disagree"]["message"]
    assert rows["test_skipped"]["reason"].endswith("not here")
    assert rows["test_xfail"]["reason"] == "known to fail"
    assert MLModel.__dict__["predict"].__module__ != stand_in_module.__name__  # restored after the session


@needs_test_utilities
def test_plugin_fails_a_test_that_outlives_the_timeout(pytester):
    _, rows = _outcomes(pytester, "--reference-timeout=0.5", "-k", "timeout")
    assert rows["test_timeout"]["outcome"] == "timeout"


@needs_test_utilities
def test_plugin_samples_every_nth_test(pytester):
    _, rows = _outcomes(pytester, "--reference-sample=3", "-k", "not timeout and not cache")
    assert sorted(rows) == ["test_agree", "test_conversion_failure", "test_declined", "test_skipped"]  # 1/3 of 10


@needs_test_utilities
def test_plugin_gives_every_conversion_the_package_pipeline(pytester, monkeypatch):
    pipeline_module = importlib.import_module("mil_passes.schedule")  # lazily imported: maybe not yet
    seen = []
    real = pipeline_module.pipeline
    monkeypatch.setattr(pipeline_module, "pipeline", lambda base=None: seen.append(base) or real(base))
    _, rows = _outcomes(pytester, "--mil-passes-pipeline", "-k", "test_agree or test_converted or cache")
    assert rows["test_agree"]["outcome"] == "agree" and "rewrites" not in rows["test_agree"]
    assert len(seen) == 3 and all(isinstance(base, ct.PassPipeline) for base in seen)
    # The streaming-cache window is rewritten by the package's pass, and still agrees with torch.
    assert rows["test_cache_window"]["outcome"] == "agree"
    assert rows["test_cache_window"]["rewrites"] == {"webnn::concat_slice_to_slice_concat": 1}


@needs_test_utilities
def test_plugin_without_the_pipeline_option_leaves_conversions_alone(pytester):
    _, rows = _outcomes(pytester, "-k", "cache")
    assert rows["test_cache_window"]["outcome"] == "agree" and "rewrites" not in rows["test_cache_window"]


@needs_test_utilities
def test_plugin_names_a_failing_pass(pytester, monkeypatch):
    import mil_passes.rewriter as rewriter

    def explode(*args, **kwargs):
        raise RuntimeError("pass exploded")

    monkeypatch.setattr(rewriter, "apply_patterns", explode)
    _, rows = _outcomes(pytester, "--mil-passes-pipeline", "-k", "test_agree")
    assert rows["test_agree"]["outcome"] == "pass-error"
    assert "pass exploded" in rows["test_agree"]["message"]


# coremltools' MIL op tests compare through run_compare_builder (ops/tests/testing_utils.py).
OP_TESTS = """
import numpy as np
import pytest
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.ops.tests.testing_utils import run_compare_builder
from coremltools.converters.mil.testing_reqs import BackendConfig
from mil_passes.reference.kernels import KERNELS

BACKEND = BackendConfig(backend="mlprogram", precision="fp32", opset_version=ct.target.iOS17)
X = np.array([[1.0, -2.0]], np.float32)


def compare(build, expected):
    run_compare_builder(build, {"x": mb.placeholder(shape=X.shape)}, {"x": X}, [(1, 2, types.fp32)], [expected],
                        backend=BACKEND)


def test_op_agree():
    compare(lambda x: mb.add(x=x, y=1.0), X + 1)


def test_op_disagree(monkeypatch):
    add = KERNELS["add"]
    monkeypatch.setitem(KERNELS, "add", lambda op, args: add(op, args) + 1)
    compare(lambda x: mb.add(x=x, y=1.0), X + 1)


def test_op_invalid_index_fails_the_prediction_as_core_ml_does():
    build = lambda x, i: mb.scatter(data=x, indices=i, updates=np.ones((1, 2), np.float32), axis=1,
                                    validate_indices=True)
    placeholders = {"x": mb.placeholder(shape=X.shape), "i": mb.placeholder(shape=(2,), dtype=types.int32)}
    with pytest.raises(RuntimeError, match="Unable to compute the prediction using ML Program"):
        run_compare_builder(build, placeholders, {"x": X, "i": np.array([0, 3], np.int32)}, [(1, 2, types.fp32)],
                            [X], backend=BACKEND)
"""


@needs_test_utilities
def test_plugin_classifies_the_mil_op_tests_comparisons(pytester):
    pytester.makepyfile(test_ops=OP_TESTS)
    pytester.runpytest_inprocess(
        "-p", "mil_passes.reference.pytest_plugin", "-p", "no:cacheprovider", "--reference-outcomes=outcomes.jsonl"
    )
    rows = [json.loads(line) for line in (pytester.path / "outcomes.jsonl").read_text().splitlines()]
    outcomes = {row["nodeid"].rsplit("::", 1)[1]: (row["outcome"], row["predictions"]) for row in rows}
    assert outcomes == {
        "test_op_agree": ("agree", 1),
        "test_op_disagree": ("disagree", 1),
        "test_op_invalid_index_fails_the_prediction_as_core_ml_does": ("agree", 1),
    }
    disagree = next(row for row in rows if row["outcome"] == "disagree")
    assert "Max relative difference" in disagree["message"]  # numpy's whole report is kept


@needs_test_utilities
def test_plugin_shards_split_the_sample_between_sessions(pytester):
    names = []
    for shard in ("0/2", "1/2"):
        _, rows = _outcomes(
            pytester, "--reference-sample=2", f"--reference-shard={shard}", "-k", "not timeout and not cache"
        )
        names.append(sorted(rows))
    _, whole = _outcomes(pytester, "--reference-sample=2", "-k", "not timeout and not cache")
    assert not set(names[0]) & set(names[1])
    assert sorted(names[0] + names[1]) == sorted(whole) and len(whole) == 5


def test_the_state_tests_see_apple_silicon_at_run_time_and_macos_15_while_imported(monkeypatch):
    import platform

    from mil_passes.reference.stand_in import APPLE_SILICON_MODULES, MACOS_15_AT_IMPORT, macos_while_importing

    fake = types.ModuleType(APPLE_SILICON_MODULES[0])
    fake.platform = platform
    monkeypatch.setitem(sys.modules, APPLE_SILICON_MODULES[0], fake)
    with stand_in_for_coreml():
        assert fake.platform.machine() == "arm64" and fake.platform.system() == platform.system()
    assert fake.platform is platform
    real_version = ct.utils._macos_version()
    with macos_while_importing(f"/site-packages/coremltools/{MACOS_15_AT_IMPORT[0]}"):
        assert ct.utils._macos_version() == STAND_IN_MACOS_VERSION
    with macos_while_importing("/elsewhere/test_other.py"):
        assert ct.utils._macos_version() == real_version
    assert ct.utils is coremltools_utils
