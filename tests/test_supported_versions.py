"""The declared versions (pyproject.toml) and the tested matrix (benchmarks/matrix.py) agree, and what
coremltools 8 cannot do is said in one line."""

from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

import coremltools as ct
from benchmarks.matrix import CELLS, SUITES, Cell
from mil_passes.testing.models.real import FrontendLimitation, _frontend_limitation

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, which mypy (the test extra) requires there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCIES = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]


def accepted(package: str, version: str, python: str) -> bool:
    """Whether pyproject.toml's dependencies accept ``package==version`` on Python ``python``."""
    found = [
        r
        for r in DEPENDENCIES
        if r.name == package and (r.marker is None or r.marker.evaluate({"python_version": python}))
    ]
    return bool(found) and all(r.specifier.contains(version, prereleases=True) for r in found)


@pytest.mark.parametrize("cell", CELLS, ids=[cell.name for cell in CELLS])
def test_every_tested_combination_is_declared(cell: Cell):
    assert accepted("coremltools", cell.coremltools, cell.python)
    numpy_version = cell.numpy.lstrip("=") if cell.numpy.startswith("==") else None
    assert numpy_version is None or accepted("numpy", numpy_version, cell.python)


def test_what_is_declared_was_tested_or_refused():
    assert not accepted("coremltools", "8.3.0", "3.13")  # no wheel: the sdist cannot save an ML Program
    assert not accepted("coremltools", "8.2.0", "3.11")  # never tested
    assert not accepted("numpy", "2.4.0", "3.11")  # both frontends' int() of a size-1 array
    pythons = {cell.python for cell in CELLS}
    assert pythons == {"3.10", "3.11", "3.12", "3.13"}
    assert {(cell.coremltools, cell.python) for cell in CELLS} >= {
        ("8.3.0", p) for p in pythons if accepted("coremltools", "8.3.0", p)
    } | {("9.0", p) for p in pythons}


def test_the_subsets_name_test_files_that_exist():
    for paths in SUITES.values():
        assert all((ROOT / path).exists() for path in paths)


def test_coremltools_8_frontend_limit_is_one_line_and_9_passes_it_through():
    refused = ValueError("dtype attribute is not a valid dtype instance")
    limitation = _frontend_limitation(refused)
    if ct.__version__.startswith("9."):
        assert limitation is None
    else:
        assert isinstance(limitation, FrontendLimitation)
        message = str(limitation)
        assert "\n" not in message and f"coremltools {ct.__version__}" in message and "coremltools 9 can" in message
        assert np.__version__ in message
    assert _frontend_limitation(ValueError("some other error")) is None


def test_coremltools_8_expand_to_zero_reps_is_named_in_one_line():
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol

    from mil_passes.testing.models.real import _wrong_expand

    def build(reps_of):
        @mb.program(input_specs=[mb.TensorSpec((1, get_new_symbol()))], opset_version=ct.target.iOS17)
        def prog(x):
            return mb.tile(x=x, reps=reps_of(x), name="mask")

        return prog

    wrong = _wrong_expand(build(lambda x: mb.real_div(x=np.array([1, -1], np.int32), y=mb.shape(x=x))))
    assert isinstance(wrong, FrontendLimitation)
    assert "\n" not in str(wrong) and "tile 'mask'" in str(wrong) and "[1, -1]" in str(wrong)
    assert _wrong_expand(build(lambda x: mb.real_div(x=mb.shape(x=x), y=mb.shape(x=x)))) is None
