import subprocess
import sys

import pytest

from engine_rl.runtime import tune_allocator

# The child keeps eight 512 KiB activations alive at once, frees them and starts over, as a
# forward and backward pass do: glibc's default serves each from a fresh mmap or trims the
# heap after the step, so every step faults its pages in again (~1000 faults); a tuned
# allocator reuses the same heap memory.
_CHILD = """
import resource, sys
import torch
from engine_rl.runtime import tune_allocator
if sys.argv[1] == "tuned":
    assert tune_allocator()
x = torch.randn(2, 256, 256)
def step():
    acts = [x.relu() for _ in range(8)]
    del acts
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tuned_allocator_stops_page_faults_per_allocation():
    faults = {}
    for mode in ("default", "tuned"):
        done = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True)
        faults[mode] = int(done.stdout.strip())
    assert faults["default"] > 100 * 500, faults
    assert faults["tuned"] < 100 * 10, faults


@pytest.mark.parametrize("kwargs", [{"mmap_threshold": 0}, {"trim_threshold": -1}, {"mmap_threshold": 1.5}])
def test_bad_thresholds_are_refused(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"tune_allocator: argument {name} must be a positive int"):
        tune_allocator(**kwargs)
