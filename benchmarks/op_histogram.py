"""What ``programs()`` draws: the op-type histogram over 1,000 programs, as markdown.

    python benchmarks/op_histogram.py [--draws N] [--seed S] [--hits]

Prints a table of op types (ops drawn, programs holding one), how often each option shows
up, and with ``--hits`` the share of programs each registered pass rewrites (its "hit rate";
the strategy plants every pass's pattern so that this is at least a third).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
import warnings
from collections import Counter

from hypothesis import HealthCheck, Phase, given, seed, settings

import mil_passes
from mil_passes.ir import iter_ops
from mil_passes.runner import run_pass
from mil_passes.testing.programs.ops import OP_TABLE
from mil_passes.testing.programs.recipe import program_text
from mil_passes.testing.strategies import DrawnProgram, programs


def survey(draws: int, at: int, hits: bool) -> tuple[Counter, Counter, Counter, Counter]:
    """Op counts, programs per op type, option counts, and programs rewritten per pass."""
    ops, holding, options, rewritten = Counter(), Counter(), Counter(), Counter()

    @seed(at)
    @settings(
        max_examples=draws,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(programs())
    def draw(drawn: DrawnProgram) -> None:
        prog = drawn.reference()
        func = prog.functions["main"]
        types_here = Counter(op.op_type for op in iter_ops(prog) if op.op_type != "const")
        ops.update(types_here)
        holding.update(types_here.keys())
        names = [op.name for op in iter_ops(prog) if op.op_type != "const"]
        options["programs"] += 1
        options["ops"] += sum(types_here.values())
        options["symbolic inputs (2 feeds)"] += any(d.symbols for d in drawn.recipe.inputs)
        options["a cond block"] += "cond" in types_here
        options["duplicate op names"] += len(set(names)) < len(names)
        options["several outputs"] += len(func.outputs) > 1
        options["an output also used inside"] += any(v.child_ops for v in func.outputs)
        options.update(f"plant: {name}" for name in drawn.planted)
        if hits:
            before = program_text(prog)
            for name in mil_passes.PASS_NAMES:
                after = drawn.build()
                with contextlib.redirect_stderr(io.StringIO()):
                    run_pass(after, name)
                rewritten[name] += program_text(after) != before

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draw()
    return ops, holding, options, rewritten


def markdown(ops: Counter, holding: Counter, options: Counter, rewritten: Counter) -> str:
    n = options["programs"]
    lines = [
        f"Op types over {n} programs drawn by `programs()` (iOS17, defaults; {options['ops'] / n:.1f} "
        "ops per program, consts not counted):",
        "",
        "| op type | ops | programs holding one |",
        "|---|---:|---:|",
    ]
    lines += [f"| `{t}` | {c} | {100 * holding[t] / n:.1f}% |" for t, c in ops.most_common()]
    never = sorted({e.op_type for e in OP_TABLE} - set(ops))
    lines += ["", f"Op-table entries never drawn: {', '.join(never) if never else 'none'}.", ""]
    lines += ["| programs with | share |", "|---|---:|"]
    lines += [f"| {k} | {100 * v / n:.0f}% |" for k, v in options.items() if k not in ("programs", "ops")]
    if rewritten:
        lines += ["", "| pass | programs rewritten (hit rate) |", "|---|---:|"]
        lines += [f"| `{name}` | {100 * rewritten[name] / n:.0f}% |" for name in mil_passes.PASS_NAMES]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hits", action="store_true", help="also run every pass and report its hit rate")
    args = parser.parse_args()
    start = time.perf_counter()
    print(markdown(*survey(args.draws, args.seed, args.hits)))
    print(f"\n({args.draws} draws in {time.perf_counter() - start:.0f} s, seed {args.seed})")


if __name__ == "__main__":
    main()
