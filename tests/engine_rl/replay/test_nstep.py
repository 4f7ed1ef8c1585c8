import io
import itertools

import pytest
import torch
from tensordict import TensorDict

from engine_rl.keys import MASK_KEY
from engine_rl.replay.nstep import NStepBuilder


def _stream(num_envs, length, *, generator, p_end=0.2, ends=None):
    """``[num_envs, length]`` frames: observation = (env, frame) ids, random rewards, random ends.

    ``ends``: ``{(env, frame): "terminated" | "truncated" | "both"}`` forced on top of the random ones.
    """
    frame = torch.arange(length).expand(num_envs, length)
    env = torch.arange(num_envs).unsqueeze(1).expand(num_envs, length)
    ids = torch.stack([env, frame], -1).float()
    draw = torch.rand(num_envs, length, generator=generator)
    terminated = draw < p_end / 2
    truncated = (draw >= p_end / 2) & (draw < p_end)
    for (e, t), kind in (ends or {}).items():
        terminated[e, t] = kind in ("terminated", "both")
        truncated[e, t] = kind in ("truncated", "both")
    return TensorDict(
        {
            "observation": ids,
            "action": frame * 10 + env,
            "next": {
                "observation": ids + 0.5,
                "reward": torch.randn(num_envs, length, generator=generator),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        },
        batch_size=[num_envs, length],
    )


def _brute_force(stream, n, gamma):
    """{(env, frame): (reward, discount, last frame, terminated)} of every complete window, frame by frame."""
    out = {}
    num_envs, length = stream.batch_size
    for e in range(num_envs):
        for t in range(length):
            total, k, ended = 0.0, 0, False
            while k < n and t + k < length:
                total += gamma**k * float(stream["next", "reward"][e, t + k])
                k += 1
                if bool(stream["next", "done"][e, t + k - 1]):
                    ended = True
                    break
            if not ended and k < n:
                continue  # the stream ended inside the window: not complete
            last = t + k - 1
            terminated = bool(stream["next", "terminated"][e, last])
            out[(e, t)] = (total, 0.0 if terminated else gamma**k, last, terminated)
    return out


def _push_in_pieces(builder, stream, sizes):
    """Push ``stream`` in consecutive batches of ``sizes`` frames per env; the rows returned, in order."""
    rows, start = [], 0
    for size in sizes:
        rows.append(builder.push(stream[:, start:start + size]))
        start += size
    assert start == stream.batch_size[1]
    return torch.cat(rows) if rows else rows


def _check_against(rows, expected, stream):
    got = {}
    for i in range(rows.batch_size[0]):
        e, t = (int(v) for v in rows["observation"][i])
        assert (e, t) not in got, f"frame {(e, t)} emitted twice"
        got[(e, t)] = i
    assert sorted(got) == sorted(expected)
    for (e, t), i in got.items():
        reward, discount, last, terminated = expected[(e, t)]
        assert rows["next", "reward"][i].item() == pytest.approx(reward, rel=1e-5, abs=1e-5)
        assert rows["next", "discount"][i].item() == pytest.approx(discount, rel=1e-6)
        assert rows["next", "observation"][i].tolist() == [e + 0.5, last + 0.5]  # the bootstrap observation
        assert bool(rows["next", "terminated"][i]) == terminated
        assert bool(rows["next", "done"][i]) == bool(stream["next", "done"][e, last])
        assert bool(rows["next", "truncated"][i]) == bool(stream["next", "truncated"][e, last])
        assert int(rows["action"][i]) == t * 10 + e  # the first frame's action


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_random_episodes_match_brute_force(n, num_envs):
    generator = torch.Generator().manual_seed(100 * n + num_envs)
    gamma = 0.9
    for trial in range(4):
        length = 40
        stream = _stream(num_envs, length, generator=generator, p_end=[0.1, 0.3, 0.6, 0.0][trial])
        cuts = torch.randint(1, 7, (length,), generator=generator).tolist()
        sizes = []
        while sum(sizes) < length:
            sizes.append(min(cuts[len(sizes)], length - sum(sizes)))
        builder = NStepBuilder(n, gamma=gamma, num_envs=num_envs)
        rows = _push_in_pieces(builder, stream, sizes)
        expected = _brute_force(stream, n, gamma)
        _check_against(rows, expected, stream)
        # what is not emitted waits: the frames after each copy's last episode end, at most n - 1
        for e in range(num_envs):
            emitted = {t for (env, t) in expected if env == e}
            assert builder.pending[e] == length - len(emitted) <= n - 1


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("kind", ["terminated", "truncated", "both"])
def test_an_end_at_every_position(n, kind):
    """One episode end at each position of a 12-frame stream, pushed 1, 2 and 5 frames at a time."""
    generator = torch.Generator().manual_seed(n)
    gamma = 0.5
    for position, batch in itertools.product(range(12), (1, 2, 5)):
        stream = _stream(2, 12, generator=generator, p_end=0.0, ends={(0, position): kind, (1, 11 - position): kind})
        sizes = [batch] * (12 // batch) + ([12 % batch] if 12 % batch else [])
        builder = NStepBuilder(n, gamma=gamma, num_envs=2)
        rows = _push_in_pieces(builder, stream, sizes)
        _check_against(rows, _brute_force(stream, n, gamma), stream)
    # a terminal inside the window: discount 0; a truncation: gamma^k, bootstrapping from its observation
    stream = _stream(1, 4, generator=generator, p_end=0.0, ends={(0, 1): kind})
    rows = NStepBuilder(3, gamma=gamma, num_envs=1).push(stream)
    first = rows[0]
    assert first["next", "observation"].tolist() == [0.5, 1.5]
    assert first["next", "discount"].item() == (0.0 if kind != "truncated" else gamma**2)


def test_rows_are_the_flat_batch_keys_plus_discount():
    stream = _stream(2, 6, generator=torch.Generator().manual_seed(0), p_end=0.0)
    rows = NStepBuilder(3, gamma=0.99, num_envs=2).push(stream)
    assert rows.batch_size == torch.Size([8])  # 4 complete windows per copy of 6 frames
    assert set(rows.keys(include_nested=True, leaves_only=True)) == {
        *stream.keys(include_nested=True, leaves_only=True), ("next", "discount")}
    assert rows["next", "discount"].dtype == torch.float32
    assert rows["next", "discount"].tolist() == pytest.approx([0.99**3] * 8)
    # env copy by env copy, each in time order
    assert rows["observation"][:, 0].tolist() == [0] * 4 + [1] * 4
    assert rows["observation"][:, 1].tolist() == [0, 1, 2, 3] * 2


def test_a_one_dim_batch_is_one_frame_per_copy():
    stream = _stream(3, 5, generator=torch.Generator().manual_seed(1), p_end=0.3)
    builder = NStepBuilder(2, gamma=0.9, num_envs=3)
    rows = torch.cat([builder.push(stream[:, t]) for t in range(5)])
    _check_against(rows, _brute_force(stream, 2, 0.9), stream)


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_state_dict_round_trip_mid_window(n):
    generator = torch.Generator().manual_seed(7)
    stream = _stream(4, 30, generator=generator, p_end=0.15)
    straight = NStepBuilder(n, gamma=0.95, num_envs=4)
    first = [straight.push(stream[:, i:i + 3]) for i in range(0, 12, 3)]
    if n > 1:
        assert sum(straight.pending) > 0  # paused with windows open
    saved = _roundtrip(straight.state_dict())
    resumed = NStepBuilder(n, gamma=0.95, num_envs=4)
    resumed.load_state_dict(saved)
    assert resumed.pending == straight.pending
    for i in range(12, 30, 3):
        a, b = straight.push(stream[:, i:i + 3]), resumed.push(stream[:, i:i + 3])
        assert (a == b).all(), f"batch at frame {i} differs after the round trip"
    assert torch.cat(first).batch_size[0] > 0
    empty = NStepBuilder(n, gamma=0.95, num_envs=4)
    empty.load_state_dict(_roundtrip(NStepBuilder(n, gamma=0.95, num_envs=4).state_dict()))
    assert empty.pending == [0] * 4


def test_bad_arguments_and_batches_name_what_is_accepted():
    with pytest.raises(ValueError, match=r"NStepBuilder: n must be a positive int, got 0"):
        NStepBuilder(0, gamma=0.99, num_envs=1)
    with pytest.raises(ValueError, match=r"NStepBuilder: gamma must be a number in \[0, 1\], got 1.5"):
        NStepBuilder(3, gamma=1.5, num_envs=1)
    builder = NStepBuilder(3, gamma=0.99, num_envs=2)
    stream = _stream(3, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"batch must be \[num_envs, T\] \(num_envs=2.*got \(3, 4\)"):
        builder.push(stream)
    with pytest.raises(KeyError, match=r"NStepBuilder needs key\(s\) \['next.truncated'\]"):
        builder.push(stream[:2].exclude(("next", "truncated")))
    masked = stream[:2].clone()
    masked[MASK_KEY] = torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="'collector.mask' mask are not supported"):
        builder.push(masked)
    builder.push(stream[:2])
    with pytest.raises(KeyError, match=r"the batch has keys .* the earlier batches had"):
        builder.push(stream[:2].exclude("action"))
    other = NStepBuilder(2, gamma=0.99, num_envs=2)
    with pytest.raises(ValueError, match=r"saved with \{'n': 3, 'gamma': 0.99, 'num_envs': 2\}, this builder has \{'n': 2"):
        other.load_state_dict(builder.state_dict())
