"""SUPPORTED_OPS claims only what the interpreter evaluates: each op has a hand-written kernel, is
control flow, or has a coremltools value_inference that is implemented; the last are evaluated
here one by one."""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from kernel_helpers import run
from mil_passes.reference import SUPPORTED_OPS
from mil_passes.reference.kernels import KERNELS, kernel
from mil_passes.reference.support import CONTROL_FLOW, implements_value_inference, only_raises_not_implemented

X = np.array([[[[-2.0, -0.5], [0.0, 3.0]], [[7.0, 1.0], [-1.0, 0.5]]]], np.float32)  # [1, 2, 2, 2]

# One small use of each op the interpreter evaluates through coremltools' own value_inference,
# with the numpy result it must give.
VALUE_INFERENCE_OPS = {
    "relu6": (lambda x: mb.relu6(x=x), np.clip(X, 0, 6)),
    "leaky_relu": (lambda x: mb.leaky_relu(x=x, alpha=0.1), np.where(X < 0, 0.1 * X, X)),
    "prelu": (
        lambda x: mb.prelu(x=x, alpha=np.array([0.5, 0.25], np.float32)),
        np.where(X < 0, X * np.array([0.5, 0.25], np.float32).reshape(1, 2, 1, 1), X),
    ),
    "non_zero": (lambda x: mb.non_zero(x=x), np.transpose(np.nonzero(X)).astype(np.int32)),
    "einsum": (lambda x: mb.einsum(values=(x, x), equation="nchw,nwhr->nchr"), np.einsum("nchw,nwhr->nchr", X, X)),
    "scaled_dot_product_attention": (
        lambda x: mb.scaled_dot_product_attention(query=x, key=x, value=x),
        None,  # checked against torch below
    ),
}


def _value_inference_only() -> set[str]:
    return set(SUPPORTED_OPS) - set(KERNELS) - CONTROL_FLOW


def test_every_supported_op_has_a_kernel_control_flow_or_an_implemented_value_inference():
    for op_type in SUPPORTED_OPS - CONTROL_FLOW:
        if op_type in KERNELS:
            continue
        classes = SSAOpRegistry.core_ops[op_type].values()
        assert all(implements_value_inference(cls) for cls in classes), op_type


def test_each_op_evaluated_by_value_inference_is_evaluated_here():
    assert _value_inference_only() == set(VALUE_INFERENCE_OPS)


@pytest.mark.parametrize("op_type", sorted(VALUE_INFERENCE_OPS))
def test_an_op_evaluated_by_value_inference_gives_numpys_result(op_type):
    build, want = VALUE_INFERENCE_OPS[op_type]
    (got,) = run(build, {"x": X}, opset=ct.target.iOS18)
    if op_type == "scaled_dot_product_attention":
        # torch's kernel sums and exponentiates in another order than coremltools' numpy: a few ulps
        torch = pytest.importorskip("torch")
        t = torch.from_numpy(X)
        want = torch.nn.functional.scaled_dot_product_attention(t, t, t).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        return
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # the same numpy computation: bit for bit


def test_a_value_inference_that_only_raises_does_not_count():
    assert only_raises_not_implemented(SSAOpRegistry.core_ops["reverse_sequence"][ct.target.iOS15].value_inference)
    assert not only_raises_not_implemented(SSAOpRegistry.core_ops["relu"][ct.target.iOS15].value_inference)

    class todo(Operation):
        def value_inference(self):
            """Not yet."""
            raise NotImplementedError("TODO")

    class partial(Operation):
        def value_inference(self):
            if self is None:
                raise NotImplementedError()
            return 1

    assert not implements_value_inference(todo)
    assert implements_value_inference(partial)
    assert "reverse_sequence" in KERNELS and "reverse_sequence" in SUPPORTED_OPS  # a kernel now


def test_a_kernel_registered_twice_is_refused_unless_it_replaces():
    with pytest.raises(ValueError, match="kernel of 'add' registered twice"):
        kernel("add")(lambda op, args: None)
    assert KERNELS["add"].__module__.endswith("core")
