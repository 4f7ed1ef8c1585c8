"""Vector envs from a ``make_env`` callable: names that import back, the modes, the errors."""

import pickle
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl.collectors import GymCollector, make_vec_env
from engine_rl.collectors.env_factory import callable_name, make_checked_env, resolve_callable
from engine_rl.collectors.gym_envs import env_spaces
from support.user_envs import Corridor, DoorRoom, make_corridor


def test_a_function_or_class_is_named_so_that_the_name_imports_back():
    for fn in (make_corridor, Corridor, DoorRoom):
        name = callable_name(fn)
        assert name == f"support.user_envs:{fn.__name__}"
        assert resolve_callable(name, owner="t") is fn


def test_a_partial_is_named_with_its_arguments_and_a_lambda_by_its_module():
    assert callable_name(partial(DoorRoom, size=9)) == "functools.partial(support.user_envs:DoorRoom, size=9)"
    assert callable_name(lambda: Corridor()) == f"{__name__}:test_a_partial_is_named_with_its_arguments_and_a_lambda_by_its_module.<locals>.<lambda>"


@pytest.mark.parametrize("value, message", [
    ("no_such_module:make", "t: make_env 'no_such_module:make' cannot be imported: No module named 'no_such_module'"),
    ("support.user_envs:nothing", "t: make_env 'support.user_envs:nothing' cannot be imported: module "
                                  "'support.user_envs' has no attribute 'nothing'"),
    ("support.user_envs", "t: make_env must be a callable returning a gymnasium.Env or 'module:function' naming one, "
                          "got 'support.user_envs'"),
    (3, "t: make_env must be a callable returning a gymnasium.Env or 'module:function' naming one, got 3"),
    ("support.user_envs:np", "t: make_env 'support.user_envs:np' names a module, not a callable"),
    ("__main__:make", "t: make_env '__main__:make' cannot be imported by its name; a run made by a lambda, a partial "
                      "or a function of a notebook or script resumes from Python"),
    ("mod:make.<locals>.<lambda>", "t: make_env 'mod:make.<locals>.<lambda>' cannot be imported by its name"),
    ("functools.partial(support.user_envs:DoorRoom, size=9)", "is a recorded partial, which cannot be imported; "
                                                              "a run made by a lambda"),
])
def test_a_name_that_does_not_import_is_one_line_naming_it(value, message):
    with pytest.raises(ValueError) as err:
        resolve_callable(value, owner="t")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_what_make_env_returns_or_raises_is_checked():
    with pytest.raises(ValueError, match=r"^t: make_env support.user_envs:Corridor failed: TypeError: Corridor\(\) takes no arguments$"):
        make_checked_env(Corridor, owner="t", size=3)
    with pytest.raises(ValueError, match=r"returned an object of type int, not a gymnasium.Env \(it must make one env copy"):
        make_checked_env(lambda: 3, owner="t")


@pytest.mark.parametrize("mode", [None, "sync", "async"])
def test_make_vec_env_makes_num_envs_copies_of_the_callable_wrapped_and_seeded(mode):
    env = make_vec_env(partial(make_corridor, max_episode_steps=3), 3, mode=mode, wrappers=("FlattenObservation",))
    try:
        assert type(env).__name__ == ("AsyncVectorEnv" if mode == "async" else "SyncVectorEnv")
        assert env.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 1) and obs.dtype == np.float32
        for _ in range(3):  # always left: the TimeLimit of the callable ends every episode at 3 steps
            obs, reward, terminated, truncated, _ = env.step(np.zeros(3, np.int64))
        assert truncated.all() and not terminated.any()
    finally:
        env.close()


def test_make_vec_env_passes_env_kwargs_to_the_callable_and_refuses_the_vector_entry_point():
    env = make_vec_env(DoorRoom, 2, size=9)
    assert env.single_observation_space["camera"].shape == (9, 9)
    env.close()
    with pytest.raises(ValueError, match=r"make_env support.user_envs:DoorRoom \(a callable\) has no vector entry point"):
        make_vec_env(DoorRoom, 2, mode="vector_entry_point")


def test_env_spaces_of_a_callable_are_its_wrapped_spaces_made_once():
    made = []

    def counted():
        made.append(1)
        return make_corridor()

    assert env_spaces(counted, wrappers=("FlattenObservation",)) == (Corridor.observation_space, Corridor.action_space)
    env_spaces(counted, wrappers=("FlattenObservation",))
    assert len(made) == 1


def test_a_collector_steps_a_callables_env_and_the_async_worker_can_pickle_a_module_function():
    env = make_vec_env(make_corridor, 2)
    def right(td):
        return td.set("action", torch.ones(td.batch_size, dtype=torch.int64))

    collector = GymCollector(env, right, frames_per_batch=8, seed=0)
    batch = next(iter(collector))
    collector.shutdown()
    assert batch["next", "reward"].sum().item() == 2.0  # both copies reach the end at step 4
    assert pickle.loads(pickle.dumps(make_corridor)) is make_corridor  # by reference, as async workers get it
