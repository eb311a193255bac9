"""The ``--json`` output of ``mil-passes lint``, ``optimize`` and ``verify``: stable, versioned.

Every document carries ``"schema"``; a change that removes or renames a key, or changes its
meaning, bumps the number after the slash. New keys may be added without a bump.

``mil-passes/lint/2`` (``/1`` counted ``segments`` as runs of consecutive ops in program order; ``/2``
counts connected regions, as Core ML's partitioner forms them, and ``runs`` lists those)::

    {
      "schema": "mil-passes/lint/2",
      "path": "model.mlpackage",                     # as given on the command line
      "findings": [Finding, ...],                    # errors first, then warnings, then infos
      "counts": {"error": 1, "warning": 0, "info": 0},
      "placement": {                                 # where Core ML is predicted to run each op
        "chips": ["M1/A14", ...],                    # the chip families checked (--chip: one)
        "ops": 120,                                  # non-const ops (each function's top level)
        "off_ane": 3,                                # of them, predicted off the Neural Engine
        "by_cost": 0,                                # of off_ane: by Core ML's cost decision
        "glue": 2,                                   # of off_ane: glue joining an off island
        "unknown": 0,                                # of them, ops no rule could judge
        "leaves_neural_engine": false,               # a model-level rejection holds: every op off
        "rejected_by": [],                           # its rules
        "segments": 3,                               # connected regions of ops on one side
        "rule_segments": 3,                          # the same, ops off by cost counted on the ANE
        "boundaries": 2,                             # copies between compute units (pairs of segments)
        "off_by_rule": {"ane-topk-sort": 1, ...},    # ops each rule takes off (glue not counted)
        "confidence": {"coreml": 110, ...},          # ops per what the prediction rests on
        "runs": [{"unit": "ane" | "cpu_gpu", "ops": 57, "first": "op name", "last": "op name",
                  "rules": ["ane-topk-sort"], "cost": false,
                  "confidence": "coreml"}, ...]      # the segments, by their first op
      },
      "compute_units": "all"                         # --compute-units: without the Neural Engine
    }                                                # (cpu_only, cpu_and_gpu) its rules' findings are left out

``mil-passes/optimize/1``::

    {
      "schema": "mil-passes/optimize/1",
      "input": "in.mlpackage", "output": "out.mlpackage",
      "seconds": 1.2345,                             # wall time of the whole run
      "ops": {"before": {"concat": 24, ...}, "after": {...}},   # non-const ops by type, sorted
      "findings": {"before": [Finding, ...], "after": [Finding, ...]},
      "passes": [                                    # in the order they ran (cleanup last)
        {"name": "webnn::concat_slice_to_slice_concat", "seconds": 0.0123,
         "rewritten": 24,                            # null when the pass does not count
         "refusals": [{"op": "w", "op_type": "slice_by_index", "reason": "..."}]}
      ]
    }

``mil-passes/verify/1``::

    {
      "schema": "mil-passes/verify/1",
      "input": "in.mlpackage", "pipeline": "default", "feeds": 3,
      "steps": 4,                                    # predictions per feed (1 unless the model has states)
      "shared_sizes": null,                          # or why random feeds have every flexible dim at one size
      "passes": [                                    # in pipeline order; all, unless one raised or was invalid
        {"name": "common::const_elimination", "seconds": 0.0012,
         "ops_before": 2, "ops_after": 1,            # non-const ops
         "status": "changed",          # same | precision | repaired | unchecked | changed | raised | invalid
         "outputs": {"y": {"dtype_before": "fp32", "dtype_after": "int32",
                           "shape_before": [2], "shape_after": [2],
                           "max_abs": 0.5, "max_rel": 0.0476,   # null when the shapes differ
                           "repaired": 0}},                     # NaN/inf made finite (status repaired)
         "error": null,                              # one line for raised, invalid, unchecked
         "states": {},                               # a stateful model's states after each step, as outputs
         "evaluated": true,                          # false: the pass left the program as it was
         "restored_by": null,                        # a later pass that undid this change, or null
         "function": "decode",                       # only in a multifunction model: the row's function
         "stage": "1"}                               # only in a pipeline: the row's stage (from 0)
      ],
      "culprit": "common::const_elimination",         # the first changed/raised/invalid pass no later pass
                                                      # undid, or null
      "repaired": null                                # the first pass that made NaN/inf outputs finite, or null
    }

``Finding`` is ``{"rule": id, "severity": "error" | "warning" | "info", "op": op name,
"message": one line, "fix": "webnn::…" | null}``, with ``"function": name`` in a multifunction
model and ``"stage": "1"`` (its index, from 0) in a pipeline: ``fix`` names the pass that fixes it (lint is a
dry run of the passes: a finding names a pass exactly when that pass would change the model), null
when no pass does (a refusal: the pass's reason is the message). Errors that stop a command are
not JSON: one line on stderr, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..lint import SEVERITIES, Finding, Placement
from ..package.optimize import PackageRun
from ..verify import Verification

LINT_SCHEMA = "mil-passes/lint/2"
OPTIMIZE_SCHEMA = "mil-passes/optimize/1"
VERIFY_SCHEMA = "mil-passes/verify/1"


def lint_json(path: str | Path, findings: Iterable[Finding], placement: Placement | None = None) -> dict:
    """The ``lint --json`` document."""
    findings = list(findings)
    document = {
        "schema": LINT_SCHEMA,
        "path": str(path),
        "findings": [finding.as_dict() for finding in findings],
        "counts": {severity: sum(f.severity == severity for f in findings) for severity in SEVERITIES},
    }
    if placement is not None:
        document["placement"] = placement.as_dict()
    return document


def optimize_json(run: PackageRun) -> dict:
    """The ``optimize --json`` document."""
    report = run.report
    return {
        "schema": OPTIMIZE_SCHEMA,
        "input": str(run.source),
        "output": str(run.output),
        "seconds": round(run.seconds, 4),
        "ops": {
            "before": dict(sorted(report.ops_before.items())),
            "after": dict(sorted(report.ops_after.items())),
        },
        "findings": {
            "before": [finding.as_dict() for finding in report.findings_before],
            "after": [finding.as_dict() for finding in report.findings_after],
        },
        "passes": [
            {
                "name": pass_run.name,
                "seconds": round(pass_run.seconds, 4),
                "rewritten": pass_run.rewritten,
                "refusals": [
                    {"op": refusal.op.name, "op_type": refusal.op.op_type, "reason": refusal.reason}
                    for refusal in pass_run.declined
                ],
            }
            for pass_run in report.passes
        ],
    }


def _change_json(change) -> dict:
    return {
        "dtype_before": change.dtype_before,
        "dtype_after": change.dtype_after,
        "shape_before": change.shape_before,
        "shape_after": change.shape_after,
        "max_abs": change.max_abs,
        "max_rel": change.max_rel,
        "repaired": change.repaired,
    }


def verify_json(verification: Verification) -> dict:
    """The ``verify --json`` document."""
    culprit = verification.culprit
    return {
        "schema": VERIFY_SCHEMA,
        "input": verification.input,
        "pipeline": verification.pipeline,
        "feeds": verification.feeds,
        "steps": verification.steps,
        "shared_sizes": verification.shared_sizes,
        "passes": [
            {
                "name": row.name,
                "seconds": round(row.seconds, 4),
                "ops_before": row.ops_before,
                "ops_after": row.ops_after,
                "status": row.status,
                "outputs": {name: _change_json(change) for name, change in row.outputs.items()},
                "error": row.error,
                "states": {name: _change_json(change) for name, change in row.states.items()},
                "evaluated": row.evaluated,
                "restored_by": None if row.restored_by is None else row.restored_by.name,
                **({"function": row.function} if row.function is not None else {}),
                **({"stage": row.stage} if row.stage is not None else {}),
            }
            for row in verification.rows
        ],
        "culprit": None if culprit is None else culprit.name,
        "repaired": None if verification.repair is None else verification.repair.name,
    }
