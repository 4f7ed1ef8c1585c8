import gymnasium as gym
import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

import engine_rl.algos.precision as precision
from engine_rl import create_trainer
from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.networks import mlp
from engine_rl.algos.precision import AutocastLoss, OutputLinear, compute_dtype
from engine_rl.algos.sac import QEnsemble, SACLoss

BF16 = torch.bfloat16


def _sac_sample(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(n, 3, generator=g),
        "action": torch.rand(n, 1, generator=g) * 4 - 2,
        ("next", "observation"): torch.randn(n, 3, generator=g),
        ("next", "reward"): torch.randn(n, generator=g),
        ("next", "terminated"): torch.zeros(n, dtype=torch.bool),
    }, [n])


def _product_dtypes(module):
    """Records the output dtype of every nn.Linear (and subclass) call in ``module``."""
    seen = []
    for m in module.modules():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(lambda mod, args, out: seen.append((type(mod).__name__, out.dtype)))
    return seen


def test_compute_dtype_names_and_errors():
    assert compute_dtype("float32", owner="X") is None
    with pytest.raises(ValueError, match=r"^X: precision must be one of \('float32', 'bfloat16'\), got 'fp16'$"):
        compute_dtype("fp16", owner="X")


def test_compute_dtype_warns_when_bfloat16_would_be_emulated(monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda: False)
    with pytest.warns(RuntimeWarning, match="X: precision='bfloat16' on a CPU without native bfloat16"):
        assert compute_dtype("bfloat16", owner="X") is BF16
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compute_dtype("bfloat16", owner="X") is BF16


def test_compute_dtype_does_not_warn_for_a_gpu_device(monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda: False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compute_dtype("bfloat16", owner="X", device=torch.device("cuda")) is BF16
    with pytest.warns(RuntimeWarning, match="on a CPU without native bfloat16"):
        compute_dtype("bfloat16", owner="X", device="cpu")


@pytest.mark.parametrize(
    ("lines", "native"),
    [
        ("flags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n", True),
        ("flags\t\t: fpu sse avx512f amx_bf16 amx_tile\n", True),
        ("Features\t: fp asimd bf16 i8mm\n", True),
        ("flags\t\t: fpu sse avx2 avx512f avx512_vnni\nbugs\t\t: avx512_bf16\n", False),
        ("model name\t: avx512_bf16 in a name\n", False),
    ],
)
def test_native_bfloat16_reads_the_cpu_flags(tmp_path, lines, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\n" + lines)
    assert precision.native_bfloat16(cpuinfo) is native
    assert precision.native_bfloat16(tmp_path / "missing") is False


def test_output_linear_is_a_linear_outside_autocast_and_float32_inside():
    torch.manual_seed(0)
    layer = OutputLinear(16, 3)
    plain = nn.Linear(16, 3)
    plain.load_state_dict(layer.state_dict())
    assert list(layer.state_dict()) == ["weight", "bias"]
    x = torch.randn(5, 16)
    assert torch.equal(layer(x), plain(x))
    with torch.autocast("cpu", dtype=BF16):
        out = layer(x)
        rounded = plain(x)
    assert out.dtype == torch.float32 and rounded.dtype == BF16
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias))
    # the same layer's input arriving in bfloat16 (from a hidden layer) is computed in float32
    with torch.autocast("cpu", dtype=BF16):
        out_bf16_in = layer(x.to(BF16))
    torch.testing.assert_close(out_bf16_in, F.linear(x.to(BF16).float(), layer.weight, layer.bias))


def test_mlp_hidden_products_in_bfloat16_output_in_float32():
    net = mlp(4, 2, (32, 32))
    seen = _product_dtypes(net)
    with torch.autocast("cpu", dtype=BF16):
        out = net(torch.randn(8, 4))
    assert seen == [("Linear", BF16), ("Linear", BF16), ("OutputLinear", torch.float32)]
    assert out.dtype == torch.float32


