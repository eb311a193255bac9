"""Start coremltools without the frameworks it probes for: the command reads, lints and fixes
MIL, and never needs them.

``import coremltools`` tries to import every optional framework it can convert from
(``coremltools/_deps/__init__.py``: torch, torchvision, torchaudio, executorch, torchao,
transformers, tensorflow, scikit-learn, xgboost, libsvm) and keeps the ones it finds. Importing
torch and transformers alone costs seconds on every command. While :func:`optional_frameworks_refused`
is active, importing one of them raises ``ModuleNotFoundError``, which coremltools takes as "not
installed".
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from typing import Iterator

#: Top-level modules coremltools probes for at import and the command never uses.
OPTIONAL_FRAMEWORKS = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "executorch",
        "torchao",
        "transformers",
        "tensorflow",
        "sklearn",
        "xgboost",
        "libsvm",
    }
)


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in OPTIONAL_FRAMEWORKS:
            raise ModuleNotFoundError(f"mil-passes does not load {fullname}", name=fullname)
        return None


@contextlib.contextmanager
def optional_frameworks_refused() -> Iterator[bool]:
    """Refuse the optional frameworks while coremltools is first imported; yields whether it did.

    Does nothing when coremltools is already imported (it has already found its frameworks, and
    the caller may use them).
    """
    if "coremltools" in sys.modules:
        yield False
        return
    finder = _Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield True
    finally:
        sys.meta_path.remove(finder)
