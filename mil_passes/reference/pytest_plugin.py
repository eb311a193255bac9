"""pytest plugin: the reference interpreter stands in for Core ML for the whole test session.

Enable with ``-p mil_passes.reference.pytest_plugin``. While tests run, ``MLModel.predict`` and
coremltools' own test utilities answer through the interpreter where Core ML is absent (see
:mod:`~mil_passes.reference.stand_in`). Options:

- ``--mil-passes-pipeline`` (or ``MIL_PASSES_PIPELINE=1``): every conversion gets
  ``mil_passes.pipeline(p)``, where ``p`` is the pipeline it asked for (``DEFAULT`` if none).
- ``--reference-sample=N``: run every Nth collected test (deterministic; 1 runs all).
- ``--reference-outcomes=PATH``: write one JSON line per test (and, beside it, ``PATH`` with the
  suffix ``.session.json``: how many tests were selected and sampled): its node id, class, outcome
  (:data:`OUTCOMES`), predictions answered, wall and CPU seconds, the rewrites the package's
  passes made (with ``--mil-passes-pipeline``), and the error's type, first lines and origin.
- ``--reference-timeout=SECONDS``: fail a test that runs longer (SIGALRM; 0 = none).
- ``--reference-shard=I/N``: of the sampled tests, run the ``I``-th of every ``N`` (``0 <= I < N``):
  ``N`` sessions with shards ``0/N`` … ``N-1/N`` run the sample between them.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from .errors import UnsupportedOpError
from .predict import NotAnMLProgramError
from .stand_in import StandIn, macos_while_importing, stand_in_for_coreml

# What happened to a test, from the numbers' point of view.
OUTCOMES = {
    "agree": "passed, after comparing the interpreter's outputs with torch's",
    "converted": "passed without a prediction (the test checks conversion only)",
    "disagree": "the suite's numeric comparison failed",
    "interpreter-error": "the reference interpreter raised",
    "declined": "the interpreter declined an op it cannot predict faithfully (UnsupportedOpError, with its reason)",
    "pass-error": "a mil_passes pass raised during conversion",
    "conversion-failure": "coremltools raised during conversion",
    "failed": "failed elsewhere (torch, or the test's own checks)",
    "timeout": "ran longer than --reference-timeout",
    "neural-network": "predicted a neural-network model, which has no MIL program (not an ML Program case)",
    "skipped": "skipped",
    "xfail": "expected to fail, and failed",
}

# Functions whose failed assertion, after a prediction, is a numeric disagreement: the comparisons of
# coremltools' torch-frontend suite, of its MIL op tests (testing_utils.py), and numpy's own.
COMPARISONS = frozenset(
    {
        "convert_and_compare",
        "run_compare_builder",
        "compare_backend",
        "assert_allclose",
        "assert_array_equal",
        "assert_array_almost_equal",
        "assert_almost_equal",
        "assert_equal",
    }
)

# How much of a failure's message a row keeps: enough for numpy's assert_allclose report (its
# mismatches and its largest absolute and relative differences).
MESSAGE_LINES, MESSAGE_CHARS = 16, 2500

_STATE = pytest.StashKey[dict]()
_REFERENCE = os.sep + os.path.join("mil_passes", "reference") + os.sep
_PACKAGE = os.sep + "mil_passes" + os.sep
_COREMLTOOLS = os.sep + "coremltools" + os.sep


class ReferenceTimeout(Exception):
    """The test ran longer than ``--reference-timeout``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mil_passes.reference", "reference interpreter standing in for Core ML")
    group.addoption(
        "--mil-passes-pipeline",
        action="store_true",
        default=os.environ.get("MIL_PASSES_PIPELINE") == "1",
        help="give every conversion mil_passes.pipeline() around the pipeline it asked for",
    )
    group.addoption("--reference-sample", type=int, default=1, metavar="N", help="run every Nth test")
    group.addoption("--reference-outcomes", default=None, metavar="PATH", help="write per-test outcomes (JSON lines)")
    group.addoption("--reference-timeout", type=float, default=0.0, metavar="SECONDS", help="per-test time limit")
    group.addoption("--reference-shard", default="0/1", metavar="I/N", help="run the I-th of every N sampled tests")


