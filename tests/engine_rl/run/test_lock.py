"""RunLock: one run per folder; a lock left by a killed process is taken over; released on errors."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from engine_rl.run.lock import LOCK_NAME, RunLock, RunLockError

HOLD = textwrap.dedent(
    """
    import sys, time
    from engine_rl.run.lock import RunLock
    RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


@pytest.fixture
def holder(tmp_path):
    """A process holding the lock of ``tmp_path`` (killed at the end if still alive)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_acquire_writes_the_pid_and_release_removes_the_file(tmp_path):
    lock = RunLock(tmp_path)
    assert not lock.held and lock.acquire() is lock and lock.held
    assert lock.acquire() is lock  # a second acquire of the same object does nothing
    text = (tmp_path / LOCK_NAME).read_text()
    assert text.startswith(f"pid={os.getpid()} host=") and "started=" in text
    lock.release()
    assert not lock.held and not (tmp_path / LOCK_NAME).exists()
    lock.release()  # releasing twice is harmless


def test_a_live_holder_in_another_process_is_named_and_refuses_the_lock(tmp_path, holder):
    with pytest.raises(RunLockError) as info:
        RunLock(tmp_path).acquire()
    message = str(info.value)
    assert message.startswith(f"{tmp_path / LOCK_NAME}: the folder is in use by another run: process {holder.pid} ")
    assert message.endswith("; wait for it to end or use another --out") and "\n" not in message
    assert (tmp_path / LOCK_NAME).read_text().startswith(f"pid={holder.pid} ")  # the holder's file is untouched


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    with RunLock(tmp_path), pytest.raises(RunLockError, match=f"process {os.getpid()} holds this lock"):
        RunLock(tmp_path).acquire()


def test_the_lock_of_a_killed_process_is_taken_over_with_a_warning(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)  # (send_signal does nothing if it has already been reaped)
    holder.wait()
    assert (tmp_path / LOCK_NAME).exists()  # a kill leaves the file behind
    warnings = []
    with RunLock(tmp_path, warn=warnings.append):
        assert (tmp_path / LOCK_NAME).read_text().startswith(f"pid={os.getpid()} ")
    [warning] = warnings
    assert warning.startswith(f"taking over the stale lock {tmp_path / LOCK_NAME} of process {holder.pid} (not running; ")
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_stale_lock_file_with_a_dead_pid_is_taken_over_and_the_default_warning_is_one_line(tmp_path, capsys):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    (tmp_path / LOCK_NAME).write_text(f"pid={dead} host=elsewhere started=2020-01-01T00:00:00\n")
    with RunLock(tmp_path):
        pass
    err = capsys.readouterr().err
    assert err == (f"engine-rl: warning: taking over the stale lock {tmp_path / LOCK_NAME} of process {dead} "
                   "(not running; started 2020-01-01T00:00:00): that run was killed or ended without releasing it\n")


def test_the_lock_is_released_when_the_block_raises(tmp_path):
    with pytest.raises(ZeroDivisionError), RunLock(tmp_path):
        1 / 0
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path, warn=pytest.fail):  # free, and no stale-lock warning
        pass


def test_a_folder_where_the_lock_cannot_be_made_is_one_error(tmp_path):
    with pytest.raises(RunLockError, match=rf"^{tmp_path / 'missing' / LOCK_NAME}: cannot create the lock file "
                                           r"\(No such file or directory\)$"):
        RunLock(tmp_path / "missing").acquire()
