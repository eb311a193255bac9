"""webnn::canonicalize_inplace_pattern — coremltools' pass, without its crash on a twice-rewritten op.

``common::canonicalize_inplace_pattern`` moves each ``coreml_update_state`` right after the op that
computes the value it writes, rebuilding it under that op's scopes. coremltools appends a pass to
an op's ``COREMLTOOLS_GRAPH_PASS`` scope each time a pass rewrites it, so an op two passes made
(a slice one pass wrote and ``const_elimination`` then folded into a const) carries two entries;
``ScopeInfo`` refuses more than one, and the pass raises ``ValueError: COREMLTOOLS_GRAPH_PASS scope
cannot have len > 1`` on any program where such an op's value is written to a state
(docs/coremltools-passes.md). This subclass, which ``mil_passes.pipeline()`` runs in its place,
passes on the last entry only (the pass that made the op); with one entry it does exactly what
coremltools does. Scopes are provenance metadata: no value changes either way.

Given (a window of the const part of a concat, folded by const_elimination after
``webnn::concat_slice_to_slice_concat`` sliced the const)::

    %window = const(val=[...])    # scopes: COREMLTOOLS_GRAPH_PASS = [ConcatSliceToSliceConcat, const_elimination]
    %y = relu(x=%x)
    %s = coreml_update_state(state=%state, value=%window)

Result::

    %window = const(val=[...])
    %s = coreml_update_state(state=%state, value=%window)
    %y = relu(x=%x)
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.passes.defs.optimize_state import (
    canonicalize_inplace_pattern as CoremltoolsCanonicalizeInplacePattern,
)
from coremltools.converters.mil.mil.scope import ScopeInfo, ScopeSource

from ..declaration import PassDeclaration, Replacement
from . import register

DECLARATION = PassDeclaration(
    name="canonicalize_inplace_pattern",
    summary="coremltools' `canonicalize_inplace_pattern`, accepting an op several passes rewrote.",
    replaces=Replacement(
        "common::canonicalize_inplace_pattern",
        "safe to replace: only DEFAULT names it, and ct.convert does not remove it by name",
    ),
)


def single_pass_scopes(op: Operation) -> list[ScopeInfo]:
    """``op``'s scopes as ``ScopeInfo``s, its graph-pass scope cut to the last pass that made it."""
    scopes = []
    for source, data in op.scopes.items():
        if source == ScopeSource.COREMLTOOLS_GRAPH_PASS and len(data) > 1:
            data = data[-1:]
        scopes.append(ScopeInfo(source=source, data=data))
    return scopes


@register(DECLARATION)
class CanonicalizeInplacePattern(CoremltoolsCanonicalizeInplacePattern):
    """``common::canonicalize_inplace_pattern`` that accepts an op several passes rewrote."""

    @staticmethod
    def _construct_scope_info_list_from_op_scopes(op: Operation) -> list[ScopeInfo]:
        return single_pass_scopes(op)
