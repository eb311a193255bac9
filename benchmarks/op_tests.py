"""The MIL op tests: coremltools' own per-op tests (iOS14–iOS18), numeric on Linux through the interpreter.

Runs ``coremltools.converters.mil.mil.ops.tests`` (ML Program backends, fp16 and fp32 compute
precision: ``INCLUDE_MIL_FP32_UNIT_TESTS=1`` adds the fp32 backends the suite leaves out by default)
under ``-p mil_passes.reference.pytest_plugin``, every Nth case, in two shards side by side; then
writes ``benchmarks/results/op_tests.md``: per folder and precision, the cases run, predicted by the
interpreter, agreeing with the tests' own numpy expectations, and failing — the interpreter's, or
documented as the test's own problem, with the evidence checked on each case.

    OP_TESTS_SAMPLE=12 python benchmarks/op_tests.py    # every 12th case (deterministic)
    python benchmarks/op_tests.py --report-only         # rebuild the report from the last run

Per-test outcomes are kept as JSON lines in ``--work`` (default ``build/op_tests``). Exits 1 when a
case that made a prediction failed for a reason no documented cause explains.
"""

from __future__ import annotations

import collections
import datetime
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from benchmarks.suite_runs import (  # noqa: E402
    PYTEST_UNDER_PLUGIN,
    Cause,
    arguments,
    classify,
    load_rows,
    one_line,
    parse,
    run_sessions,
    skips,
    versions,
)

PACKAGE = "coremltools.converters.mil.mil.ops.tests"
DEFAULT_SAMPLE = 12
DEFAULT_TIMEOUT = 120.0
SHARDS = 2
# Report columns: what happened to each sampled case (see category()).
CATEGORIES = ("agree", "documented", "failed", "xfail", "declined", "not the interpreter's", "converted", "skipped")


def _max_difference(row: dict, kind: str) -> float | None:
    found = re.search(rf"Max {kind} difference among violations: ([0-9.e+-]+)", row.get("message", ""))
    return float(found.group(1)) if found else None


# The largest difference fp16 data explains: 2⁻⁸, four fp16 ulps at magnitude 1 (the reproductions in
# tests/test_op_tests_tolerance.py stay within it). numpy prints differences to 4 or 5 digits.
FP16_DATA_BOUND = 2.0**-8
PRINTED = 1.001


def _fp16_data_at_fp32_tolerance(row: dict) -> bool:
    """An fp32-backend case with fp16 data (named in its id) whose largest difference is within
    :data:`FP16_DATA_BOUND`, absolute or relative."""
    bounds = [_max_difference(row, kind) for kind in ("absolute", "relative")]
    return (
        "precision='fp32'" in row["nodeid"]
        and "numpy.float16" in row["nodeid"]
        and any(bound is not None and bound <= FP16_DATA_BOUND * PRINTED for bound in bounds)
    )


# fp32(7.9) - fp32(7.899): the hand-typed expectation's error, as numpy prints it (5 digits).
TYPO_DIFFERENCE = 0.00099993