def _shard(config: pytest.Config) -> tuple[int, int]:
    text = config.getoption("--reference-shard")
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--reference-shard must be I/N, got {text!r}") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"--reference-shard {text}: need 0 <= I < N")
    return index, count


def pytest_configure(config: pytest.Config) -> None:
    sample = config.getoption("--reference-sample")
    if sample < 1:
        raise pytest.UsageError(f"--reference-sample must be a positive integer, got {sample}")
    _shard(config)
    outcomes = config.getoption("--reference-outcomes")
    if outcomes:
        Path(outcomes).parent.mkdir(parents=True, exist_ok=True)
        Path(outcomes).write_text("")
    config.stash[_STATE] = {"stand_in": None, "predictions_before": 0, "phases": {}, "rewrites": collections.Counter()}


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: every Nth of the selected tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sample = config.getoption("--reference-sample")
    index, count = _shard(config)
    selected = len(items)
    if sample > 1 or count > 1:
        sampled = items[::sample]
        kept = sampled[index::count]
        chosen = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
        items[:] = kept
    outcomes = config.getoption("--reference-outcomes")
    if outcomes:  # the population the sample was drawn from, beside the outcomes
        session = {"selected": selected, "sample": sample, "shard": f"{index}/{count}", "run": len(items)}
        Path(outcomes).with_suffix(".session.json").write_text(json.dumps(session))


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[Any]:
    rewrites = session.config.stash[_STATE]["rewrites"]
    with stand_in_for_coreml() as stand_in, _pipeline(session.config.getoption("--mil-passes-pipeline"), rewrites):
        session.config.stash[_STATE]["stand_in"] = stand_in
        try:
            return (yield)
        finally:
            session.config.stash[_STATE]["stand_in"] = None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[Any]:
    """coremltools' stateful torch tests read the macOS version when imported (a class-level skipif)."""
    if not isinstance(collector, pytest.Module):
        return (yield)
    with macos_while_importing(str(collector.path)):
        return (yield)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .stand_in import coreml_present

    where = "Core ML is present: not standing in" if coreml_present() else "standing in for Core ML"
    extra = ", every conversion with mil_passes.pipeline()" if config.getoption("--mil-passes-pipeline") else ""
    return [f"mil_passes reference interpreter: {where}{extra}"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[_STATE]
    stand_in: StandIn | None = state["stand_in"]
    if stand_in is not None:
        stand_in.refresh()
        state["predictions_before"] = stand_in.predictions
    state["phases"] = {}
    state["rewrites"].clear()
    state["start"] = time.perf_counter()
    state["cpu_start"] = time.process_time()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    seconds = item.config.getoption("--reference-timeout")
    if not seconds or not hasattr(signal, "SIGALRM"):
        return (yield)

    def expire(signum, frame):
        raise ReferenceTimeout(f"test ran longer than {seconds:g} s (--reference-timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    report = yield
    state = item.config.stash[_STATE]
    state["phases"][call.when] = (report, call)
    if call.when == "teardown":
        _record(item, state)
    return report


def _record(item: pytest.Item, state: dict) -> None:
    path = item.config.getoption("--reference-outcomes")
    if not path:
        return
    stand_in: StandIn | None = state["stand_in"]
    predictions = stand_in.predictions - state["predictions_before"] if stand_in is not None else 0
    outcome, error = classify(state["phases"], predictions)
    owner = getattr(item, "cls", None)  # a test function's class (pytest.Function), if any
    cls = owner.__name__ if owner is not None else ""
    row = {
        "nodeid": item.nodeid,
        "class": cls,
        "outcome": outcome,
        "predictions": predictions,
        "seconds": round(time.perf_counter() - state.get("start", time.perf_counter()), 3),
        "cpu_seconds": round(time.process_time() - state.get("cpu_start", time.process_time()), 3),
    }
    rewrites = {name: count for name, count in state["rewrites"].items() if count}
    if rewrites:
        row["rewrites"] = rewrites
    if error:
        row.update(error)
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(row) + "\n")


def classify(phases: dict, predictions: int) -> tuple[str, dict]:
    """The outcome of a test from its setup/call reports and the predictions it made."""
    for when in ("setup", "call"):
        if when not in phases:
            continue
        report, call = phases[when]
        if report.skipped:
            if not hasattr(report, "wasxfail"):
                return "skipped", {"reason": _skip_reason(report)}
            raised = call.excinfo is not None and not call.excinfo.errisinstance(pytest.xfail.Exception)
            detail = _failure(call.excinfo, predictions)[1] if raised else {}  # what failed, if it ran
            return "xfail", {"reason": _skip_reason(report), **detail}
        if report.failed:
            return _failure(call.excinfo, predictions)
    return ("agree" if predictions else "converted"), {}


def _skip_reason(report) -> str:
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)[:300]
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])[:300]
    return str(longrepr)[:300]


