"""benchmarks/oracle.py on a tiny torch model: the figures it takes, the ratios and the report.

No timing is asserted: a tiny model measures nothing worth comparing.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import oracle, oracle_models

torch = pytest.importorskip("torch")


def _tiny() -> oracle_models.OracleModel:
    def build():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten())

    return oracle_models.OracleModel(
        "tiny", build, lambda rng: {"image": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    )


def test_a_tiny_model_is_timed_and_verified(tmp_path):
    prepared = oracle_models.prepare(_tiny(), tmp_path)
    assert prepared.package.exists() and set(prepared.programs) == {"fp32", "fp16"}
    assert "cast" in str(prepared.programs["fp16"]) and "cast" not in str(prepared.programs["fp32"])
    figures = oracle.ModelFigures("tiny")
    figures.torch, figures.interpreter = oracle.time_interpreter(prepared, ("fp32", "fp16"), repeats=1)
    assert figures.torch > 0 and set(figures.interpreter) == {"fp32", "fp16"}
    oracle.time_verify(figures, prepared.package)
    assert figures.verify > 0 and figures.optimize > 0 and figures.culprit is None
    assert figures.ratio("verify") == figures.verify / figures.optimize


def test_the_report_names_every_target_and_each_miss():
    fast = oracle.ModelFigures("a", 1.0, {"fp32": 2.0, "fp16": 3.0}, verify=10.0, verify_wall=12.0, optimize=1.0)
    slow = oracle.ModelFigures(
        "gpt2_124m", 1.0, {"fp32": 3.0, "fp16": 3.5}, verify=90.0, verify_wall=70.0, optimize=5.0
    )
    results = oracle.checks([fast, slow])
    assert [ok for _, ok in results] == [False, True, False, False]
    assert results[0][0] == "interpreter fp32 ÷ torch ≤ 2.5x: worst 3.00x (gpt2_124m) MISSED"
    assert results[2][0] == "verify ÷ optimize ≤ 15x: worst 18.00x (gpt2_124m) MISSED"
    assert results[3][0].startswith("GPT-2 124M verified in under 60 s: 70.0 s wall")
    text = oracle.markdown([fast, slow], "context")
    assert "| a | 1.000 | 2.000 | 2.00x | 3.000 | 3.00x | 1.0 | 10.0 | 10.00x |" in text
    assert oracle.ModelFigures("b", 1.0).ratio("fp32") is None
