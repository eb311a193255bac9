"""The models extra leaves transformers importable: torchvision sits apart (pyproject.toml says why)."""

import importlib.util
import subprocess
import sys

import pytest

from mil_passes.testing.models.real import VISION_DIR, torchvision_available


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the models extra")
def test_transformers_llama_imports_in_a_fresh_interpreter():
    run = subprocess.run(
        [sys.executable, "-c", "from transformers import LlamaForCausalLM; print(LlamaForCausalLM.__name__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "LlamaForCausalLM"


def test_torchvision_is_not_in_site_packages_and_is_found_apart():
    if not (VISION_DIR / "torchvision").is_dir():
        pytest.skip("torchvision not installed (make test installs it in .venv/torchvision-models)")
    fresh = "import importlib.util; print(importlib.util.find_spec('torchvision') is None)"
    run = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "True", "torchvision in site-packages breaks transformers"
    assert (VISION_DIR / "torchvision").is_dir()
    assert torchvision_available()
