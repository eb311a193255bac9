"""``classify``: the op coremltools adds for ``ct.ClassifierConfig``, with outputs as Core ML gives them.

Core ML's classifier answers with the top class (a ``str`` label, or an ``int`` one for integer
classes; the first of equal probabilities) and a dict from every class to its probability, in
the order of the classes.
"""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("classify")
def classify(op, args):
    probabilities = np.asarray(args["probabilities"], dtype=np.float64).reshape(-1)
    classes = list(getattr(args["classes"], "ls", args["classes"]))
    if len(classes) != probabilities.size:
        raise ValueError(f"classify '{op.name}': {probabilities.size} probabilities for {len(classes)} classes")
    labels = [_label(value) for value in classes]
    top = labels[int(np.argmax(probabilities))]
    return top, dict(zip(labels, probabilities.tolist()))


def _label(value):
    """A class as Core ML keys it: ``str`` or ``int``."""
    if isinstance(value, (str, np.str_)):
        return str(value)
    return int(value)
