"""The command starts without the frameworks coremltools probes for; ``list`` without coremltools."""

import json
import subprocess
import sys
import textwrap

import pytest

from mil_passes.cli.pass_list import pass_rows
from mil_passes.cli.optional_frameworks import OPTIONAL_FRAMEWORKS, optional_frameworks_refused


def run_python(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, returned parsed."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def small_package(tmp_path_factory):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec((1, 4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reduce_sum(x=mb.relu(x=mb.add(x=x, y=1.0)), axes=[-1], name="out")

    path = tmp_path_factory.mktemp("startup") / "small.mlpackage"
    ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17, skip_model_load=True).save(
        str(path)
    )
    return str(path)


FRESH_MAIN = """
    import contextlib, io, json, sys
    from mil_passes.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        status = main({argv!r})
    print(json.dumps({{"status": status, "loaded": sorted(
        m for m in sys.modules if m.partition(".")[0] in {frameworks!r} or m.partition(".")[0] == "coremltools")}}))
"""


def loaded_after(argv: list[str]) -> tuple[int, set[str]]:
    report = run_python(FRESH_MAIN.format(argv=argv, frameworks=sorted(OPTIONAL_FRAMEWORKS)))
    return report["status"], {name.partition(".")[0] for name in report["loaded"]}


def test_lint_in_a_fresh_process_loads_no_framework(small_package):
    pytest.importorskip("torch", reason="only meaningful where coremltools would import torch")
    status, loaded = loaded_after(["lint", small_package])
    assert status == 0
    assert "coremltools" in loaded
    assert not loaded & {"torch", "transformers", "torchvision", "tensorflow"}, loaded


def test_optimize_in_a_fresh_process_loads_no_framework(small_package, tmp_path):
    status, loaded = loaded_after(["optimize", small_package, "-o", str(tmp_path / "out.mlpackage"), "--quiet"])
    assert status == 0
    assert not loaded - {"coremltools"}, loaded


def test_list_does_not_import_coremltools():
    status, loaded = loaded_after(["list"])
    assert status == 0 and loaded == set()


def test_importing_the_package_imports_no_coremltools_and_registers_once_it_is():
    report = run_python(
        """
        import json, sys
        import mil_passes
        before = "coremltools" in sys.modules
        from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
        registered = [name for name in ("webnn::fold_shape_ops", "webnn::rename_duplicate_temporaries")
                      if name in PASS_REGISTRY]
        print(json.dumps({"before": before, "registered": registered, "names": list(mil_passes.PASS_NAMES)}))
        """
    )
    assert report["before"] is False
    assert report["registered"] == ["webnn::fold_shape_ops", "webnn::rename_duplicate_temporaries"]
    assert report["names"] == [name for name, _ in pass_rows()]


@pytest.mark.parametrize("module", ["mil_passes.ir", "mil_passes.testing", "mil_passes.reference", "mil_passes.lint"])
def test_a_submodule_that_imports_coremltools_first_still_registers_the_passes(module):
    # The module is half-initialized when coremltools finishes; the passes import it, so they
    # register once it is done.
    report = run_python(
        f"""
        import json, sys
        import {module}
        from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
        print(json.dumps({{"registered": "webnn::fold_shape_ops" in PASS_REGISTRY,
                          "finders": [type(f).__name__ for f in sys.meta_path]}}))
        """
    )
    assert report["registered"] is True
    assert "_WhenSettled" not in report["finders"]


def test_pipeline_stays_the_function_when_its_module_is_imported_first():
    report = run_python(
        """
        import json
        import mil_passes
        from mil_passes.runner import run_passes  # imports mil_passes/schedule.py first
        print(json.dumps({"callable": callable(mil_passes.pipeline),
                          "passes": len(mil_passes.pipeline().passes)}))
        """
    )
    assert report["callable"] is True and report["passes"] > 0


def test_the_declarations_read_from_source_are_the_imported_modules_own():
    from mil_passes.declaration import PASSES_DIR, declared
    from mil_passes.passes import DECLARATIONS

    # every public module of passes/ declares its pass (its private helpers start with "_")
    assert declared() == DECLARATIONS and len(DECLARATIONS) == len(list(PASSES_DIR.glob("[!_]*.py")))


def test_frameworks_are_refused_only_while_coremltools_is_first_imported(monkeypatch):
    import importlib

    monkeypatch.delitem(sys.modules, "coremltools", raising=False)
    monkeypatch.delitem(sys.modules, "xgboost", raising=False)
    with optional_frameworks_refused() as refused:
        assert refused is True
        with pytest.raises(ModuleNotFoundError, match="does not load xgboost"):
            importlib.import_module("xgboost")
    assert not any(type(f).__name__ == "_Refuse" for f in sys.meta_path)


def test_nothing_is_refused_once_coremltools_is_imported():
    import coremltools  # noqa: F401

    with optional_frameworks_refused() as refused:
        assert refused is False
