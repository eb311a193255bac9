"""``mil-passes verify`` with its default feeds on issue 43's text models, each with a flexible sequence.

    .venv/bin/python benchmarks/text_models_verify.py [--models gpt2 bert ...] [--pipelines default mil_passes]

Converts gpt2, bert, t5 and whisper (``mil_passes/testing/models/real.py``), distilbert and CLIP's text
model (tiny configurations here) with every token input's sequence a ``ct.RangeDim(1, 32)``, at FLOAT32
and FLOAT16, with DEFAULT and with EMPTY, then runs ``mil-passes verify`` on each package with each
pipeline and prints one row per run: its exit status (0 clean, 1 a culprit, 2 refused) and last line.
Before issue 43, random token ids in -5..5 read past the embedding (exit 2, "index 65534 is out of
bounds"); the feeds now fit what the program shows (``mil_passes/reference/domains.py``). CLIP's
text model converted with EMPTY, its mask input named ``mask``, is a file that defines ``mask`` twice
(exit 2, naming it); ``clip_text_padding`` is the same model with that input named ``padding``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mil_passes.testing.models import real  # noqa: E402


def _ids_and_mask(model_class, config_class, **config):
    """A transformers text model as a module of ``(ids, mask)`` returning its first output."""
    import torch

    transformers = real._transformers()
    inner = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))

    class IdsAndMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = inner

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask, return_dict=False)[0]

    return IdsAndMask()


TINY = dict(vocab_size=96, max_position_embeddings=64)
EXTRA = {
    "distilbert": real.RealModel(
        "distilbert",
        lambda: _ids_and_mask(
            "DistilBertModel", "DistilBertConfig", dim=32, n_layers=2, n_heads=2, hidden_dim=64, **TINY
        ),
        real._named(ids=real._tokens(1, 9), mask=real._attention_mask),
    ),
    "clip_text": real.RealModel(
        "clip_text",
        lambda: _ids_and_mask(
            "CLIPTextModel",
            "CLIPTextConfig",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            **TINY,
        ),
        real._named(ids=real._tokens(1, 9), mask=real._attention_mask),
    ),
}
#: CLIP's text model again, its mask input named ``padding``: traced, CLIP's causal mask is an internal
#: value named ``mask``, and converted with EMPTY (which skips ``common::dedup_op_and_var_names``) it
#: is saved under the name of an input named ``mask``, which it then shadows (verify refuses that file).
EXTRA["clip_text_padding"] = dataclasses.replace(
    EXTRA["clip_text"],
    name="clip_text_padding",
    example_inputs=real._named(ids=real._tokens(1, 9), padding=real._attention_mask),
)
MODELS = ("gpt2", "bert", "t5", "whisper", "distilbert", "clip_text", "clip_text_padding")


def convert_all(name: str, folder: Path) -> list[Path]:
    """The model's packages: FLOAT32 and FLOAT16, each with DEFAULT and with EMPTY."""
    import coremltools as ct

    model = EXTRA.get(name) or real.BY_NAME[name]
    inputs = model.example_inputs(np.random.default_rng(0))
    flexible = {key: {1: (1, 32)} for key, value in inputs.items() if value.dtype.kind == "i"}
    model = dataclasses.replace(model, flexible=flexible)
    traced = real.trace(model.instantiate(), inputs)
    paths = []
    for fp16 in (False, True):
        for pipeline in ("DEFAULT", "EMPTY"):
            path = folder / f"{name}_{'fp16' if fp16 else 'fp32'}_{pipeline}.mlpackage"
            real.convert(model, traced, inputs, fp16=fp16, pass_pipeline=getattr(ct.PassPipeline, pipeline)).save(
                str(path)
            )
            paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--pipelines", nargs="+", default=["default", "mil_passes"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            for path in convert_all(name, Path(scratch)):
                for pipeline in args.pipelines:
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "mil_passes.cli",
                            "verify",
                            str(path),
                            "--quiet",
                            "--pipeline",
                            pipeline,
                        ],
                        capture_output=True,
                        text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)},
                    )
                    last = (done.stdout.strip() or done.stderr.strip()).splitlines()[-1][:150]
                    print(f"{path.stem:28s} {pipeline:10s} exit {done.returncode}  {last}", flush=True)


if __name__ == "__main__":
    main()
