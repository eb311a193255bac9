"""Testing tools: feeds, exact equivalence, the ``check_pass`` harness, hypothesis strategies."""

from .check import (
    assert_equivalent,
    assert_same_interface,
    check_pass,
    interface,
    op_counts,
    random_array,
    random_inputs,
)

__all__ = [
    "random_inputs",
    "random_array",
    "assert_equivalent",
    "assert_same_interface",
    "check_pass",
    "op_counts",
    "interface",
]
