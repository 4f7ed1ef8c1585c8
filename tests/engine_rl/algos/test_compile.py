import pytest
import torch
from tensordict import TensorDict

from engine_rl.algos.compile import CompiledLoss, compile_loss


class MSE(torch.nn.Module):
    in_keys = ["x", "y"]

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def forward(self, td):
        return TensorDict({"loss": (self.net(td["x"]) - td["y"]).pow(2).mean()}, [])


def failing_backend(graph, example_inputs):
    raise RuntimeError("cannot compile this\nsecond line")


def _batch():
    g = torch.Generator().manual_seed(0)
    return TensorDict({"x": torch.randn(8, 3, generator=g), "y": torch.randn(8, 1, generator=g)}, [8])


def test_compiled_loss_matches_eager_values_and_gradients():
    torch.manual_seed(0)
    loss = MSE()
    compiled = compile_loss(loss, enabled=True)
    assert isinstance(compiled, CompiledLoss) and compiled.in_keys == ["x", "y"] and compiled.__name__ == "MSE"
    td = _batch()
    eager_value = loss(td)["loss"]
    eager_value.backward()
    eager_grads = [p.grad.clone() for p in loss.parameters()]
    loss.zero_grad()
    value = compiled(td)["loss"]
    value.backward()
    assert not compiled.eager
    torch.testing.assert_close(value, eager_value)
    for p, g in zip(loss.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, g)


def test_a_compile_failure_warns_once_and_trains_eagerly():
    loss = MSE()
    compiled = CompiledLoss(loss, backend=failing_backend)
    td = _batch()
    with pytest.warns(RuntimeWarning, match=r"torch.compile of MSE failed \(.*cannot compile this.*\); training on"):
        out = compiled(td)
    assert compiled.eager
    torch.testing.assert_close(out["loss"], loss(td)["loss"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(td)  # no second warning


def test_the_loss_own_errors_are_raised():
    compiled = CompiledLoss(MSE())
    with pytest.raises(KeyError, match="y"):
        compiled(TensorDict({"x": torch.ones(2, 3)}, [2]))


def test_disabled_returns_the_loss_itself():
    loss = MSE()
    assert compile_loss(loss, enabled=False) is loss
    assert compile_loss(loss, enabled=True, device="cuda").mode == "reduce-overhead"
    assert compile_loss(loss, enabled=True, device="cpu").mode is None
    with pytest.raises(TypeError, match="CompiledLoss: argument loss must be callable, got int"):
        CompiledLoss(3)
