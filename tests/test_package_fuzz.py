"""The package mutation fuzzer, bounded (``make test``: 200 variants; ``make fuzz-packages``: 2,000):
every family's variants keep the command's promises, and each family reaches exit 2."""

from __future__ import annotations

import os
import random
import shutil

from mil_passes.testing.fuzz.package_mutations import FAMILIES
from mil_passes.testing.fuzz.packages import Run, _broken_promise, base_package, fuzz_packages, tree_digest

VARIANTS = int(os.environ.get("PACKAGE_FUZZ_VARIANTS", "200"))


def test_hostile_packages_keep_every_promise(tmp_path):
    report = fuzz_packages(VARIANTS, seed=0, work=tmp_path)
    assert report.variants == VARIANTS and len(report.runs) == 2 * VARIANTS
    assert not report.problems, "\n".join(report.lines())
    for family in FAMILIES:
        statuses = {run.status for run in report.runs if run.family == family}
        assert 2 in statuses, (family, statuses)
    assert {run.command for run in report.runs} == {"lint", "optimize", "verify"}


def test_the_promises_are_checked():
    run = Run(0, "bytes", "x", "lint", 2, 0.1)
    assert _broken_promise(run, "", "mil-passes: error: x\n") is None
    assert _broken_promise(run, "", "one\ntwo\n") == "2 lines on exit 2"
    assert _broken_promise(run, "", "e" * 301 + "\n") == "a line of 301 characters on exit 2"
    assert _broken_promise(run, "", "Traceback (most recent call last):\n") == "printed a traceback"
    run.status = 3
    assert _broken_promise(run, "", "mil-passes: internal error\n").startswith("exit 3")


def test_each_mutation_changes_the_package(tmp_path):
    base = base_package(tmp_path)
    for family, mutations in FAMILIES.items():
        for number, mutation in enumerate(mutations):
            folder = tmp_path / f"{family}-{number}"
            package, outside = folder / "model.mlpackage", folder / "outside"
            outside.mkdir(parents=True)
            shutil.copytree(base, package)
            before = tree_digest(package)
            said = mutation(random.Random(number), package, outside)
            assert said and tree_digest(package) != before, (family, mutation.__name__, said)
