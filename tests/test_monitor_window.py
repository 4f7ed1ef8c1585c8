"""tests/benchmarks/monitor_window.py: a published run's training return over a window of its frames."""

from __future__ import annotations

import pytest
from benchmarks.monitor_window import window_returns


def _monitor(path, rows) -> None:
    path.write_text('#{"t_start": 0.0, "env_id": "X"}\nr,l,t\n' + "".join(f"{r},{l},1.0\n" for r, l in rows))


def test_the_window_counts_the_frames_of_all_env_copies_in_agent_steps(tmp_path) -> None:
    # two copies in lockstep, 4 emulator frames per agent step: frames (100, 200] of the run are
    # emulator frames (200, 400] of each copy
    _monitor(tmp_path / "0.monitor.csv", [(1.0, 200), (5.0, 150), (7.0, 50), (9.0, 100)])  # ends at 200, 350, 400, 500
    _monitor(tmp_path / "1.monitor.csv", [(2.0, 250), (3.0, 300)])  # ends at 250, 550
    assert window_returns(tmp_path, 100, 200, frame_skip=4) == [5.0, 7.0, 2.0]
    assert window_returns(tmp_path, 0, 100, frame_skip=4) == [1.0]
    with pytest.raises(SystemExit, match=r"0\.monitor\.csv ends before frame 300"):
        window_returns(tmp_path, 200, 300, frame_skip=4)
    with pytest.raises(SystemExit, match=r"no \*\.monitor\.csv files in"):
        window_returns(tmp_path / "none", 0, 1)
