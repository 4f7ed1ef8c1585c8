"""MuJoCo's warnings go to Python's warnings: said once, no ``MUJOCO_LOG.TXT`` in the working directory."""

import warnings

import pytest

from engine_rl.collectors import mujoco_warnings
from engine_rl.collectors.gym_envs import env_spaces, make_vec_env
from engine_rl.collectors.mujoco_warnings import MujocoWarning, route_for, route_mujoco_warnings

mujoco = pytest.importorskip("mujoco")


@pytest.fixture
def no_handler():
    """MuJoCo with its default warning handler during the test, and whatever was set before restored."""
    before = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(None)
    yield
    mujoco.set_mju_user_warning(before)


def test_halfcheetah_warns_once_through_python_and_writes_no_log(no_handler, tmp_path, monkeypatch, capfd):
    # gymnasium 1.4's HalfCheetah model uses 'settotalmass', which mujoco 4 deprecates at every load
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        env_spaces("HalfCheetah-v5", env_kwargs={"reset_noise_scale": 0.2})
        make_vec_env("HalfCheetah-v5", 3).close()
    messages = [str(w.message) for w in caught if w.category is MujocoWarning]
    assert len(messages) == 1 and "compiler attribute 'settotalmass' is deprecated" in messages[0]
    assert "settotalmass" not in capfd.readouterr().err  # MuJoCo's own print
    assert list(tmp_path.iterdir()) == []  # no MUJOCO_LOG.TXT


def test_a_warning_turned_into_an_error_is_printed_not_raised(capsys):
    # raised inside MuJoCo's C callback it would abort the process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mujoco_warnings._warn("Nan, Inf or huge value in QACC at DOF 0")
    assert capsys.readouterr().err == "MuJoCo warning: Nan, Inf or huge value in QACC at DOF 0\n"


def test_a_users_handler_is_kept(no_handler):
    seen = []
    mujoco.set_mju_user_warning(seen.append)
    assert route_mujoco_warnings() is False and mujoco.get_mju_user_warning() == seen.append
    mujoco.set_mju_user_warning(None)
    assert route_mujoco_warnings() is True and route_mujoco_warnings() is True


def test_only_gymnasiums_mujoco_envs_are_routed(no_handler):
    from engine_rl.collectors.gym_envs import env_spec

    route_for(env_spec("CartPole-v1"))
    route_for(None)
    assert mujoco.get_mju_user_warning() is None
    route_for(env_spec("Hopper-v5"))
    assert mujoco.get_mju_user_warning() is mujoco_warnings._warn
