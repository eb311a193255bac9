"""The program generator builds only programs coremltools accepts: each op-table entry takes the
dtypes of its op's own type domain in the drawn opset, and no drawn program, for any fuzz target
or opset, fails coremltools' type check or type inference while it is built (``make test``: a
small budget; ``HYPOTHESIS_PROFILE=deep``, as ``make fuzz`` runs it: a deep one)."""

from __future__ import annotations

import os

import coremltools as ct
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from mil_passes.testing.fuzz.fuzzer import default_targets, select_targets, strategy_for
from mil_passes.testing.programs.ops import OP_TABLE
from mil_passes.testing.programs.type_domains import accepted_dtypes, held_dtypes, op_class
from mil_passes.testing.strategies import OPSETS, programs

DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
EXAMPLES = 3000 if DEEP else 60
TARGETS = (*default_targets(), *select_targets(None, None, ["default"]))


def test_type_domains_are_coremltools_own_per_opset():
    assert accepted_dtypes("shape", "x", ct.target.iOS17) == ("fp32", "fp16", "int32", "bool")  # no uint8
    assert "uint8" in accepted_dtypes("cast", "x", ct.target.iOS17)
    assert "uint8" not in accepted_dtypes("cast", "x", ct.target.iOS16)
    assert accepted_dtypes("gather", "x", ct.target.iOS15) == ("fp32", "fp16", "int32")
    assert accepted_dtypes("select", "cond", ct.target.iOS18) == ("bool",)
    assert accepted_dtypes("concat", "values", ct.target.iOS17) == held_dtypes(ct.target.iOS17)
    assert op_class("cast", ct.target.iOS17) is not op_class("cast", ct.target.iOS15)
    with pytest.raises(KeyError, match="op 'shape' has no input 'y': it has x"):
        accepted_dtypes("shape", "y", ct.target.iOS17)


@pytest.mark.parametrize("opset", OPSETS, ids=lambda o: o.name)
def test_every_entry_takes_a_part_of_its_ops_domain(opset):
    class Opset:
        def __init__(self, opset):
            self.opset = opset

    for entry in OP_TABLE:
        if entry.input is None:
            continue
        domain = accepted_dtypes(entry.op_type, entry.input, opset)
        taken = entry.dtypes(Opset(opset))  # type: ignore[arg-type]
        assert taken and set(taken) <= set(domain), entry.op_type
        assert entry.narrower is not None or taken == domain, entry.op_type


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(st.data())
def test_no_drawn_program_fails_coremltools_type_inference_while_built(data):
    """Every fuzz target's programs (the package's, DEFAULT's plants) and programs of every opset;
    an exception while drawing fails the test (hypothesis reports the draw)."""
    kind = data.draw(st.sampled_from(("target", "opset")))
    if kind == "target":
        data.draw(strategy_for(data.draw(st.sampled_from(TARGETS))))
    else:
        data.draw(programs(data.draw(st.sampled_from(OPSETS))))