# Failures that are the test's own problem, each verified on the case it classifies.
CAUSES = (
    Cause(
        "message",
        r"Not equal to tolerance rtol=1e-05, atol=0.0001",
        "the test's own tolerance: fp16 data checked at the fp32 backend's tolerance",
        "With `precision='fp32'` the suite compares at rtol 1e-5, atol 1e-4, but these cases build the program "
        "on fp16 data (`dtype`, `x_weight_dtype` or `x_param_dtype` float16 in the case's id), so its output is "
        "fp16 on Core ML as in the interpreter, and one fp16 ulp (2⁻¹¹ relative at best) exceeds the tolerance. "
        "The expectations also round differently from any fp16 program: `TestNormalizationInstanceNorm` "
        "compares with an fp32 value (the nearest fp16 is up to half an ulp away); `TestNormalizationL2Norm` "
        "computes in fp16 arithmetic with epsilon 5.7, which the program holds as fp16(5.7) = 5.69921875; "
        "`TestConv`, `TestConvTranspose` and the recurrent tests (`TestRNN`, `TestLSTM`, `TestGRU`) compute the "
        "expectation in fp32 or fp64 from unrounded weights or data, while the program gets them rounded to "
        "fp16. `tests/test_op_tests_tolerance.py` shows each mechanism: the "
        "interpreter's output is the correctly rounded fp16 result of the program's own data (L2 norm: equal "
        "in 20 of 20 draws; conv_transpose and rnn: within an fp16 ulp of the float64 result), and the test's "
        "expectation misses it by up to 2⁻⁸. Each case listed is checked: fp32 backend, fp16 data, and a "
        "largest difference within 2⁻⁸ (four fp16 ulps at magnitude 1), absolute or relative.",
        verify=_fp16_data_at_fp32_tolerance,
    ),
    Cause(
        "nodeid",
        r"iOS18/test_compression\.py::.*precision='fp32'.*(lut|data)_dtype=fp16",
        "the test's own tolerance: an expectation that adds 1 in fp16 arithmetic",
        "These iOS18 compression tests decompress fp16 data (`lut_dtype` or `data_dtype` fp16: a lookup table, "
        "or sparse non-zero values) and expect `decompressed + 1`, which "
        "numpy computes in fp16 (fp16 + int stays fp16), so the expectation is rounded to fp16 in [1, 2), "
        "up to 2⁻¹¹ off; the program adds the values to an fp32 input in fp32, exactly, as Core ML does at fp32 "
        "precision. `tests/test_op_tests_tolerance.py::test_compression_expectations_add_one_in_fp16_arithmetic` "
        "shows the interpreter's result equal to the exact fp32 sum and the test's expectation off by at most "
        "2⁻¹¹. Each case is checked: a largest absolute difference within 2⁻¹¹.",
        verify=lambda row: (_max_difference(row, "absolute") or 1.0) <= 2.0**-11 * PRINTED,
    ),
    Cause(
        "nodeid",
        r"iOS16/test_image_resizing\.py::TestCropResize::test_builder_to_backend_ios16\[.*precision='fp32'",
        "the test's own tolerance: a hand-typed expectation (7.899 for 7.9)",
        "The expected value 7.899 is typed by hand. The box `[0.5, 1.8, 1.0, 0.3]` (normalized, so rows 1.5…3, "
        "columns 5.4…0.9) samples row 1.5, column 0.9 of the test's 4×4 image `1…16`: the mean of 5.9 and 9.9, "
        "exactly 7.9. The fp16 runs pass at their tolerance; the fp32 run's atol 1e-4 rejects the typo. Each case "
        "is checked: one element of 12 differs, by fp32(7.9) - fp32(7.899) = 0.00099993.",
        verify=lambda row: (
            "Mismatched elements: 1 / 12 " in row.get("message", "")
            and abs((_max_difference(row, "absolute") or 1.0) - TYPO_DIFFERENCE) <= 1e-7
        ),
    ),
)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(
        __doc__.split("\n\n")[0],
        sample=DEFAULT_SAMPLE,
        sample_env="OP_TESTS_SAMPLE",
        out=ROOT / "benchmarks" / "results" / "op_tests.md",
        work=ROOT / "build" / "op_tests",
        timeout=DEFAULT_TIMEOUT,
        case_help="run only this case (repeatable): FOLDER/FILE::TEST[ID] below the op tests' package",
    )
    parser.add_argument("--jobs", type=int, default=SHARDS, choices=range(1, SHARDS + 1), help="shards in parallel")
    args = parse(parser, argv)
    meta_path = args.work / "meta.json"
    if not args.report_only:
        for old in args.work.glob("shard*.jsonl"):
            old.unlink()
        commands = {f"shard{i}": pytest_command(args, i) for i in range(SHARDS)}
        titles = {run: f"op tests, every {args.sample}th case, {run} of {SHARDS}" for run in commands}
        env = dict(os.environ, PYMIL_TEST_TARGETS="mlprogram", INCLUDE_MIL_FP32_UNIT_TESTS="1")
        seconds, loads = run_sessions(commands, args.work, args.jobs, env, ROOT, titles)
        meta = {
            "sample": args.sample,
            "cases": len(args.cases),
            "jobs": args.jobs,
            "wall_seconds": seconds,
            "date": datetime.date.today().isoformat(),
            "load_average": round(sum(loads) / len(loads), 1) if loads else None,
        }
        meta_path.write_text(json.dumps(meta, indent=1))
    meta = json.loads(meta_path.read_text())
    meta["selected"] = _selected(args.work)
    rows = load_results(args.work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, meta))
    unexplained = [case for case, row in rows.items() if category(row) == "failed"]
    print("\n".join(_table(rows)[2:]))  # the per-folder table, without its heading
    print(
        f"wrote {args.out}: {len(rows)} cases, {sum(row['predictions'] > 0 for row in rows.values())} predicted, "
        f"{len(unexplained)} failed unexplained"
    )
    return 1 if unexplained else 0


def _package_dir() -> Path:
    return Path(importlib.util.find_spec(PACKAGE).origin).parent