def _failure(excinfo, predictions: int) -> tuple[str, dict]:
    if excinfo is None:
        return "failed", {}
    error = excinfo.value
    lines = [line for line in str(error).splitlines() if line.strip()]
    detail = {"error": type(error).__name__, "message": "\n".join(lines[:MESSAGE_LINES])[:MESSAGE_CHARS]}
    entries = [entry for entry in excinfo.traceback if str(entry.path) != __file__]  # not our hook wrappers
    files = [str(entry.path) for entry in entries]
    functions = [entry.name for entry in entries]
    origin = [entry for entry, path in zip(entries, files) if _PACKAGE in path or _is_library(path)]
    if origin:  # the deepest frame of coremltools or of this package: the evidence
        last = origin[-1]
        detail["where"] = f"{_short(str(last.path))}:{last.lineno + 1} in {last.name}"
    if isinstance(error, ReferenceTimeout):
        return "timeout", detail
    if isinstance(error, NotAnMLProgramError):
        return "neural-network", detail
    if isinstance(error, UnsupportedOpError):
        return "declined", detail
    if any(_REFERENCE in path for path in files):
        return "interpreter-error", detail
    if any(_PACKAGE in path for path in files):
        return "pass-error", detail
    if any(_is_library(path) for path in files):
        return "conversion-failure", detail
    if isinstance(error, AssertionError) and predictions and COMPARISONS.intersection(functions):
        return "disagree", detail
    return "failed", detail


def _is_library(path: str) -> bool:
    """A coremltools module that is not one of its tests or test utilities."""
    return _COREMLTOOLS in path and not _is_test_file(path)


def _short(path: str) -> str:
    for marker in (_COREMLTOOLS, _PACKAGE):
        if marker in path:
            return marker.strip(os.sep) + os.sep + path.rsplit(marker, 1)[1]
    return path


def _is_test_file(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("test_") or name == "testing_utils.py" or f"{os.sep}test{os.sep}" in path


@contextmanager
def _pipeline(enabled: bool, rewrites: collections.Counter) -> Iterator[None]:
    """While active, every ``ct.convert`` runs ``mil_passes.pipeline(p)`` for the ``p`` it was
    given, and ``rewrites`` counts what the package's passes changed, by pass name."""
    if not enabled:
        yield
        return
    from coremltools.converters import _converters_entry

    from .. import rewriter
    from ..passes import rename_duplicate_temporaries as renames_module
    from ..schedule import pipeline

    originals = (_converters_entry.mil_convert, rewriter.apply_patterns, renames_module.rename_duplicates)
    mil_convert, apply_patterns, rename_duplicates = originals

    def convert_with_pipeline(*args, main_pipeline=None, **kwargs):
        return mil_convert(*args, main_pipeline=pipeline(main_pipeline), **kwargs)

    def counted_patterns(prog, patterns, *, pass_name):
        result = apply_patterns(prog, patterns, pass_name=pass_name)
        rewrites[pass_name] += result.rewritten
        return result

    def counted_renames(prog):
        renames = rename_duplicates(prog)
        rewrites["webnn::rename_duplicate_temporaries"] += len(renames)
        return renames

    _converters_entry.mil_convert = convert_with_pipeline
    rewriter.apply_patterns = counted_patterns
    renames_module.rename_duplicates = counted_renames
    try:
        yield
    finally:
        _converters_entry.mil_convert, rewriter.apply_patterns, renames_module.rename_duplicates = originals
