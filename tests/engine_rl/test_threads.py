"""Worker threads compute with torch's intra-op thread count, not OpenMP's per-core default.

Each case runs in a fresh interpreter (``torch.set_num_threads(1)``, then two 256x256 products
on a worker thread) and counts the process's OS threads while the worker computes: an OpenMP
team started for the worker's products shows as one thread more.
"""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, sys
from concurrent.futures import ThreadPoolExecutor
import torch
torch.set_num_threads(1)
x = torch.randn(256, 256)

def threads_after_products():
    x.mm(x), x.mm(x)
    return len(os.listdir("/proc/self/task"))

before = len(os.listdir("/proc/self/task"))
mode = sys.argv[1]
if mode == "plain_pool":
    seen = ThreadPoolExecutor(max_workers=1).submit(threads_after_products).result()
elif mode == "loss_worker":
    from engine_rl.algos import worker
    seen = worker.submit(threads_after_products).result()
elif mode == "replay_sampler":
    from tensordict import TensorDict
    from engine_rl.replay import ReplayBuffer
    from handlers import ReplaySampler
    buffer = ReplayBuffer(64, seed=0)
    buffer.extend(TensorDict({"observation": torch.zeros(64, 3)}, [64]))
    counts = []
    sampler = ReplaySampler(buffer, 8, prefetch=2, background=True,
                            transform=lambda td: counts.append(threads_after_products()))
    sampler.sample()
    sampler.close()
    seen = counts[0]
print(before, seen)
"""

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")


def _threads(mode: str) -> tuple[int, int]:
    res = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    before, seen = map(int, res.stdout.split())
    return before, seen


def test_a_plain_worker_thread_starts_an_openmp_team_for_its_products():
    # the premise: without start_torch_thread, torch's thread count is not applied to a new thread
    if (os.cpu_count() or 1) < 2:
        pytest.skip("OpenMP's default team on one core is the thread itself")
    before, seen = _threads("plain_pool")
    assert seen == before + 2  # the worker and an OpenMP team thread


@pytest.mark.parametrize("mode", ["loss_worker", "replay_sampler"])
def test_engine_worker_threads_compute_with_one_thread_when_torch_is_set_to_one(mode):
    before, seen = _threads(mode)
    assert seen == before + 1  # the worker only
