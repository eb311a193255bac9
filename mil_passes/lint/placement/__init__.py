"""Neural Engine placement: which ops Core ML is predicted to run elsewhere, and why.

The rules (:mod:`.op_rules`, :mod:`.program_rules`) are values of one type (:mod:`.rule`), each
with its public sources; :func:`assess` applies them to a program and predicts where each op runs.
Residency is decided by Core ML on the device: the rules predict it from the public record, they
do not prove it (docs/neural-engine.md).
"""

from .assess import OpPlace, Placement, Segment, assess
from .op_rules import OP_RULES
from .program_rules import PROGRAM_RULES
from .rule import PlacementRule, Source

RULES: tuple[PlacementRule, ...] = OP_RULES + PROGRAM_RULES


def rule_table() -> str:
    """The rules as docs/neural-engine.md's Markdown table (a test keeps the two the same)."""
    sources = "sources (M Core ML, A Apple, C Core AI, D private path)"
    head = [
        f"| rule | severity | finds | chips | consequence | {sources} | fix |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [rule.table_row() for rule in RULES])


__all__ = ["rule_table", "RULES", "OpPlace", "Placement", "PlacementRule", "Segment", "Source", "assess"]