def test_q_ensemble_output_layer_matches_a_batched_matmul_and_stays_float32():
    torch.manual_seed(0)
    q = QEnsemble(3, 1, (32, 32))
    obs, act = torch.randn(7, 3), torch.randn(7, 1)
    # reference: the same layers as explicit batched matmuls
    x = torch.cat([obs, act], -1).expand(2, -1, -1)
    for i, (w, b) in enumerate(zip(q.weights, q.biases)):
        x = torch.baddbmm(b, x, w)
        x = F.relu(x) if i < 2 else x
    torch.testing.assert_close(q(obs, act), x.squeeze(-1))
    with torch.autocast("cpu", dtype=BF16):
        low = q(obs, act)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, x.squeeze(-1), rtol=0.05, atol=0.02)


def test_autocast_loss_runs_products_in_bfloat16_and_returns_float32_losses():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(64, 64))
    loss = SACLoss(actor, QEnsemble(3, 1, (64, 64)))
    seen = _product_dtypes(actor)
    wrapped = AutocastLoss(loss)
    assert wrapped.in_keys == loss.in_keys and wrapped.device_type == "cpu"
    assert wrapped.__name__ == "AutocastLoss(SACLoss)"

    torch.manual_seed(1)
    full = loss(_sac_sample())
    seen.clear()
    torch.manual_seed(1)
    mixed = wrapped(sample := _sac_sample())
    assert ("Linear", BF16) in seen and ("OutputLinear", torch.float32) in seen
    assert ("Linear", torch.float32) not in seen
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        assert mixed[key].dtype == torch.float32, key
        torch.testing.assert_close(mixed[key], full[key], rtol=0.05, atol=0.05)
    assert sample["td_error"].dtype == torch.float32

    # gradients land in float32 parameters, on every parameter set
    sum(mixed[k] for k in ("loss_actor", "loss_qvalue", "loss_alpha")).backward()
    for p in [*actor.parameters(), *loss.critic.parameters(), loss.log_alpha]:
        assert p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()


def test_autocast_loss_casts_mapping_outputs_and_rejects_bad_input():
    def half_loss(td):
        return {"loss": td["x"].to(BF16).sum(), "count": torch.tensor(3)}

    out = AutocastLoss(half_loss)(TensorDict({"x": torch.ones(4)}, [4]))
    assert out["loss"].dtype == torch.float32 and out["loss"].item() == 4.0
    assert out["count"].dtype == torch.int64
    def scalar_loss(td):
        return torch.zeros(())

    with pytest.raises(TypeError, match=r"^AutocastLoss\(scalar_loss\): the loss must return a TensorDict or a "
                                        r"mapping, got Tensor$"):
        AutocastLoss(scalar_loss)(TensorDict({}, []))
    with pytest.raises(TypeError, match="AutocastLoss: loss must be callable, got int"):
        AutocastLoss(3)
    with pytest.raises(TypeError, match="AutocastLoss: dtype must be a floating torch.dtype, got torch.int8"):
        AutocastLoss(half_loss, torch.int8)


def test_trainer_optimizes_through_autocast_loss_and_names_it_in_errors():
    torch.manual_seed(0)
    net = mlp(3, 1, (32,))
    before = [p.detach().clone() for p in net.parameters()]

    def mse(td):
        return TensorDict({"loss": (net(td["x"]).squeeze(-1) - td["y"]).square().mean()}, [])

    mse.in_keys = ["x", "y"]
    batches = [TensorDict({"x": torch.randn(16, 3), "y": torch.randn(16)}, [16]) for _ in range(3)]
    trainer = create_trainer(batches, AutocastLoss(mse), torch.optim.SGD(net.parameters(), lr=0.1))
    trainer.run()
    assert trainer.state.optim_steps == 3
    assert all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert all(p.dtype == torch.float32 for p in net.parameters())

    bad = [TensorDict({"x": torch.randn(4, 3)}, [4])]
    with pytest.raises(KeyError, match=r"AutocastLoss\(mse\) \(the trainer's loss\)"):
        create_trainer(bad, AutocastLoss(mse), torch.optim.SGD(net.parameters(), lr=0.1)).run()


def test_autocast_loss_takes_the_device_type_from_the_loss_parameters():
    # a loss on another device gets that device's autocast (meta stands in for a GPU here)
    assert AutocastLoss(torch.nn.Linear(2, 1, device="meta")).device_type == "meta"
    assert AutocastLoss(lambda td: {"loss": torch.zeros(())}).device_type == "cpu"
    assert AutocastLoss(torch.nn.Linear(2, 1), device_type="cuda").device_type == "cuda"

