"""Draws that depend on the seed and the strategy only, not on which modules a process has loaded.

Hypothesis (6.131 and later) draws about one number in twenty from a pool of constants, and that
pool holds every literal of every *local* module in ``sys.modules`` (the project's own code) when
the draw is made. A fuzz run's programs then change with any edit anywhere in the package, and
with what the process imported before: a script that imports the CLI draws other programs than
the fuzzer for the same seed and strategy (measured: the 6th of 40 programs differs). Inside
:func:`seed_only_draws`, hypothesis draws its constants from its own built-in pool only, so a
target's programs are the same alone, after other targets, and in any process.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

try:  # hypothesis internals, present since 6.131; without them there is no local pool to leave out
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.conjecture.choice import choice_constraints_key, choice_permitted
except ImportError:  # pragma: no cover - older hypothesis
    providers = None  # type: ignore[assignment]

__all__ = ["seed_only_draws"]

_PERMITTED: dict[Any, tuple] = {}  # (choice type, constraints) -> the built-in constants allowed


def _built_in_constants(choice_type: Any, constraints: Any) -> tuple:
    key = (choice_type, choice_constraints_key(choice_type, constraints))
    if key not in _PERMITTED:
        pool = providers.GLOBAL_CONSTANTS.set_for_type(choice_type)
        _PERMITTED[key] = tuple(choice for choice in pool if choice_permitted(choice, constraints))
    return _PERMITTED[key]


if providers is not None and hasattr(providers.HypothesisProvider, "_maybe_draw_constant"):

    class _SeedOnlyProvider(providers.HypothesisProvider):
        """Hypothesis's own provider, its constants drawn from the built-in pool only."""

        def _maybe_draw_constant(self, choice_type: Any, constraints: Any, *, p: float = 0.05) -> Any:
            assert self._random is not None
            if self._random.random() > p:  # the same odds as hypothesis's own
                return None
            constants = _built_in_constants(choice_type, constraints)
            return self._random.choice(constants) if constants else None

else:  # pragma: no cover - older hypothesis
    _SeedOnlyProvider = None  # type: ignore[assignment,misc]


@contextlib.contextmanager
def seed_only_draws() -> Iterator[None]:
    """Within this block, hypothesis's default backend leaves out the local modules' constants."""
    if _SeedOnlyProvider is None:  # pragma: no cover - older hypothesis
        yield
        return
    previous = providers.AVAILABLE_PROVIDERS["hypothesis"]
    providers.AVAILABLE_PROVIDERS["hypothesis"] = _SeedOnlyProvider
    try:
        yield
    finally:
        providers.AVAILABLE_PROVIDERS["hypothesis"] = previous