def pytest_command(args, shard: int) -> list[str]:
    targets = [f"{_package_dir() / case}" for case in args.cases] or ["--pyargs", PACKAGE]
    return [
        *PYTEST_UNDER_PLUGIN,
        *targets,
        "--continue-on-collection-errors",
        f"--reference-sample={args.sample}",
        f"--reference-shard={shard}/{SHARDS}",
        f"--reference-outcomes={args.work / f'shard{shard}.jsonl'}",
        f"--reference-timeout={args.timeout:g}",
    ]


def case_of(nodeid: str) -> str:
    """``iOS14/test_recurrent.py::TestGRU::test_…[…]``: the node id below the op tests' package."""
    marker = "ops/tests/"
    return nodeid.split(marker, 1)[1] if marker in nodeid else nodeid


def load_results(work: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in sorted(work.glob("shard*.jsonl")):
        rows.update(load_rows(path, key=case_of))
    return rows


def _selected(work: Path) -> int | None:
    sessions = [json.loads(path.read_text()) for path in work.glob("shard*.session.json")]
    return sessions[0]["selected"] if sessions else None


def folder_of(case: str) -> str:
    return case.split("/", 1)[0] if "/" in case.split("::", 1)[0] else "(package)"


def precision_of(case: str) -> str:
    """The compute precision of a case's ML Program backend, from its id."""
    for precision in ("fp16", "fp32"):
        if f"precision='{precision}'" in case or f"'mlprogram', '{precision}')" in case:
            return precision
    return "—"


def category(row: dict) -> str:
    """What a case counts as: agree (predicted, passed), documented (predicted, failed for a
    documented cause of the test's own), failed (predicted, failed otherwise: the interpreter's to
    explain), xfail, declined (the interpreter refused, naming what it cannot predict faithfully),
    not the interpreter's (failed without a prediction), converted, skipped."""
    outcome, predicted = row["outcome"], row["predictions"] > 0
    if outcome in ("skipped", "xfail"):
        return outcome
    if outcome == "agree":
        return "agree"
    if outcome == "converted":
        return "converted"
    if outcome == "declined" or row.get("error") == "UnsupportedOpError":  # rows recorded before "declined"
        return "declined"
    if not predicted:
        return "not the interpreter's"
    return "documented" if classify(row, CAUSES) else "failed"


# -- the report --------------------------------------------------------------------------------


def render(rows: dict[str, dict], meta: dict) -> str:
    counts = collections.Counter(category(row) for row in rows.values())
    predicted = sum(row["predictions"] > 0 for row in rows.values())
    selected = f"{meta['selected']:,}" if meta.get("selected") else "the"
    what = "every case" if meta["sample"] == 1 else f"one case in {meta['sample']}"
    lines = [
        "# The MIL op tests: coremltools' per-op tests, numeric on Linux",
        "",
        f"coremltools' own MIL op tests (`{PACKAGE}`, iOS14–iOS18), ML Program backends in fp16 and fp32 "
        f"compute precision (`INCLUDE_MIL_FP32_UNIT_TESTS=1`), {what}"
        + (f" of {meta['cases']} chosen targets (`--case`: files or cases)" if meta.get("cases") else "")
        + f": {len(rows)} of {selected} cases. Each case builds a MIL program and compares Core ML's prediction "
        "with numpy's at the test's own tolerance; the reference interpreter stands in for Core ML "
        "(`-p mil_passes.reference.pytest_plugin`).",
        "",
        f"Made by `benchmarks/op_tests.py` (`make op-tests`, `OP_TESTS_SAMPLE={meta['sample']}`) on {meta['date']}: "
        f"{versions()}; wall time {_wall(meta)}.",
        "",
        "## Summary",
        "",
        f"**{predicted}** cases made a prediction; **{counts['agree']}** agree, **{counts['documented']}** fail for "
        f"a documented cause of the test's own, **{counts['failed']}** fail otherwise; the interpreter declined "
        f"**{counts['declined']}** (below, with its reason).",
        "",
        "Columns: **run** = not skipped; **predicted** = the interpreter answered at least one `predict`; "
        + "; ".join(f"**{name}**: {text}" for name, text in _column_texts().items())
        + ".",
        "",
    ]
    lines += _table(rows)
    lines += _failures(rows)
    lines += _documented(rows)
    lines += _declined(rows)
    lines += _not_ours(rows)
    lines += skips(rows, "Skips and expected failures")
    return "\n".join(lines) + "\n"


def _column_texts() -> dict[str, str]:
    return {
        "agree": "predicted and passed",
        "documented": "predicted and failed for a documented cause of the test's own (below, with evidence)",
        "failed": "predicted and failed otherwise (the interpreter's to explain)",
        "xfail": "marked as expected to fail",
        "declined": "the interpreter refused to evaluate an op it cannot predict faithfully (its reason below)",
        "not the interpreter's": "failed without a prediction (conversion, collection, the test's own checks)",
        "converted": "passed without a prediction",
    }


def _wall(meta: dict) -> str:
    seconds = meta.get("wall_seconds", {})
    if not seconds:
        return "not recorded"
    load = f", load average {meta['load_average']}" if meta.get("load_average") is not None else ""
    longest = max(seconds.values())
    jobs = meta.get("jobs", SHARDS)
    return f"{longest / 60:.1f} min ({len(seconds)} shards, {jobs} at a time, {os.cpu_count()} cores{load})"


def _table(rows: dict[str, dict]) -> list[str]:
    groups: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for case, row in rows.items():
        key = (folder_of(case), precision_of(case))
        groups[key][category(row)] += 1
        groups[key]["cases"] += 1
        groups[key]["predicted"] += row["predictions"] > 0
        for total in ((key[0], "all"), ("all", key[1]), ("all", "all")):
            groups[total][category(row)] += 1
            groups[total]["cases"] += 1
            groups[total]["predicted"] += row["predictions"] > 0
    header = ("cases", "run", "predicted", *CATEGORIES[:-1])
    lines = [
        "## Per folder",
        "",
        "| folder | precision | " + " | ".join(header) + " | skipped |",
        "|---|---|" + "---:|" * (len(header) + 1),
    ]
    order = sorted(groups, key=lambda key: (key[0] == "all", key[0], key[1] == "all", key[1]))
    for folder, precision in order:
        counts = groups[(folder, precision)]
        cells = [
            counts["cases"],
            counts["cases"] - counts["skipped"],
            counts["predicted"],
            *(counts[name] for name in CATEGORIES),
        ]
        bold = "**" if "all" in (folder, precision) else ""
        lines.append(f"| {bold}{folder}{bold} | {bold}{precision}{bold} | " + " | ".join(str(c) for c in cells) + " |")
    return lines + [""]


def _failures(rows: dict[str, dict]) -> list[str]:
    failed = sorted(case for case, row in rows.items() if category(row) == "failed")
    lines = ["## Failed after a prediction, unexplained", ""]
    if not failed:
        return lines + ["None.", ""]
    lines += ["| case | outcome | error |", "|---|---|---|"]
    for case in failed:
        row = rows[case]
        where = f" (at `{row['where']}`)" if row.get("where") else ""
        lines.append(
            f"| `{case}` | {row['outcome']} | {row.get('error', '')}: {one_line(row.get('message', ''))}{where} |"
        )
    return lines + [""]


def _documented(rows: dict[str, dict]) -> list[str]:
    lines = ["## Documented: the test's own problem", ""]
    by_cause: dict[Cause, list[str]] = collections.defaultdict(list)
    for case, row in rows.items():
        if category(row) == "documented":
            by_cause[classify(row, CAUSES)].append(case)
    if not by_cause:
        return lines + ["None in this sample.", ""]
    for cause, cases in by_cause.items():
        lines += [f"### {cause.category} ({len(cases)} cases)", "", cause.evidence, ""]
        for case in sorted(cases):
            lines.append(f"- `{case}`: {one_line(rows[case].get('message', ''), 240)}")
        lines.append("")
    return lines


def _declined(rows: dict[str, dict]) -> list[str]:
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for case, row in rows.items():
        if category(row) == "declined":
            groups[one_line(row.get("message", ""), 400)].append(case)
    lines = ["## Declined by the interpreter", ""]
    if not groups:
        return lines + ["None.", ""]
    lines += ["An op the interpreter will not guess at raises `UnsupportedOpError` with its reason:", ""]
    for message, cases in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines += [f"- {len(cases)} case{'s' * (len(cases) != 1)}: {message}"]
        lines += [f"  - `{case}`" for case in sorted(cases)]
    return lines + [""]


def _not_ours(rows: dict[str, dict]) -> list[str]:
    groups: dict[tuple, list[str]] = collections.defaultdict(list)
    for case, row in rows.items():
        if category(row) == "not the interpreter's":
            key = (row["outcome"], row.get("error", ""), one_line(row.get("message", ""), 120), row.get("where", ""))
            groups[key].append(case)
    lines = [
        "## Failures without a prediction, grouped",
        "",
        "These cases never asked the interpreter for a number.",
        "",
    ]
    if not groups:
        return lines + ["None.", ""]
    lines += ["| cases | folders | outcome | error | where |", "|---:|---|---|---|---|"]
    for (outcome, error, message, where), cases in sorted(groups.items(), key=lambda item: -len(item[1])):
        folders = ", ".join(sorted({folder_of(case) for case in cases}))
        lines.append(f"| {len(cases)} | {folders} | {outcome} | {error}: {message} | {f'`{where}`' if where else ''} |")
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
