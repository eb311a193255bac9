"""webnn::concat_slice_to_slice_concat on a NeMo-style torch model converted with the package's
pipeline, and the README's recommended cache update, which needs no rewrite."""

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil.mil.scope import ScopeSource
from test_concat_slice_to_slice_concat import windows_on_concats

import mil_passes
from mil_passes.reference import evaluate
from mil_passes.ir import iter_ops

torch = pytest.importorskip("torch", reason="the models of these tests are torch modules")


class CausalConvStack(torch.nn.Module):
    """NeMo's CausalConv1D cache update: ``cat([cache, x], -1)[..., -cache_len:]`` per layer."""

    def __init__(self, channels: int = 16, cache_len: int = 8, layers: int = 3):
        super().__init__()
        self.cache_len = cache_len
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv1d(channels, channels, cache_len + 1, groups=channels) for _ in range(layers)
        )

    def forward(self, x, cache):
        next_caches = []
        for layer, conv in enumerate(self.convs):
            joined = torch.cat([cache[layer], x], -1)
            next_caches.append(joined[:, :, -self.cache_len :])
            x = torch.relu(conv(joined))
        return x, torch.stack(next_caches)


def update_cache(cache, x, cache_len: int, new_frames: int):
    """The README's recommended update: the last ``cache_len`` frames of cat([cache, x], -1),
    cut from the concat's inputs (sizes as Python ints: traced shapes do not convert)."""
    if new_frames >= cache_len:
        return x[..., new_frames - cache_len :]
    return torch.cat([cache[..., new_frames:], x], dim=-1)


class CausalConvStackFromInputs(CausalConvStack):
    def forward(self, x, cache):
        next_caches = []
        for layer, conv in enumerate(self.convs):
            next_caches.append(update_cache(cache[layer], x, self.cache_len, self.new_frames))
            x = torch.relu(conv(torch.cat([cache[layer], x], -1)))
        return x, torch.stack(next_caches)


def convert(model, x, cache, pipeline):
    traced = torch.jit.trace(model, (x, cache))
    return ct.convert(
        traced,
        inputs=[ct.TensorType(name="x", shape=x.shape), ct.TensorType(name="cache", shape=cache.shape)],
        convert_to="mlprogram",
        pass_pipeline=pipeline,
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS17,
        skip_model_load=True,
    )


def assert_same_as_torch(prog, model, x, cache):
    got = evaluate(prog, {"x": x.numpy(), "cache": cache.numpy()})
    with torch.no_grad():
        want = model(x, cache)
    for value, expected in zip(got.values(), want):
        np.testing.assert_allclose(value, expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("new_frames", [7, 9])
def test_cache_update_from_inputs_needs_no_rewrite(new_frames):
    torch.manual_seed(0)
    model = CausalConvStackFromInputs().eval()
    model.new_frames = new_frames
    x, cache = torch.randn(1, 16, new_frames), torch.randn(3, 1, 16, 8)
    prog = convert(model, x, cache, ct.PassPipeline.DEFAULT)._mil_program
    assert windows_on_concats(prog) == []
    assert_same_as_torch(prog, model, x, cache)


def test_nemo_style_torch_model():
    torch.manual_seed(0)
    model = CausalConvStack().eval()
    x, cache = torch.randn(1, 16, 7), torch.randn(3, 1, 16, 8)
    assert windows_on_concats(convert(model, x, cache, ct.PassPipeline.DEFAULT)._mil_program) != []
    prog = convert(model, x, cache, mil_passes.pipeline())._mil_program
    assert windows_on_concats(prog) == []
    built = [
        op
        for op in iter_ops(prog)
        if op.op_type != "const" and "ConcatSliceToSliceConcat" in op.scopes.get(ScopeSource.COREMLTOOLS_GRAPH_PASS, ())
    ]
    assert sorted(op.op_type for op in built) == ["concat"] * 3 + ["slice_by_index"] * 3
    assert all(op.scopes.get(ScopeSource.TORCHSCRIPT_MODULE_NAME) for op in built)  # the replaced slice's
    assert_same_as_torch(prog, model, x, cache)
