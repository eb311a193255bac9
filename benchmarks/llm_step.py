"""A decoder step on the reference interpreter against torch eager, at LLM widths (issue 35).

    .venv/bin/python -m benchmarks.llm_step [--only smollm_135m llama_1b int4 conv memory table
        verify_memory] [--layers-1b 2] [--verify-layers 16] [--cache DIR]

One thread throughout (``torch.set_num_threads(1)``; ``OPENBLAS_NUM_THREADS=1`` and friends set
before numpy loads). Prints, from one run:

- ``smollm_135m``: the stateful Llama decoder of ``mil_passes/testing/models/llama.py`` at
  SmolLM-135M's shape (30 layers), a 4-token prompt then 3 decode steps through
  ``mil_passes.reference.predict`` with a state, against the torch module stepped the same way:
  CPU seconds, best of steps 1-3 (the decode steps), and the ratio (target ≤ 3x);
- ``llama_1b``: the same at Llama-3.2-1B's widths with ``--layers-1b`` layers (the embedding and
  the 128256-wide output are the full model's; the ratio per step is what is compared; target
  ≤ 2.5x);
- ``int4``: the 135M program compressed by ``coremltools.optimize`` (int4, per block of 32) against
  the uncompressed one, both on the interpreter (target ≤ 1.5x);
- ``conv``: a ResNet-style net at 160x160 with 32-128 channels, converted at FLOAT32 (and, for
  information, FLOAT16), one ``evaluate`` against torch eager: the median, over ``CONV_ROUNDS``
  rounds, of the ratio of the two runs of a round (target ≤ 2.5x at FLOAT32, the oracle's target).
  A shared host's speed moves by half within seconds; the runs of a round are milliseconds apart,
  while the best run of each can come from different moments;
- ``memory``: in a child process that loads the saved 1B-width package (uncompressed, then int4),
  the peak resident memory of the prompt and of the decode steps (``VmHWM`` after
  ``/proc/self/clear_refs``), over the resident memory after ``import coremltools``, against the
  fp16 weights plus the states (target ≤ ~1.5x, on the decode steps);
- ``table``: one markdown table, a row per shape (135M with 30 layers, 1B widths with
  ``--layers-1b``) and weights (uncompressed, int8, int4, palettized): the decode step (best of
  steps 1-3, CPU seconds, in a child process) against torch eager and against the uncompressed
  step; the peak resident memory of the decode steps in that child (as ``memory`` measures it)
  against the fp16 weights plus the states; and the CPU seconds (user + system, of the child
  process and its children, from ``os.wait4``) of ``mil-passes verify PACKAGE`` with its defaults
  against ``mil-passes optimize PACKAGE -o OUT``, both the installed command, with verify's peak
  resident memory (``ru_maxrss`` of the child). Where the command fails on its own random feeds
  (exit 2; it does on this decoder: they size ``inputIds`` and ``causalMask``'s axes apart), the
  figure is ``verify_package`` with the same defaults on given feeds, in a child process, marked
  ``†``. The targets: 135M step ≤ 3x torch, 1B ≤ 2.5x (uncompressed), int4 ≤ 1.5x
  uncompressed (both shapes), decode-step memory ≤ ~1.5x (1B, uncompressed), verify ≤ 5x optimize
  (the 30-layer decoder, uncompressed);
- ``verify_memory``: ``mil-passes verify`` (its defaults; given feeds as in ``table`` where the
  command fails on its own) of the 1B-shape package with ``--verify-layers`` layers (default 16:
  Llama-3.2-1B's own, 2.3 GiB of fp16 weights; converting it once takes ~16 GB), its peak resident
  memory (``ru_maxrss`` of the child) against 8 GiB.

Converted packages are kept under ``--cache`` (default: a temporary folder).
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # before numpy loads its BLAS
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONV_ROUNDS = 15
"""Rounds of the conv section: torch eager, then each program, one run each."""

TARGETS = {"smollm_135m": 3.0, "llama_1b": 2.5, "int4": 1.5, "conv": 2.5, "memory": 1.5, "verify": 5.0}
PROMPT, DECODE_STEPS = 4, 3
SECTIONS = ("smollm_135m", "llama_1b", "int4", "conv", "memory", "table", "verify_memory")
KINDS = ("uncompressed", "int8", "int4", "palettized")
#: verify's peak resident memory on a 1B-shape model (issue 35: "within ~8 GB").
VERIFY_MEMORY_TARGET = 8 << 30
MIB, GIB = 1 << 20, 1 << 30


def _cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target <= {target:g}x: {'met' if ratio <= target else 'MISSED'})"


def _shape(name: str, layers_1b: int):
    from mil_passes.testing.models import llama

    shape = llama.SHAPES[name]
    return shape.with_layers(layers_1b) if name == "llama_1b" else shape


def _package(shape, cache: Path, compression: str | None = None) -> Path:
    """The converted (and maybe compressed) package of ``shape``, converted once into ``cache``."""
    import coremltools as ct

    from mil_passes.testing.models import llama

    path = cache / f"{shape.name}_{shape.layers}l{'_' + compression if compression else ''}.mlpackage"
    if path.exists():
        return path
    plain = cache / f"{shape.name}_{shape.layers}l.mlpackage"
    if not plain.exists():
        module = llama.build(shape)
        llama.convert(module, shape).save(str(plain))
        del module
    if compression:
        llama.compress(ct.models.MLModel(str(plain), skip_model_load=True), compression).save(str(path))
    return path


def _load(path: Path):
    import coremltools as ct

    return ct.models.MLModel(str(path), skip_model_load=True)


def interpreter_steps(path: Path, shape) -> list[float]:
    """CPU seconds of each prediction (prompt, then decode steps) of the package, from a fresh state."""
    from mil_passes.reference import make_state, predict
    from mil_passes.testing.models import llama

    mlmodel = _load(path)
    state = make_state(mlmodel)
    return [_cpu(lambda f=feed: predict(mlmodel, f, state=state))[0] for feed in llama.decode_feeds(shape)]


def torch_steps(shape) -> list[float]:
    """CPU seconds of each step of the torch module (fp32), stepped the same way."""
    import torch

    from mil_passes.testing.models import llama

    torch.set_num_threads(1)
    stepper = llama.TorchStepper(llama.build(shape))
    return [_cpu(lambda f=feed: stepper.step(f))[0] for feed in llama.decode_feeds(shape)]


def decoder(name: str, args, cache: Path) -> float:
    shape = _shape(name, args.layers_1b)
    path = _package(shape, cache)
    mine = interpreter_steps(path, shape)
    theirs = torch_steps(shape)
    best_mine, best_theirs = min(mine[1:]), min(theirs[1:])
    ratio = best_mine / best_theirs
    print(
        f"{name} ({shape.layers} layers): interpreter step {best_mine:.3f} s, torch {best_theirs:.3f} s "
        f"(prompt {mine[0]:.2f} s / {theirs[0]:.2f} s): {_verdict(ratio, TARGETS[name])}"
    )
    return ratio


def int4(args, cache: Path) -> float:
    shape = _shape("smollm_135m", args.layers_1b)
    plain, compressed = _package(shape, cache), _package(shape, cache, "int4")
    uncompressed_steps = interpreter_steps(plain, shape)
    int4_steps = interpreter_steps(compressed, shape)
    ratio = min(int4_steps[1:]) / min(uncompressed_steps[1:])
    print(
        f"int4 per block ({shape.name}): step {min(int4_steps[1:]):.3f} s against "
        f"{min(uncompressed_steps[1:]):.3f} s uncompressed (first prediction {int4_steps[0]:.2f} s): "
        f"{_verdict(ratio, TARGETS['int4'])}"
    )
    return ratio


def conv_net():
    """A ResNet-style net for 160x160 images: a strided stem, basic blocks at 32, 64 and 128 channels."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inputs: int, outputs: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False),
                nn.BatchNorm2d(outputs),
                nn.ReLU(),
                nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False),
                nn.BatchNorm2d(outputs),
            )
            self.skip = (
                nn.Identity()
                if stride == 1 and inputs == outputs
                else nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))
            )

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        Block(32, 32, 1),
        Block(32, 64, 2),
        Block(64, 64, 1),
        Block(64, 128, 2),
        Block(128, 128, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return net.eval()


def conv(args, cache: Path) -> float:
    import coremltools as ct
    import torch

    from mil_passes.reference import evaluate

    torch.set_num_threads(1)
    net = conv_net()
    image = np.random.default_rng(0).standard_normal((1, 3, 160, 160)).astype(np.float32)
    traced = torch.jit.trace(net, torch.from_numpy(image))
    programs = {
        label: ct.convert(
            traced,
            inputs=[ct.TensorType(name="image", shape=image.shape)],
            convert_to="mlprogram",
            compute_precision=precision,
            skip_model_load=True,
        )._mil_program
        for label, precision in (("fp32", ct.precision.FLOAT32), ("fp16", ct.precision.FLOAT16))
    }
    tensor = torch.from_numpy(image)

    def eager():
        with torch.no_grad():
            net(tensor)

    eager()
    times: dict[str, list[float]] = {"torch": [], **{label: [] for label in programs}}
    for _ in range(CONV_ROUNDS):  # interleaved: each round's runs are milliseconds apart, in one state of the host
        times["torch"].append(_cpu(eager)[0])
        for label, prog in programs.items():
            times[label].append(_cpu(lambda p=prog: evaluate(p, {"image": image}))[0])
    ratio = float(np.median(np.divide(times["fp32"], times["torch"])))
    fp16 = float(np.median(np.divide(times["fp16"], times["torch"])))
    best = {label: min(runs) * 1e3 for label, runs in times.items()}
    print(
        f"conv net 160x160 (32-128 channels), median of {CONV_ROUNDS} paired runs: interpreter fp32 / torch "
        f"{_verdict(ratio, TARGETS['conv'])}; the fp16 program {fp16:.2f}x (best runs: torch {best['torch']:.1f} ms, "
        f"fp32 {best['fp32']:.1f} ms, fp16 {best['fp16']:.1f} ms)"
    )
    return ratio


# -- memory, in a child process ---------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child_memory(path: Path, shape_name: str, layers: int) -> dict:
    """In this process: resident memory after imports, after loading, and at the peak of stepping."""
    import coremltools  # noqa: F401

    from mil_passes.reference import make_state, predict
    from mil_passes.testing.models import llama

    imported = _status_kib("VmRSS")
    mlmodel = _load(path)
    from mil_passes.reference.model_program import model_program

    prog, _ = model_program(mlmodel)
    weights = sum(
        op.outputs[0].val.nbytes
        for op in prog.functions["main"].operations
        if op.op_type == "const" and isinstance(op.outputs[0].val, np.ndarray)
    )
    state = make_state(mlmodel)
    states = sum(cell.value.nbytes for cell in state.cells.values())
    loaded = _status_kib("VmRSS")
    shape = llama.SHAPES[shape_name].with_layers(layers)
    prompt, *steps = llama.decode_feeds(shape)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from the current RSS
    seconds = [_cpu(lambda: predict(mlmodel, prompt, state=state))[0]]
    prompt_peak = _status_kib("VmHWM")
    Path("/proc/self/clear_refs").write_text("5")
    for feed in steps:
        seconds.append(_cpu(lambda f=feed: predict(mlmodel, f, state=state))[0])
    peak = _status_kib("VmHWM")
    return {
        "imported": imported << 10,
        "loaded": loaded << 10,
        "prompt_peak": prompt_peak << 10,
        "peak": peak << 10,
        "consts": weights,
        "states": states,
        "seconds": seconds,  # CPU seconds of the prompt, then of each decode step
    }


def memory(args, cache: Path) -> float:
    shape = _shape("llama_1b", args.layers_1b)
    plain = _package(shape, cache)
    fp16 = None
    worst = 0.0
    for label, path in (("fp16", plain), ("int4", _package(shape, cache, "int4"))):
        figures = stepping_child(path, shape)
        if fp16 is None:
            fp16 = figures["consts"]  # the uncompressed program's consts: its fp16 weights
        budget = fp16 + figures["states"]
        above = figures["peak"] - figures["imported"]
        prompt_above = figures["prompt_peak"] - figures["imported"]
        ratio = above / budget
        worst = max(worst, ratio)
        mib = 1 << 20
        print(
            f"memory, 1B widths {shape.layers} layers, {label}: consts {figures['consts'] / mib:.0f} MiB, fp16 weights "
            f"{fp16 / mib:.0f} MiB + states {figures['states'] / mib:.0f} MiB; resident after import "
            f"{figures['imported'] / mib:.0f} MiB, loaded +{(figures['loaded'] - figures['imported']) / mib:.0f} MiB, "
            f"peak of the {PROMPT}-token prompt +{prompt_above / mib:.0f} MiB ({prompt_above / budget:.2f}x), "
            f"peak of the decode steps +{above / mib:.0f} MiB: {_verdict(ratio, TARGETS['memory'])}"
        )
    return worst


# -- child processes: stepping, the installed command ------------------------------------------


@dataclass
class ChildRun:
    """A finished child process: its exit status, CPU seconds (user + system, its own children
    included), peak resident memory (``ru_maxrss``, its own: :data:`LAUNCHER`) and output."""

    returncode: int
    cpu: float
    maxrss: int  # bytes
    stdout: str
    stderr: str


#: Runs ``argv[2:]`` as its own child and writes that child's exit status and rusage as JSON to
#: ``argv[1]``. A process's ``ru_maxrss`` keeps the resident memory of the process image it had
#: before ``exec`` (Linux records the old image's peak at ``exec``): a child forked from this
#: benchmark, with torch loaded, would count this process's memory as its own. Forked from this
#: small launcher (``python -S``, a few MiB), the measured child's figure is its own.
LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, usage.ru_maxrss], out)
"""


def run_child(argv: list[str]) -> ChildRun:
    """``argv`` run to its end from the project's root, measured by ``os.wait4`` in a small launcher
    (:data:`LAUNCHER`): its CPU seconds (its own children's included) and peak resident memory."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as folder:
        figures = Path(folder) / "rusage.json"
        launcher = [sys.executable, "-S", "-c", LAUNCHER, str(figures), *argv]
        subprocess.run(launcher, stdout=out, stderr=err, cwd=ROOT, stdin=subprocess.DEVNULL, check=True)
        returncode, cpu, maxrss = json.loads(figures.read_text())
        out.seek(0)
        err.seek(0)
        return ChildRun(
            returncode,
            cpu,
            maxrss << 10,  # KiB on Linux
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def stepping_child(path: Path, shape) -> dict:
    """:func:`child_memory`'s figures (memory, and the CPU seconds of each prediction) for the
    package at ``path``, measured in a fresh process."""
    done = run_child(
        [sys.executable, "-m", "benchmarks.llm_step", "--child-memory", str(path), shape.name, str(shape.layers)]
    )
    if done.returncode != 0:
        raise RuntimeError(f"stepping child failed: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def command() -> str:
    """The installed ``mil-passes`` command beside this interpreter."""
    return str(Path(sys.executable).parent / "mil-passes")


#: Prompt lengths of the feeds verify is given when the command's random feeds cannot run the decoder.
VERIFY_PROMPTS = (1, 2, 3)


@dataclass
class VerifyRun:
    """verify of one package: the child's figures, whether the command itself ran it, and the
    command's one-line error when it could not."""

    run: ChildRun
    by_command: bool
    command_error: str | None
    culprit: str | None


def child_verify(path: Path, shape_name: str, layers: int) -> dict:
    """In this process: ``verify_package`` with verify's defaults (pipeline, steps) but given feeds:
    prompts of :data:`VERIFY_PROMPTS` tokens, each mask as long as its prompt (one per feed, the
    command's default count; each feed is given at every step, so each step writes the same slots)."""
    from mil_passes.testing.models import llama
    from mil_passes.verify import verify_package

    shape = llama.SHAPES[shape_name].with_layers(layers)
    feeds = [llama.decode_feeds(shape, prompt=tokens, steps=0, seed=tokens)[0] for tokens in VERIFY_PROMPTS]
    verification = verify_package(path, feeds=feeds)
    culprit = verification.culprit
    return {"rows": len(verification.rows), "steps": verification.steps, "culprit": culprit and culprit.name}


def _given_feeds_note(error: str) -> str:
    return (
        f"`mil-passes verify PACKAGE` exits 2 ({error}); the figure is verify_package with the same "
        f"defaults on {len(VERIFY_PROMPTS)} given feeds (prompts of {', '.join(map(str, VERIFY_PROMPTS))} "
        "tokens, each given at every one of the 4 steps), in a child process"
    )


def verify_run(path: Path, shape) -> VerifyRun:
    """``mil-passes verify PACKAGE`` with its defaults (exit status 0, or 1 for a culprit). Where the
    command fails on its own random feeds (exit 2: they size ``inputIds`` and ``causalMask``'s two
    axes apart, so the cache write's slice is empty or the mask does not broadcast), the same
    verify in a child process on the decoder's own feeds (:func:`child_verify`)."""
    done = run_child([command(), "verify", str(path)])
    if done.returncode in (0, 1):
        culprit = "named" if done.returncode == 1 else None
        return VerifyRun(done, True, None, culprit)
    lines = done.stderr.strip().splitlines()
    error = lines[-1] if lines else f"exit {done.returncode}"
    if done.returncode != 2 or "fails on a random feed" not in error:
        raise RuntimeError(f"mil-passes verify {path.name} exited {done.returncode}: {error[-800:]}")
    given = run_child(
        [sys.executable, "-m", "benchmarks.llm_step", "--child-verify", str(path), shape.name, str(shape.layers)]
    )
    if given.returncode != 0:
        raise RuntimeError(f"verify child failed: {given.stderr.strip()[-800:]}")
    figures = json.loads(given.stdout.strip().splitlines()[-1])
    return VerifyRun(given, False, error, figures["culprit"])


def optimize_run(path: Path) -> ChildRun:
    """``mil-passes optimize PACKAGE -o OUT`` (OUT in a temporary folder, removed after)."""
    with tempfile.TemporaryDirectory() as folder:
        done = run_child([command(), "optimize", str(path), "-o", str(Path(folder) / path.name), "--quiet"])
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mil-passes optimize {path.name} exited {done.returncode}: {done.stderr.strip()[-800:]}")
    return done


# -- the table: both shapes, every compression ------------------------------------------------


@dataclass
class Row:
    """One row of the table: a shape and its weights, what was measured, against what."""

    shape: str
    layers: int
    kind: str
    step: float  # CPU seconds, best of the decode steps
    torch: float  # torch eager's, best of its decode steps
    uncompressed: float  # the uncompressed package's step
    peak: int  # resident memory of the decode steps above that after import, bytes
    budget: int  # fp16 weights (the uncompressed program's consts) + states, bytes
    verify: float  # CPU seconds of `mil-passes verify`
    optimize: float  # CPU seconds of `mil-passes optimize`
    verify_peak: int  # verify's peak resident memory, bytes
    verify_culprit: str | None  # the pass verify named, if any
    verify_by_command: bool = True  # False: the command failed on its feeds; given feeds (verify_run)

    @property
    def vs_torch(self) -> float:
        return self.step / self.torch

    @property
    def vs_uncompressed(self) -> float:
        return self.step / self.uncompressed

    @property
    def memory(self) -> float:
        return self.peak / self.budget

    @property
    def verify_ratio(self) -> float:
        return self.verify / self.optimize

    def checks(self) -> list[tuple[str, str, float, float]]:
        """The targets of issue 35 this row is measured against: (column, figure, ratio, target).

        Uncompressed: the step against torch (135M ≤ 3x, 1B widths ≤ 2.5x), at 1B widths the
        decode steps' memory, on a 30-layer decoder verify against optimize; int4: the step
        against the uncompressed one. The other ratios are shown, not judged."""
        where = f"{self.shape} ({self.layers} layers) {self.kind}"
        found = []
        if self.kind == "uncompressed":
            target = TARGETS["llama_1b" if self.shape == "llama_1b" else "smollm_135m"]
            found.append(("torch", f"{where} step ÷ torch", self.vs_torch, target))
            if self.shape == "llama_1b":
                figure = f"{where} decode-step peak RSS ÷ (fp16 weights + states)"
                found.append(("memory", figure, self.memory, TARGETS["memory"]))
            if self.layers >= 30:
                found.append(("verify", f"{where} verify ÷ optimize", self.verify_ratio, TARGETS["verify"]))
        if self.kind == "int4":
            found.append(("uncompressed", f"{where} step ÷ uncompressed", self.vs_uncompressed, TARGETS["int4"]))
        return found


COLUMNS = (
    "shape",
    "weights",
    "step (s)",
    "torch (s)",
    "÷ torch",
    "÷ uncompressed",
    "decode peak RSS",
    "÷ (fp16 weights + states)",
    "verify CPU (s)",
    "optimize CPU (s)",
    "verify ÷ optimize",
    "verify peak RSS",
)


def table_text(rows: list[Row]) -> str:
    """The markdown table of ``rows``, a ✓ or MISSED beside each ratio a target applies to."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(COLUMNS) - 2)) + "|"]
    for row in rows:
        targets = {column: target for column, _, _, target in row.checks()}

        def cell(column: str, ratio: float, targets=targets) -> str:
            text = f"{ratio:.2f}x"
            if column not in targets:
                return text
            return text + (" ✓" if ratio <= targets[column] else " MISSED")

        cells = [
            f"{row.shape} ({row.layers} layers)",
            row.kind,
            f"{row.step:.3f}",
            f"{row.torch:.3f}",
            cell("torch", row.vs_torch),
            "—" if row.kind == "uncompressed" else cell("uncompressed", row.vs_uncompressed),
            f"+{row.peak / MIB:,.0f} MiB",
            cell("memory", row.memory),
            f"{row.verify:.1f}"
            + ("" if row.verify_by_command else " †")
            + (" (culprit)" if row.verify_culprit else ""),
            f"{row.optimize:.1f}",
            cell("verify", row.verify_ratio),
            f"{row.verify_peak / GIB:.2f} GiB",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def shape_rows(shape, cache: Path, kinds=KINDS, errors: set[str] | None = None) -> list[Row]:
    """The rows of one shape: ``kinds`` (``uncompressed`` first), torch stepped once; ``errors``
    gets the command's one-line errors where ``mil-passes verify`` could not run a package."""
    errors = set() if errors is None else errors
    torch_best = min(torch_steps(shape)[1:])
    rows: list[Row] = []
    uncompressed = budget = None
    for kind in kinds:
        path = _package(shape, cache, None if kind == "uncompressed" else kind)
        figures = stepping_child(path, shape)
        step = min(figures["seconds"][1:])
        if kind == "uncompressed":
            uncompressed = step
            budget = figures["consts"] + figures["states"]  # the fp16 weights, and the states
        if uncompressed is None or budget is None:
            raise ValueError("the uncompressed package comes first: its step and weights are the measure")
        checked = verify_run(path, shape)
        optimized = optimize_run(path)
        rows.append(
            Row(
                shape.name,
                shape.layers,
                kind,
                step,
                torch_best,
                uncompressed,
                figures["peak"] - figures["imported"],
                budget,
                checked.run.cpu,
                optimized.cpu,
                checked.run.maxrss,
                checked.culprit,
                checked.by_command,
            )
        )
        if checked.command_error:
            errors.add(checked.command_error)
    return rows


def table(args, cache: Path) -> list[str]:
    """Print the table of both shapes; return the targets it missed."""
    rows: list[Row] = []
    errors: set[str] = set()
    for name in ("smollm_135m", "llama_1b"):
        shape = _shape(name, args.layers_1b)
        rows += shape_rows(shape, cache, errors=errors)
    print(table_text(rows))
    print(
        "step: CPU seconds of one decode prediction, best of steps 1-3 after a 4-token prompt, one thread; "
        "RSS: above that after `import coremltools`, peak of the decode steps (VmHWM); verify, optimize: "
        "CPU seconds (user + system, from os.wait4) of the installed command with its defaults, a child process"
    )
    for error in sorted(errors):
        print(f"†: {_given_feeds_note(error)}")
    missed = []
    for row in rows:
        for _, figure, ratio, target in row.checks():
            print(f"{figure}: {_verdict(ratio, target)}")
            if ratio > target:
                missed.append(figure)
    return missed


# -- verify's peak memory on a 1B-shape model -------------------------------------------------


def _weights_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("weight*.bin"))


def verify_memory(args, cache: Path) -> list[str]:
    """``mil-passes verify`` of the 1B-shape package with ``--verify-layers`` layers: its peak
    resident memory against :data:`VERIFY_MEMORY_TARGET`."""
    shape = _shape("llama_1b", args.verify_layers)
    path = cache / f"{shape.name}_{shape.layers}l.mlpackage"
    if not path.exists():  # converted in a child: torch's fp32 weights leave with it
        made = run_child(
            [sys.executable, "-m", "benchmarks.llm_step", "--child-package", shape.name, str(shape.layers), str(cache)]
        )
        if made.returncode != 0:
            raise RuntimeError(f"converting {path.name} failed: {made.stderr.strip()[-800:]}")
    checked = verify_run(path, shape)
    done = checked.run
    weights = _weights_bytes(path)
    states = 2 * int(np.prod(shape.cache_shape)) * 2
    figure = f"verify peak RSS, 1B widths {shape.layers} layers"
    print(
        f"{figure}: {done.maxrss / GIB:.2f} GiB (ru_maxrss of the child; fp16 weights {weights / GIB:.2f} GiB, "
        f"states {states / MIB:.0f} MiB; {done.maxrss / weights:.2f}x the weights), verify CPU {done.cpu:.0f} s"
        f"{', a culprit named' if checked.culprit else ''}{'' if checked.by_command else ' †'}: "
        f"target <= {VERIFY_MEMORY_TARGET / GIB:g} GiB: {'met' if done.maxrss <= VERIFY_MEMORY_TARGET else 'MISSED'}"
    )
    if not checked.by_command:
        print(f"†: {_given_feeds_note(str(checked.command_error))}")
    return [] if done.maxrss <= VERIFY_MEMORY_TARGET else [figure]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--layers-1b", type=int, default=2, help="layers of the 1B-width decoder (default 2)")
    parser.add_argument(
        "--verify-layers", type=int, default=16, help="layers of verify_memory's 1B-shape decoder (default 16)"
    )
    parser.add_argument("--cache", type=Path, default=None, help="keep converted packages there")
    parser.add_argument("--child-memory", nargs=3, metavar=("PACKAGE", "SHAPE", "LAYERS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-package", nargs=3, metavar=("SHAPE", "LAYERS", "CACHE"), help=argparse.SUPPRESS)
    parser.add_argument("--child-verify", nargs=3, metavar=("PACKAGE", "SHAPE", "LAYERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_memory:
        path, shape_name, layers = args.child_memory
        print(json.dumps(child_memory(Path(path), shape_name, int(layers))))
        return 0
    if args.child_verify:
        path, shape_name, layers = args.child_verify
        print(json.dumps(child_verify(Path(path), shape_name, int(layers))))
        return 0
    if args.child_package:
        shape_name, layers, folder = args.child_package
        print(_package(_shape(shape_name, int(layers)).with_layers(int(layers)), Path(folder)))
        return 0

    def ratio_section(run):  # a section printing one ratio, judged against its own target
        return lambda section, cache: [section] if run(cache) > TARGETS[section] else []

    runs = {
        "smollm_135m": ratio_section(lambda c: decoder("smollm_135m", args, c)),
        "llama_1b": ratio_section(lambda c: decoder("llama_1b", args, c)),
        "int4": ratio_section(lambda c: int4(args, c)),
        "conv": ratio_section(lambda c: conv(args, c)),
        "memory": ratio_section(lambda c: memory(args, c)),
        "table": lambda section, c: table(args, c),
        "verify_memory": lambda section, c: verify_memory(args, c),
    }
    missed = []
    with tempfile.TemporaryDirectory() as temporary:
        cache = args.cache or Path(temporary)
        cache.mkdir(parents=True, exist_ok=True)
        print(f"load average at the start: {_load_average()}")
        for section in args.only:
            missed += runs[section](section, cache)
        print(f"load average at the end: {_load_average()}")
    print("every target met" if not missed else f"missed: {'; '.join(missed)}")
    return 1 if missed else 0


def _load_average() -> str:
    """The 1-, 5- and 15-minute load averages, and the cores they are shared by."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} cores)"


if __name__ == "__main__":
    sys.exit(main())
