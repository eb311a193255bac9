"""A decoder step on the reference interpreter against torch eager, at LLM widths (issue 35).

    .venv/bin/python -m benchmarks.llm_step [--only smollm_135m llama_1b int4 conv memory]
        [--layers-1b 2] [--cache DIR]

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
  information, FLOAT16), one ``evaluate`` against torch eager, best of 3, interleaved (target
  ≤ 2.5x at FLOAT32, the oracle's target);
- ``memory``: in a child process that loads the saved 1B-width package (uncompressed, then int4),
  the peak resident memory of the prompt and of the decode steps (``VmHWM`` after
  ``/proc/self/clear_refs``), over the resident memory after ``import coremltools``, against the
  fp16 weights plus the states (target ≤ ~1.5x, on the decode steps).

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
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGETS = {"smollm_135m": 3.0, "llama_1b": 2.5, "int4": 1.5, "conv": 2.5, "memory": 1.5}
PROMPT, DECODE_STEPS = 4, 3
SECTIONS = ("smollm_135m", "llama_1b", "int4", "conv", "memory")


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
    best_torch, best = float("inf"), dict.fromkeys(programs, float("inf"))
    for _ in range(3):  # interleaved: the load on the machine moves both alike
        best_torch = min(best_torch, _cpu(eager)[0])
        for label, prog in programs.items():
            best[label] = min(best[label], _cpu(lambda p=prog: evaluate(p, {"image": image}))[0])
    ratio = best["fp32"] / best_torch
    print(
        f"conv net 160x160 (32-128 channels): torch {best_torch * 1e3:.1f} ms, interpreter fp32 "
        f"{best['fp32'] * 1e3:.1f} ms: {_verdict(ratio, TARGETS['conv'])}; the fp16 program "
        f"{best['fp16'] * 1e3:.1f} ms ({best['fp16'] / best_torch:.2f}x)"
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
    predict(mlmodel, prompt, state=state)
    prompt_peak = _status_kib("VmHWM")
    Path("/proc/self/clear_refs").write_text("5")
    for feed in steps:
        predict(mlmodel, feed, state=state)
    peak = _status_kib("VmHWM")
    return {
        "imported": imported << 10,
        "loaded": loaded << 10,
        "prompt_peak": prompt_peak << 10,
        "peak": peak << 10,
        "consts": weights,
        "states": states,
    }


def memory(args, cache: Path) -> float:
    shape = _shape("llama_1b", args.layers_1b)
    plain = _package(shape, cache)
    fp16 = None
    worst = 0.0
    for label, path in (("fp16", plain), ("int4", _package(shape, cache, "int4"))):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.llm_step", "--child-memory", str(path), shape.name, str(shape.layers)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError(f"memory child failed: {done.stderr.strip()[-800:]}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--layers-1b", type=int, default=2, help="layers of the 1B-width decoder (default 2)")
    parser.add_argument("--cache", type=Path, default=None, help="keep converted packages there")
    parser.add_argument("--child-memory", nargs=3, metavar=("PACKAGE", "SHAPE", "LAYERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_memory:
        path, shape_name, layers = args.child_memory
        print(json.dumps(child_memory(Path(path), shape_name, int(layers))))
        return 0
    runs = {
        "smollm_135m": lambda c: decoder("smollm_135m", args, c),
        "llama_1b": lambda c: decoder("llama_1b", args, c),
        "int4": lambda c: int4(args, c),
        "conv": lambda c: conv(args, c),
        "memory": lambda c: memory(args, c),
    }
    missed = []
    with tempfile.TemporaryDirectory() as temporary:
        cache = args.cache or Path(temporary)
        cache.mkdir(parents=True, exist_ok=True)
        print(f"load average at the start: {os.getloadavg()[0]:.1f}")
        for section in args.only:
            if runs[section](cache) > TARGETS[section]:
                missed.append(section)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("every target met" if not missed else f"missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
