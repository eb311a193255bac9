"""Hypothesis profiles: a bounded one for CI (default) and a deep one (HYPOTHESIS_PROFILE=deep)."""

import os
import warnings

from hypothesis import HealthCheck, settings

warnings.filterwarnings("ignore", message=".*has not been tested with coremltools.*")

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
