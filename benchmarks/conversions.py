"""``ct.convert`` of the torch models with coremltools' DEFAULT pipeline and with the package's.

The package's passes are timed inside the conversion too: their share of a real conversion.
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Iterator

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

import mil_passes

from .measure import Samples, cpu_time, interpreter_seconds
from .programs import TorchWorkload, op_count


@dataclass
class ConversionCosts:
    """Best CPU seconds of ``ct.convert`` of a torch model (tracing included) with coremltools'
    DEFAULT pipeline and with ``mil_passes.pipeline()``; ``passes`` is the package's passes' own
    time inside the latter, by pass; ``interpreter`` evaluates the converted program."""

    name: str
    ops: int
    default: float
    with_passes: float
    passes: dict[str, float] = field(default_factory=dict)
    interpreter: float | None = None


def conversion_costs(workload: TorchWorkload, repeats: int) -> ConversionCosts:
    import coremltools as ct
    from mil_passes.testing.models.torch_modules import convert

    samples, own, model = Samples(), Samples(), None
    for rep in range(repeats):
        runs = [("default", ct.PassPipeline.DEFAULT), ("with_passes", mil_passes.pipeline())]
        for key, pipeline in runs if rep % 2 == 0 else runs[::-1]:
            inside: dict[str, float] = {}
            with _timing_package_passes(inside), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer and renamed-output warnings, every run
                seconds, model = cpu_time(partial(convert, workload.case, workload.module, workload.examples, pipeline))
            samples.add(key, seconds)
            if key == "with_passes":
                for name in mil_passes.PASS_NAMES:
                    own.add(name, inside.get(name, 0.0))
                converted = model
    prog = converted._mil_program
    feeds = {f"input_{i}": x for i, x in enumerate(workload.examples)}
    return ConversionCosts(
        workload.name,
        op_count(prog),
        samples.best("default"),
        samples.best("with_passes"),
        {name: own.best(name) for name in mil_passes.PASS_NAMES},
        interpreter_seconds(prog, feeds, repeats),
    )


@contextmanager
def _timing_package_passes(sink: dict[str, float]) -> Iterator[None]:
    """While open, each package pass that a pipeline runs adds its CPU seconds to ``sink[name]``."""
    originals = {name: PASS_REGISTRY.passes[name] for name in mil_passes.PASS_NAMES}
    for name, cls in originals.items():
        PASS_REGISTRY.passes[name] = _timed(cls, name, sink)
    try:
        yield
    finally:
        PASS_REGISTRY.passes.update(originals)


def _timed(cls: type, name: str, sink: dict[str, float]) -> type:
    def __call__(self, prog: Program) -> None:
        start = time.process_time()  # no gc.collect() here: it would bill the conversion
        try:
            cls.__call__(self, prog)
        finally:
            sink[name] = sink.get(name, 0.0) + time.process_time() - start

    # Same name as the pass: coremltools records str(pass) in the scope of the ops it makes.
    return type(cls.__name__, (cls,), {"__call__": __call__, "__qualname__": cls.__qualname__})
