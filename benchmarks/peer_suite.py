"""The peer suite: coremltools' own torch-op tests, numeric on Linux through the reference interpreter.

Runs coremltools' ``test_torch_ops.py`` (ML Program backends only) twice under
``-p mil_passes.reference.pytest_plugin``: as shipped, and with every conversion given
``mil_passes.pipeline()``; then writes ``benchmarks/results/peer_suite.md``: per test class, the
cases that agree with torch at the suite's own tolerances, disagree, fail to convert, or are
skipped, for both runs; the difference between the runs; and every failure classified.

    PEER_SAMPLE=20 python benchmarks/peer_suite.py    # every 20th case (deterministic)
    python benchmarks/peer_suite.py --report-only     # rebuild the report from the last run

The two runs go in parallel (``--jobs 2``). Per-test outcomes are kept as JSON lines in
``--work`` (default ``build/peer_suite``). Exits 1 when ``mil_passes.pipeline()`` turned a
case that agreed into one that does not.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from benchmarks.suite_runs import (  # noqa: E402
    PYTEST_UNDER_PLUGIN,
    COLUMNS,
    Cause,
    agreement,
    arguments,
    first_line,
    load_rows,
    one_line,
    outcome_texts,
    parse,
    run_sessions,
    skips,
    versions,
)
from benchmarks.suite_runs import classify as classify_by  # noqa: E402

MODULE = "coremltools.converters.mil.frontend.torch.test.test_torch_ops"
DEFAULT_SAMPLE = 5
DEFAULT_TIMEOUT = 300.0
RUNS = {"shipped": [], "pipeline": ["--mil-passes-pipeline"]}
RUN_TITLES = {"shipped": "as shipped", "pipeline": "with mil_passes.pipeline()"}

FAILING = ("disagree", "interpreter-error", "declined", "pass-error", "timeout")  # ours to explain, case by case


# Every failure the report lists is classified by the first cause that matches it.
CAUSES = (
    Cause(
        "message",
        r"only 0-dimensional arrays can be converted to Python scalars",
        "numpy-2.4 incompatibility of coremltools 9.0",
        "coremltools calls `int()`/`float()` on a size-1, rank-1 array (the torch frontend's `_cast` for "
        "`aten::Int`/`aten::Float` on a `(1,)` tensor, `frontend/torch/ops.py`), which NumPy deprecated in "
        "1.25 and the installed NumPy 2.4 refuses: `int(np.array([5]))` raises this TypeError. "
        "Not a torch-2.13 problem: taking the scalar with `.item()` in `_cast` makes the reproducer "
        "convert, and its prediction equals torch's.",
        "import torch, coremltools as ct\n\n"
        "class Full(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.full(x.shape, fill_value=2.0)\n\n"
        "x = torch.rand(2, 3)\n"
        'ct.convert(torch.jit.trace(Full(), x), inputs=[ct.TensorType(shape=x.shape)], convert_to="mlprogram")\n'
        "# TypeError: only 0-dimensional arrays can be converted to Python scalars (frontend/torch/ops.py, _cast)",
    ),
    Cause(
        "message",
        r"name 'torchvision' is not defined",
        "environment: torchvision is not installed",
        "`TestNms` calls `torchvision.ops.nms` with no `skipif(not _HAS_TORCH_VISION)` guard (the module "
        "imports torchvision only when it is installed); torchvision is not a dependency here.",
    ),
)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(
        __doc__.split("\n\n")[0],
        sample=DEFAULT_SAMPLE,
        sample_env="PEER_SAMPLE",
        out=ROOT / "benchmarks" / "results" / "peer_suite.md",
        work=ROOT / "build" / "peer_suite",
        timeout=DEFAULT_TIMEOUT,
        case_help="run only this case (repeatable): CLASS::TEST[ID] in the module",
    )
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="runs in parallel")
    parser.add_argument("-k", dest="keyword", default=None, help="an extra pytest -k expression")
    args = parse(parser, argv)
    meta_path = args.work / "meta.json"
    if not args.report_only:
        loads: list[float] = []
        meta = {
            "sample": args.sample,
            "keyword": args.keyword,
            "cases": len(args.cases),
            "jobs": args.jobs,
            "wall_seconds": run_both(args, loads),
            "date": datetime.date.today().isoformat(),
            "load_average": round(sum(loads) / len(loads), 1) if loads else None,
        }
        meta_path.write_text(json.dumps(meta, indent=1))
    meta = json.loads(meta_path.read_text())
    session_path = args.work / "shipped.session.json"
    if session_path.exists():
        meta["selected"] = json.loads(session_path.read_text())["selected"]
    results = {name: load_rows(args.work / f"{name}.jsonl") for name in RUNS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(results, meta))
    introduced = introduced_failures(results)
    print(
        f"wrote {args.out}: {len(results['shipped'])} cases per run, "
        f"{len(introduced)} failures introduced by mil_passes.pipeline()"
    )
    return 1 if introduced else 0


def pytest_command(args, run: str) -> list[str]:
    keyword = "not neuralnetwork" + (f" and ({args.keyword})" if args.keyword else "")
    if args.cases:
        import importlib.util

        path = importlib.util.find_spec(MODULE).origin
        targets = [f"{path}::{case}" for case in args.cases]
    else:
        targets = ["--pyargs", MODULE]
    return [
        *PYTEST_UNDER_PLUGIN,
        *targets,
        "-k",
        keyword,
        f"--reference-sample={args.sample}",
        f"--reference-outcomes={args.work / f'{run}.jsonl'}",
        f"--reference-timeout={args.timeout:g}",
        *RUNS[run],
    ]


def run_both(args, loads: list[float]) -> dict[str, float]:
    """Run the two pytest sessions (in parallel with ``--jobs 2``); their wall seconds. ``loads``
    gets the machine's 1-minute load average, once a minute."""
    env = dict(os.environ, PYMIL_TEST_TARGETS="mlprogram")  # ML Program backends only
    commands = {run: pytest_command(args, run) for run in RUNS}
    titles = {run: f"peer suite ({RUN_TITLES[run]}): every {args.sample}th case" for run in RUNS}
    seconds, measured = run_sessions(commands, args.work, args.jobs, env, ROOT, titles)
    loads.extend(measured)
    return seconds


