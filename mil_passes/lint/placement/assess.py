"""Apply the placement rules to a program: findings, and where each op is predicted to run.

The prediction is the *preferred* unit, as Core ML's ``MLComputePlan`` reports it, for each
function's top-level non-const ops in program order (a ``cond`` or ``while_loop`` counts once, its
bodies with it). It is made in four steps:

1. **Rules.** An op is *off* the Neural Engine when an op rule whose consequence moves it off holds
   on a checked chip; *unknown* when a rule could not judge it (a size known only at run time that
   the rule depends on), its op type is not coremltools', or its output has no rank. Unknown ops are
   never guessed.
2. **Glue.** Core ML's partitioner keeps data-movement ops with the island they serve: a glue op
   (:data:`GLUE_OPS`: casts, squeezes, split/stack, expand_dims/tile, reshapes, slices) whose every
   run-time producer is off, or whose every reader is off, goes off with it.
3. **Cost.** Rules whose consequence is Core ML's cost decision (a small attention, a graph too small
   to be worth the Neural Engine) move ops off, marked as cost.
4. **Model-level rejection.** A rule whose consequence is the whole model (:attr:`PlacementRule.whole_model`)
   takes every op off: the model leaves the Neural Engine.

Every prediction carries its confidence: the strongest source of the rules that decided it (Core
ML, Apple, Core AI, the private compiler path), or, for an op on the Neural Engine, whether a
published compute plan shows its op type there (:data:`PLANNED_ON_ANE`). A *segment* is what Core
ML's partitioner makes: a connected region of ops on one side, joined by the values they pass (an
unknown op takes its neighbours' side); each value passed between two segments is a copy between
compute units, counted once per pair of segments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coremltools.converters.mil.mil import Function, Operation, Program, Var
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from .. import chips as chip_families
from ..dims import DimNames
from ..findings import Finding
from .facts import FunctionView, Reader, added_for_interface, is_weight_op
from .op_rules import OP_RULES
from .program_rules import PROGRAM_RULES
from .rule import CONFIDENCE_KEYS, MEASURED, STRENGTH, UNKNOWN, UNSOURCED, Hit, PlacementRule

ANE, OFF_ANE, UNJUDGED = "ane", "off", "unknown"
#: Why an op is off: a rule holds for it, it is glue of an off island, Core ML's cost decision,
#: or the Neural Engine compiler rejects the whole model.
BY_RULE, BY_GLUE, BY_COST, BY_MODEL = "rule", "glue", "cost", "model"

#: Ops that only move or reinterpret data: they join the off-ANE island they feed or that feeds them
#: (FluidInference/FluidAudio's decoder_joint plan: the lstms' embedding gather, h/c split/stack,
#: squeezes and IO casts on the CPU with them; roboflow/rf-detr#1495: the expand_dims/tile that
#: consume topk's indices).
GLUE_OPS = frozenset(
    {"cast", "squeeze", "expand_dims", "reshape", "split", "stack", "tile", "identity"}
    | {"slice_by_index", "slice_by_size", "concat"}
)

#: Op types published Core ML compute plans show preferred on the Neural Engine (docs/neural-engine.md,
#: "Published compute plans"): an op no rule takes off rests on these, else it is unsourced.
PLANNED_ON_ANE = frozenset(
    # LuuOW/meridian-mcp's encoder: all 217 ops
    {"add", "conv", "gelu", "mul", "reduce_mean", "reduce_sum", "reshape", "rsqrt", "softmax", "square", "sub"}
    | {"transpose"}
    # vx-lang/Vx#435, #437: the 512x512 matmul and its casts; fused attention at 2M elements and over
    | {"matmul", "cast", "scaled_dot_product_attention"}
    # FluidInference/FluidAudio's decoder_joint: the joint's linears, relu and add
    | {"linear", "relu"}
)


@dataclass
class Segment:
    """A maximal run of consecutive ops on one side: ``ane`` or ``off`` (CPU/GPU)."""

    side: str
    ops: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # why the ops of an off segment are off
    cost: bool = False  # every op of this off segment is off by Core ML's cost decision
    confidence: str = MEASURED  # the weakest confidence of its ops

    def as_dict(self) -> dict:
        return {
            "unit": "ane" if self.side == ANE else "cpu_gpu",
            "ops": len(self.ops),
            "first": self.ops[0],
            "last": self.ops[-1],
            "rules": self.rules,
            "cost": self.cost,
            "confidence": CONFIDENCE_KEYS[self.confidence],
        }


@dataclass
class OpPlace:
    """One op's predicted unit: ``side`` (``ane``, ``off``, ``unknown``), ``why`` it is off (``rule``,
    ``glue``, ``cost``, ``model``), the rules that decided it, and the confidence they rest on."""

    name: str
    op_type: str
    side: str = ANE
    why: str = ""
    rules: list[str] = field(default_factory=list)
    confidence: str = UNSOURCED

    def take_off(self, why: str, rule: PlacementRule | str, confidence: str) -> None:
        self.side, self.why = OFF_ANE, why
        rule_id = rule if isinstance(rule, str) else rule.id
        if rule_id not in self.rules:
            self.rules.append(rule_id)
        self.confidence = min(self.confidence, confidence, key=STRENGTH.index)


@dataclass
class Placement:
    """Where the ops are predicted to run, on the chip families checked."""

    chips: tuple[str, ...]
    ops: int = 0
    off_ane: int = 0
    unknown: int = 0
    by_cost: int = 0  # of off_ane: off by Core ML's cost decision
    glue: int = 0  # of off_ane: glue that joins an off island
    segments: list[Segment] = field(default_factory=list)
    off_rules: dict[str, int] = field(default_factory=dict)  # rule id -> ops it takes off
    rejected_by: list[str] = field(default_factory=list)  # model-level rejections: the model leaves the ANE
    confidence: dict[str, int] = field(default_factory=dict)  # confidence key -> ops predicted on it
    places: list[OpPlace] = field(default_factory=list)  # each op, in program order
    copies: int = 0  # pairs of segments one passes a value to the other
    rule_segments: int = 0  # the segments the rules make: as ``segments``, the ops off by cost on the ANE

    @property
    def off_by_rules(self) -> int:
        """Ops off the Neural Engine but for Core ML's cost decisions: what the rules take off (with the
        glue joining their islands, or every op when the model is rejected). A small model's placement is
        its cost decision (``ane-small-graph``: every op on the CPU); this is what stays off at any size."""
        return self.off_ane - self.by_cost

    def as_dict(self) -> dict:
        return {
            "chips": list(self.chips),
            "ops": self.ops,
            "off_ane": self.off_ane,
            "by_cost": self.by_cost,
            "glue": self.glue,
            "unknown": self.unknown,
            "leaves_neural_engine": bool(self.rejected_by),
            "rejected_by": self.rejected_by,
            "segments": len(self.segments),
            "rule_segments": self.rule_segments,
            "boundaries": self.copies,
            "off_by_rule": dict(sorted(self.off_rules.items())),
            "confidence": {key: self.confidence[key] for key in CONFIDENCE_KEYS.values() if key in self.confidence},
            "runs": [segment.as_dict() for segment in self.segments],
        }

    def summary(self) -> str:
        """The placement in one line (``lint``'s summary)."""
        if not self.ops:
            return "placement: no ops"
        chips = "every chip from M1/A14" if len(self.chips) > 1 else self.chips[0]
        off = f"{self.off_ane} off the Neural Engine"
        if self.rejected_by:
            off += f": the Neural Engine compiler rejects the model ({', '.join(self.rejected_by)}), it leaves the ANE"
        elif self.off_rules:
            top = sorted(self.off_rules.items(), key=lambda item: -item[1])
            off += " (" + ", ".join(f"{rule} {n}" for rule, n in top[:3]) + (", …" if len(top) > 3 else "") + ")"
        notes = []
        if self.glue and not self.rejected_by:
            notes.append(f"{self.glue} glue")
        if self.by_cost:
            notes.append(f"{self.by_cost} by cost")
        unknown = f", {self.unknown} unknown" if self.unknown else ""
        n = self.copies
        copies = f": {n} cop{'y' if n == 1 else 'ies'} between compute units" if n else ""
        segments = f"{len(self.segments)} segment{'' if len(self.segments) == 1 else 's'}"
        noted = f" [{', '.join(notes)}]" if notes else ""
        sure = ", ".join(f"{n} {key}" for key, n in self.as_dict()["confidence"].items())
        return f"placement on {chips}: {self.ops} ops, {off}{noted}{unknown}, {segments}{copies}; confidence: {sure}"


_KNOWN_OPS = frozenset(SSAOpRegistry.core_ops) | frozenset(SSAOpRegistry.dialect_ops)


def _dispatch() -> dict[str | None, tuple[PlacementRule, ...]]:
    """The op rules by op type (``None``: the rules of every op)."""
    by_type: dict[str | None, list[PlacementRule]] = {}
    for rule in OP_RULES:
        for op_type in rule.op_types or (None,):
            by_type.setdefault(op_type, []).append(rule)
    return {op_type: tuple(rules) for op_type, rules in by_type.items()}


_BY_TYPE = _dispatch()


def _rules_of(op_type: str) -> tuple[PlacementRule, ...]:
    return _BY_TYPE.get(op_type, ()) + _BY_TYPE.get(None, ())


def _message(rule: PlacementRule, subject: str, hit: Hit, checked: frozenset[int]) -> tuple[str, str]:
    """The finding's message and its cause (the message without its subject)."""
    on = chip_families.describe(hit.families & checked, checked)
    cause = f"{hit.why}: {rule.outcome} on {on}"
    return f"{subject} {cause} ({rule.sources[0].ref}); {rule.advice}", hit.shared or cause


class _Assessor:
    def __init__(
        self, checked: frozenset[int], dims: DimNames, reported: set[tuple[str, str]], fixes: dict[str, set[str]]
    ) -> None:
        self.checked, self.dims, self.reported, self.fixes = checked, dims, reported, fixes
        self.findings: list[Finding] = []
        self.reader = Reader()

    def finding(
        self, rule: PlacementRule, op_name: str, op_type: str, subject: str, hit: Hit, interface: str | None = None
    ) -> bool:
        """Record a finding if the hit holds on a checked chip; whether it did. ``interface``: why the
        op is one coremltools adds for the interface (:func:`~.facts.added_for_interface`): then
        the finding is an info, with that reason."""
        if not hit.families & self.checked:
            return False
        if rule.reported and (rule.id, op_name) not in self.reported:  # a pass's dry run may have said it already
            message, cause = _message(rule, subject, hit, self.checked)
            fix = next((name for name in rule.fix_passes if name in self.fixes.get(op_name, ())), None)
            severity = rule.severity if interface is None else "info"
            if interface is not None:
                message, cause = f"{message} ({interface})", f"{cause} ({interface})"
            self.findings.append(Finding(rule.id, severity, op_name, self.dims(message), fix, op_type, cause))
        return True

    def judge(self, op: Operation, place: OpPlace) -> None:
        """Step 1: the op rules, on ``op`` and the ops of its bodies (their findings count; they run
        where ``op`` runs)."""
        seen = self.reader.view(op)
        if op.op_type not in _KNOWN_OPS or seen.max_rank < 0:
            place.side = UNJUDGED
        interface = added_for_interface(op)
        for rule in _rules_of(op.op_type):
            verdict = rule.check(op, seen)
            if verdict is None:
                continue
            if verdict is UNKNOWN:
                if place.side == ANE:
                    place.side = UNJUDGED
            elif (
                self.finding(rule, op.name, op.op_type, f"{op.op_type} '{op.name}'", verdict, interface)
                and rule.moves_off
            ):
                place.take_off(BY_COST if rule.by_cost else BY_RULE, rule, rule.confidence)
        for block in op.blocks:
            for inner in block.operations:
                if not is_weight_op(inner.op_type):
                    self.judge(inner, OpPlace(inner.name, inner.op_type))

    def program_rules(
        self, func: Function, places: dict[Operation, OpPlace]
    ) -> tuple[list[PlacementRule], list[tuple[PlacementRule, tuple[Operation, ...]]]]:
        """The program rules' findings; the ops their hits take off. Returns the model-level rejections
        that hold and the cost decisions left for step 3."""
        rejected: list[PlacementRule] = []
        deferred: list[tuple[PlacementRule, tuple[Operation, ...]]] = []
        view = FunctionView(func, self.reader)
        for rule in PROGRAM_RULES:
            for found in rule.check(view, self.dims):
                if not self.finding(rule, found.name, found.kind, found.subject, found.hit):
                    continue
                if rule.whole_model:
                    rejected += [rule] if rule not in rejected else []
                elif rule.by_cost:
                    deferred.append((rule, found.ops))
                elif rule.moves_off:
                    for op in found.ops:
                        owner = places.get(_top_level(op, func))
                        if owner is not None:
                            owner.take_off(BY_RULE, rule, rule.confidence)
        return rejected, deferred

    def function(self, func: Function, placement: Placement) -> None:
        top = [op for op in func.operations if not is_weight_op(op.op_type)]
        places = {op: OpPlace(op.name, op.op_type) for op in top}
        for op, place in places.items():
            self.judge(op, place)
        rejected, deferred = self.program_rules(func, places)
        graph = _Graph(places)
        _join_glue(graph)
        for rule, ops in deferred:  # step 3: the planner's cost decision, on what is left on the ANE
            for op in ops:
                owner = places.get(_top_level(op, func))
                if owner is not None and owner.side == ANE:
                    owner.take_off(BY_COST, rule, rule.confidence)
        for place in places.values():
            if rejected:  # step 4
                place.side, place.why, place.rules = OFF_ANE, BY_MODEL, [r.id for r in rejected]
                place.confidence = min((r.confidence for r in rejected), key=STRENGTH.index)
            elif place.side == ANE:
                place.confidence = MEASURED if place.op_type in PLANNED_ON_ANE else UNSOURCED
            elif place.side == UNJUDGED:
                place.confidence = UNSOURCED
        for rule in rejected:
            if rule.id not in placement.rejected_by:
                placement.rejected_by.append(rule.id)
        _summarize(graph, placement)


def _top_level(op: Operation, func: Function) -> Operation:
    while op.enclosing_block is not func and op.enclosing_block is not None:
        op = op.enclosing_block.outer_op
    return op


class _Graph:
    """The top-level ops of a function with their places, and who feeds whom among them (made once)."""

    def __init__(self, places: dict[Operation, OpPlace]) -> None:
        self.places = places
        self.ops = list(places)
        self.producers: dict[Operation, list[Operation]] = {op: [] for op in self.ops}
        self.readers: dict[Operation, list[Operation]] = {op: [] for op in self.ops}
        for op in self.ops:
            for value in op._input_vars.values():
                for var in value if isinstance(value, (list, tuple)) else (value,):
                    producer = var.op if isinstance(var, Var) else None
                    if producer is not None and producer in places:
                        self.producers[op].append(producer)
                        self.readers[producer].append(op)

    def neighbours(self, op: Operation) -> tuple[list[OpPlace], list[OpPlace]]:
        """The places of ``op``'s producers and of its readers."""
        return [self.places[p] for p in self.producers[op]], [self.places[r] for r in self.readers[op]]


def _join_glue(graph: _Graph) -> None:
    """Step 2: glue on the Neural Engine whose every producer, or every reader, is off goes off with it
    (forward through chains of glue, then backward, until nothing moves)."""
    glue = [op for op in graph.ops if op.op_type in GLUE_OPS]
    moved = True
    while moved:
        moved = False
        for order in (glue, glue[::-1]):
            for op in order:
                place = graph.places[op]
                if place.side != ANE:
                    continue
                for neighbours in graph.neighbours(op):
                    if neighbours and all(n.side == OFF_ANE for n in neighbours):
                        island = neighbours[0]
                        place.side, place.rules, place.confidence = OFF_ANE, list(island.rules), MEASURED
                        place.why = BY_COST if island.why == BY_COST else BY_GLUE
                        moved = True
                        break


def _sides(graph: _Graph, costs: bool = True) -> dict[Operation, str]:
    """Each op's side for the segments: an unknown op takes the side of its first judged producer, else
    of its first judged reader, else the Neural Engine's. ``costs=False``: an op off by cost counts on
    the Neural Engine (the rules' segments)."""

    def side_of(place: OpPlace) -> str:
        return ANE if not costs and place.why == BY_COST else place.side

    sides = {}
    for op, place in graph.places.items():
        side = side_of(place)
        if side == UNJUDGED:
            producers, readers = graph.neighbours(op)
            judged = [side_of(n) for n in producers + readers if n.side != UNJUDGED]
            side = judged[0] if judged else ANE
        sides[op] = side
    return sides


def _segments(graph: _Graph, sides: dict[Operation, str], whole: bool) -> list[list[Operation]]:
    """The ops in segments as Core ML's partitioner forms them: the connected regions of ops on one side
    (through the values they pass), by their first op; one segment when the whole model is rejected."""
    ops = graph.ops
    if whole:
        return [ops] if ops else []
    root = {op: op for op in ops}

    def find(op):
        while root[op] is not op:
            root[op] = root[root[op]]
            op = root[op]
        return op

    for op in ops:
        for producer in graph.producers[op]:
            if sides[producer] == sides[op]:
                root[find(producer)] = find(op)
    groups: dict[Operation, list[Operation]] = {}
    for op in ops:  # in program order: each group's ops, and the groups by their first op
        groups.setdefault(find(op), []).append(op)
    return list(groups.values())


def _summarize(graph: _Graph, placement: Placement) -> None:
    places = graph.places
    for place in places.values():
        placement.ops += 1
        placement.places.append(place)
        key = CONFIDENCE_KEYS[place.confidence]
        placement.confidence[key] = placement.confidence.get(key, 0) + 1
        if place.side == UNJUDGED:
            placement.unknown += 1
        elif place.side == OFF_ANE:
            placement.off_ane += 1
            placement.by_cost += place.why == BY_COST
            placement.glue += place.why == BY_GLUE
            if place.why != BY_GLUE:
                for rule in place.rules:
                    placement.off_rules[rule] = placement.off_rules.get(rule, 0) + 1
    whole = all(place.why == BY_MODEL for place in places.values())
    sides = _sides(graph)
    groups = _segments(graph, sides, whole)
    placement.rule_segments += len(_segments(graph, _sides(graph, costs=False), whole))
    segment_of = {op: number for number, group in enumerate(groups) for op in group}
    crossings = {(segment_of[p], segment_of[op]) for op in graph.ops for p in graph.producers[op]}
    placement.copies += sum(1 for a, b in crossings if a != b)
    for group in groups:
        side = OFF_ANE if whole else sides[group[0]]
        segment = Segment(side, cost=side == OFF_ANE)
        for op in group:
            place = places[op]
            segment.ops.append(place.name)
            segment.cost = segment.cost and place.why == BY_COST
            segment.confidence = max(segment.confidence, place.confidence, key=STRENGTH.index)
            for rule in place.rules:
                if rule not in segment.rules:
                    segment.rules.append(rule)
        placement.segments.append(segment)


def assess(
    prog: Program,
    *,
    checked: frozenset[int] = chip_families.ALL,
    dims: DimNames | None = None,
    reported: set[tuple[str, str]] | None = None,
    fixes: dict[str, set[str]] | None = None,
) -> tuple[list[Finding], Placement]:
    """The placement findings of ``prog`` on the chip families ``checked`` and the predicted
    placement. ``reported``: (rule, op) pairs another check already reported (not repeated);
    ``fixes``: op name -> the passes whose dry run would change that op (a rule naming one of them
    as its fix says so)."""
    assessor = _Assessor(checked, dims or DimNames.of_program(prog), reported or set(), fixes or {})
    placement = Placement(tuple(chip_families.from_number(n).label for n in sorted(checked)))
    for func in prog.functions.values():
        assessor.function(func, placement)
    return assessor.findings, placement
