"""coremltools' own state tests, numeric on Linux under the pytest plugin: the MIL op tests of
iOS18 states (``ops/tests/iOS18/test_states.py``, expected outputs over several predictions of one
``make_state()``) and the torch frontend's stateful models (``test_torch_stateful_model.py``, which
predicts each converted model once with a fresh state and checks the outputs' names)."""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from mil_passes.reference.stand_in import coreml_present  # noqa: E402

pytestmark = pytest.mark.skipif(coreml_present(), reason="Core ML is present: the stand-in stays off")

FILES = (
    "converters/mil/mil/ops/tests/iOS18/test_states.py",
    "converters/mil/frontend/torch/test/test_torch_stateful_model.py",
)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    import coremltools

    package = Path(coremltools.__file__).parent
    work = tmp_path_factory.mktemp("state_tests")
    env = dict(os.environ, PYMIL_TEST_TARGETS="mlprogram", INCLUDE_MIL_FP32_UNIT_TESTS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "mil_passes.reference.pytest_plugin",
        *(str(package / name) for name in FILES),
        f"--reference-outcomes={work / 'outcomes.jsonl'}",
        "--reference-timeout=300",
    ]
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(line) for line in (work / "outcomes.jsonl").read_text().splitlines()]
    return result, rows


def _file(row: dict) -> str:
    return row["nodeid"].split("::")[0].rsplit("/", 1)[-1]


def test_every_state_test_runs_and_none_fails(outcomes):
    result, rows = outcomes
    counts = collections.Counter((_file(row), row["outcome"]) for row in rows)
    assert result.returncode == 0, result.stdout[-2000:]
    assert set(outcome for _, outcome in counts) <= {"agree", "converted"}, counts
    assert not any(outcome == "skipped" for _, outcome in counts)


def test_at_least_ten_predicted_cases_and_the_stress_tests_step_states(outcomes):
    _, rows = outcomes
    predicted = [row for row in rows if row["predictions"] > 0]
    assert len(predicted) >= 10
    by_file = collections.Counter(_file(row) for row in predicted)
    assert by_file["test_states.py"] >= 12 and by_file["test_torch_stateful_model.py"] >= 8
    stress = [row for row in rows if "test_coreml_update_stress" in row["nodeid"]]
    assert len(stress) == 6 and all(row["outcome"] == "agree" and row["predictions"] == 2 for row in stress)
