"""tests/benchmarks/thread_handoff.py: its JSON line, its figures' arithmetic and its argument check."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "benchmarks" / "thread_handoff.py"


def test_quick_run_prints_one_json_line_whose_figures_agree() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--reps", "2", "--rows", "8"],
                          capture_output=True, text=True, check=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["benchmark"] == "thread_handoff" and out["product"] == [8, 256, 256]
    arms = ("one_product", "two_serial", "two_parallel", "empty_task")
    assert sorted(out["runs_us"]) == sorted(arms)
    for arm in arms:
        assert len(out["runs_us"][arm]) == 2 and out[f"{arm}_us"] > 0
    assert abs(out["parallel_saving_us"] - (out["two_serial_us"] - out["two_parallel_us"])) < 0.15
    # (the printed times are rounded to 0.1 µs, the ratio to 0.001)
    assert math.isclose(out["parallel_ratio"], out["two_parallel_us"] / out["two_serial_us"], rel_tol=0.01)


def test_rows_below_one_is_an_error_naming_the_argument() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--rows", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--rows must be >= 1, got" in done.stderr