def classify(row: dict) -> Cause | None:
    return classify_by(row, CAUSES)


def introduced_failures(results: dict) -> list[str]:
    """Cases that agree (or convert) as shipped and not with mil_passes.pipeline()."""
    shipped, piped = results["shipped"], results["pipeline"]
    good = ("agree", "converted")
    return sorted(
        case
        for case, row in shipped.items()
        if row["outcome"] in good and case in piped and piped[case]["outcome"] not in good
    )


# -- the report --------------------------------------------------------------------------------


def render(results: dict, meta: dict) -> str:
    shipped, piped = results["shipped"], results["pipeline"]
    lines = [
        "# The peer suite: coremltools' torch-op tests, numeric on Linux",
        "",
        "coremltools' own `test_torch_ops.py`, ML Program backend (fp16 compute precision, as shipped), "
        + ("every case" if meta["sample"] == 1 else f"one case in {meta['sample']} (every {meta['sample']}th)")
        + (f" of `-k {meta['keyword']}`" if meta.get("keyword") else "")
        + (f" of {meta['cases']} chosen cases" if meta.get("cases") else "")
        + f": {len(shipped)} of {_population(meta)} ML Program cases, per run. Each case converts a small "
        "torch model; the reference interpreter stands in for Core ML "
        "(`-p mil_passes.reference.pytest_plugin`), so the suite's own `convert_and_compare` compares "
        "its outputs with torch's at the suite's own tolerances.",
        "",
        f"Made by `benchmarks/peer_suite.py` (`make peer-suite`, `PEER_SAMPLE={meta['sample']}`) on "
        f"{meta['date']}: {versions()}; "
        f"wall time {_wall(meta)}.",
        "",
        "## Summary",
        "",
        "`agreement` = agree / (agree + disagree + interpreter error): of the cases that convert and "
        "that the interpreter is asked to predict, how many match torch.",
        "",
        "| run | cases | " + " | ".join(COLUMNS) + " | agreement | CPU s/case |",
        "|---|---:|" + "---:|" * len(COLUMNS) + "---:|---:|",
    ]
    for run, rows in results.items():
        counts = collections.Counter(row["outcome"] for row in rows.values())
        cpu = sum(row.get("cpu_seconds", 0.0) for row in rows.values()) / max(len(rows), 1)
        lines.append(
            f"| {RUN_TITLES[run]} | {len(rows)} | "
            + " | ".join(str(counts[c]) for c in COLUMNS)
            + f" | {agreement(counts)} | {cpu:.2f} |"
        )
    lines += ["", "Outcomes: " + "; ".join(f"**{name}**: {text}" for name, text in outcome_texts().items()), ""]
    lines += _difference(shipped, piped)
    lines += _rewrites(piped)
    lines += _per_class(shipped, piped)
    lines += _failures(results)
    lines += _conversion_failures(shipped)
    lines += skips(shipped, "Skips and expected failures (as shipped)")
    return "\n".join(lines) + "\n"


def _population(meta: dict) -> str:
    selected = meta.get("selected")
    return f"{selected:,}" if selected else "the"


def _wall(meta: dict) -> str:
    seconds = meta.get("wall_seconds", {})
    parts = [f"{RUN_TITLES[run]} {seconds[run] / 60:.1f} min" for run in RUNS if run in seconds]
    together = "in parallel" if meta.get("jobs", 2) == 2 else "one after the other"
    load = f", load average {meta['load_average']}" if meta.get("load_average") is not None else ""
    return ", ".join(parts) + f" ({together}, {os.cpu_count()} cores{load})" if parts else "not recorded"


def _difference(shipped: dict, piped: dict) -> list[str]:
    changed = sorted(case for case in shipped if case in piped and shipped[case]["outcome"] != piped[case]["outcome"])
    introduced = introduced_failures({"shipped": shipped, "pipeline": piped})
    lines = [
        "## Difference between the runs",
        "",
        f"Failures introduced by `mil_passes.pipeline()` (a case that agrees or converts as shipped and "
        f"not with the pipeline): **{len(introduced)}**. Cases whose outcome differs: {len(changed)}.",
        "",
    ]
    if changed:
        lines += ["| case | as shipped | with mil_passes.pipeline() | detail |", "|---|---|---|---|"]
        for case in changed:
            detail = one_line(piped[case].get("message") or shipped[case].get("message") or "")
            lines.append(f"| `{case}` | {shipped[case]['outcome']} | {piped[case]['outcome']} | {detail} |")
        lines.append("")
    return lines


def _rewrites(piped: dict) -> list[str]:
    """What the package's passes changed in the pipeline run: the evidence that they ran."""
    cases = [row for row in piped.values() if row.get("rewrites")]
    by_pass = collections.Counter()
    for row in cases:
        by_pass.update(row["rewrites"])
    lines = ["## What the package's passes rewrote", ""]
    if not cases:
        return lines + ["In no conversion of this sample did a pass of the package find something to rewrite.", ""]
    agree = sum(row["outcome"] == "agree" for row in cases)
    lines += [
        f"{len(cases)} conversions were rewritten by the package's passes; {agree} of them agree with torch.",
        "",
        "| pass | rewrites |",
        "|---|---:|",
    ]
    lines += [f"| `{name}` | {count} |" for name, count in by_pass.most_common()]
    return lines + [""]


def _per_class(shipped: dict, piped: dict) -> list[str]:
    lines = [
        "## Per test class",
        "",
        "Counts as shipped; where the run with `mil_passes.pipeline()` differs, its count follows the arrow.",
        "",
        "| class | cases | " + " | ".join(COLUMNS) + " |",
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    by_class: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: {"shipped": collections.Counter(), "pipeline": collections.Counter()}
    )
    for run, rows in (("shipped", shipped), ("pipeline", piped)):
        for row in rows.values():
            by_class[row["class"] or "(module)"][run][row["outcome"]] += 1
    for cls in sorted(by_class):
        a, b = by_class[cls]["shipped"], by_class[cls]["pipeline"]
        cells = [str(a[c]) if a[c] == b[c] else f"{a[c]} → {b[c]}" for c in COLUMNS]
        lines.append(f"| {cls} | {sum(a.values())} | " + " | ".join(cells) + " |")
    return lines + [""]


def _failures(results: dict) -> list[str]:
    lines = [
        "## Disagreements, interpreter errors, declined ops, timeouts — classified",
        "",
        "Every case the interpreter got wrong, could not run or declined, in either run, with its cause "
        "(a declined op's cause is the interpreter's own reason).",
        "",
    ]
    rows = [
        (run, case, row)
        for run, by_case in results.items()
        for case, row in by_case.items()
        if row["outcome"] in FAILING
    ]
    if not rows:
        return lines + ["None.", ""]
    lines += ["| run | case | outcome | cause | evidence |", "|---|---|---|---|---|"]
    for run, case, row in sorted(rows, key=lambda item: (item[1], item[0])):
        cause = classify(row)
        evidence = one_line(row.get("message", "")) + (f" (at `{row['where']}`)" if row.get("where") else "")
        lines.append(f"| {RUN_TITLES[run]} | `{case}` | {row['outcome']} | {_cause_label(row, cause)} | {evidence} |")
    return lines + [""]


def _cause_label(row: dict, cause: Cause | None) -> str:
    if cause:
        return cause.category
    return "declined: the reason is the interpreter's" if row["outcome"] == "declined" else "**unclassified**"


def _conversion_failures(rows: dict) -> list[str]:
    groups: dict[tuple, list[str]] = collections.defaultdict(list)
    for case, row in rows.items():
        if row["outcome"] in ("conversion-failure", "failed"):
            key = (row["outcome"], row.get("error", ""), first_line(row.get("message", "")), row.get("where", ""))
            groups[key].append(case)
    lines = [
        "## Conversion failures and other failures, grouped by cause (as shipped)",
        "",
        "These cases never reach the interpreter. Known incompatibilities are listed, not hidden.",
        "",
    ]
    if not groups:
        return lines + ["None.", ""]
    lines += ["| cases | classes | error | where | cause |", "|---:|---|---|---|---|"]
    for (outcome, error, message, where), cases in sorted(groups.items(), key=lambda item: -len(item[1])):
        classes = sorted({rows[case]["class"] for case in cases})
        cause = classify(rows[cases[0]])
        lines.append(
            f"| {len(cases)} | {', '.join(classes)} | {error}: {one_line(message)} | "
            f"{f'`{where}`' if where else '(test code)'} | {cause.category if cause else outcome} |"
        )
    lines += ["", "Causes:", ""]
    for cause in CAUSES:
        if not any(cause.matches(rows[case]) for cases in groups.values() for case in cases):
            continue
        lines.append(f"- **{cause.category}**: {cause.evidence}")
        if cause.reproducer:
            lines += ["", "  ```python", *(f"  {line}".rstrip() for line in cause.reproducer.splitlines()), "  ```", ""]
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
