"""A recipe config is made, listed and overridden without making its env, so without the extras
its env needs; the env (registered, spaces suiting the algorithm, a vector entry point where one is
asked for) is checked by ``config.check_env()``, which each recipe's build calls before anything
else and ``engine-rl train`` calls before writing to ``--out``, with the messages construction
raised before. An id from an extra that is not installed is one line naming the extra
(tests/e2e/test_missing_extras.py runs the commands without ale-py and without mujoco)."""

import importlib.util
import re
import sys

import gymnasium as gym
import pytest

from engine_rl.cli import main
from engine_rl.collectors import gym_envs
from engine_rl.collectors.gym_envs import env_spec, is_atari_id
from engine_rl.recipes import RECIPES, get_recipe
from engine_rl.recipes.config import describe_config
from engine_rl.run.driver import make_config, train

TUPLE_OBS = ("the observation space is Tuple(Discrete(32), Discrete(11), Discrete(2)), which cannot be stored; each "
             "leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict of these; flatten it "
             "(wrappers=FlattenObservation: Discrete, Tuple and Dict spaces to a 1-D Box)")

# (recipe, overrides, the message: the whole of it, or its start where it ends with "...")
ENV_BAD = [
    ("dqn-cartpole", {"env_id": "Foo-v0"}, "DQNConfig: env_id 'Foo-v0' is not a registered gymnasium env; ..."),
    ("dqn-cartpole", {"env_id": "Cartpole-v1"},
     "DQNConfig: env_id 'Cartpole-v1' is not a registered gymnasium env; close matches: CartPole-v1, ..."),
    ("dqn-cartpole", {"env_id": "Pendulum-v1"},
     "DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions (set env_id to an env with Discrete "
     "actions)"),
    ("dqn-cartpole", {"env_id": "Blackjack-v1", "vectorization": "sync"},
     f"DQNConfig: dqn (Blackjack-v1): {TUPLE_OBS}"),
    ("dqn-cartpole", {"env_id": "Acrobot-v1", "vectorization": "vector_entry_point"},
     "DQNConfig: vectorization 'vector_entry_point' needs an env that registers a vector entry point; Acrobot-v1 has "
     "none (use 'auto', 'sync' or 'async')"),
    ("dqn-cartpole", {"vectorization": "vector_entry_point", "wrappers": ("FlattenObservation",)},
     "DQNConfig: vectorization 'vector_entry_point' batches the env copies itself, so it takes no wrappers (got "
     "('FlattenObservation',)); use 'auto', 'sync' or 'async'"),
    ("dqn-cartpole", {"make_env": "engine_rl_tests_no_such_module:make"},
     "DQNConfig: make_env 'engine_rl_tests_no_such_module:make' cannot be imported: No module named "
     "'engine_rl_tests_no_such_module'"),
    ("dqn-cartpole", {"env_id": "FrozenLake-v1", "env_kwargs": {"map_name": "9x9"}},
     "DQNConfig: env_id 'FrozenLake-v1' cannot be made with env_kwargs {'map_name': '9x9'}: KeyError: '9x9'"),
    ("ppo-cartpole", {"env_id": "Blackjack-v1"}, f"PPOConfig: ppo (Blackjack-v1): {TUPLE_OBS}"),
    ("ppo-mujoco", {"env_id": "FrozenLake-v1"},
     "PPOMujocoConfig: ppo (FrozenLake-v1): the observation space must be a 1-D Box with normalize_observations (set "
     "it false for other spaces), got Discrete(16) (--set wrappers=FlattenObservation flattens Discrete, Tuple and "
     "Dict spaces)"),
    ("sac-pendulum", {"env_id": "CartPole-v1"},
     "SACConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions (set env_id to an env "
     "with 1-D Box actions)"),
    ("td3-pendulum", {"env_id": "CartPole-v1"},
     "TD3Config: td3 needs a continuous (Box) action space; CartPole-v1 has Discrete actions (set env_id to an env "
     "with 1-D Box actions)"),
    ("sac-mujoco", {"env_id": "CartPole-v1"},
     "SACMujocoConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions (set env_id to an "
     "env with 1-D Box actions)"),
]
#: What each recipe's build (the Atari and MuJoCo ones build through these) does first after its env check.
BUILD_STARTS = [
    ("engine_rl.recipes.dqn_cartpole", "config_devices"), ("engine_rl.recipes.ppo_cartpole", "resolve_device"),
    ("engine_rl.recipes.sac_pendulum", "config_devices"), ("engine_rl.recipes.td3_pendulum", "config_devices"),
]
IDS = [f"{recipe}-{'-'.join(f'{k}={v}' for k, v in fields.items())}" for recipe, fields, _ in ENV_BAD]


def _matches(message: str, expected: str) -> bool:
    return message.startswith(expected[:-3]) if expected.endswith("...") else message == expected


@pytest.fixture
def no_env_made(monkeypatch):
    """Making any gymnasium env (one copy or a vector env) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"an env was made: {args} {kwargs}")

    monkeypatch.setattr(gym, "make", refuse)
    monkeypatch.setattr(gym, "make_vec", refuse)


@pytest.mark.parametrize("recipe, fields, expected", ENV_BAD, ids=IDS)
def test_a_config_is_made_without_its_env_and_the_env_is_checked_at_build_time(recipe, fields, expected, monkeypatch):
    config = make_config(recipe, fields)  # no error: fields alone
    with pytest.raises(ValueError) as checked:
        config.check_env()
    assert _matches(str(checked.value), expected), str(checked.value)

    # the build checks the env before anything else: the devices are not even resolved
    def resolve(*args, **kwargs):
        raise AssertionError("the recipe went on building")

    for module, name in BUILD_STARTS:
        monkeypatch.setattr(sys.modules[module], name, resolve)
    with pytest.raises(ValueError) as built:
        get_recipe(recipe).build(config)
    assert str(built.value) == str(checked.value)


@pytest.mark.parametrize("recipe, fields, expected", ENV_BAD[2:4] + ENV_BAD[-3:-1], ids=IDS[2:4] + IDS[-3:-1])
def test_engine_rl_train_checks_the_env_before_writing_to_out(recipe, fields, expected, tmp_path, capsys):
    sets = [arg for key, value in fields.items() for arg in ("--set", f"{key}={value}")]
    out = tmp_path / "run"
    assert main(["train", recipe, *sets, "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"engine-rl: error: {expected}\n"
    assert not out.exists()


@pytest.mark.parametrize("recipe, fields, expected", ENV_BAD[2:4], ids=IDS[2:4])
def test_train_from_python_checks_the_env_before_writing_to_out(recipe, fields, expected, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        train(recipe, make_config(recipe, fields), out, progress=False)
    assert not out.exists()


def test_configs_are_made_overridden_and_listed_without_making_an_env(no_env_made, capsys):
    for name, recipe in RECIPES.items():
        config = recipe.config_cls()
        describe_config(config)
        make_config(name, {"env_id": "NoSuchEnv-v0", "seed": 3})
        make_config(name, {"env_id": "ALE/Pong-v5"})
    assert main(["recipes"]) == 0
    assert capsys.readouterr().err == ""


def test_construction_still_checks_the_env_fields_by_themselves():
    with pytest.raises(ValueError, match=r"^DQNConfig: env_id must be a registered gymnasium id \(a non-empty str\), "
                                         r"got ''$"):
        make_config("dqn-cartpole", {"env_id": ""})
    with pytest.raises(ValueError, match=r"^DQNConfig: make_env must be a callable returning a gymnasium.Env or "
                                         r"'module:function' naming one, got 'no_colon'$"):
        make_config("dqn-cartpole", {"make_env": "no_colon"})
    with pytest.raises(ValueError, match=r"^SACConfig: wrappers entry 'NoSuchWrapper' is not a single-env wrapper of "
                                         r"gymnasium.wrappers; known: "):
        make_config("sac-pendulum", {"wrappers": ("NoSuchWrapper",)})
    with pytest.raises(ValueError, match=r"^PPOConfig: env_backend 'torch' needs an env_id with a torch version "):
        make_config("ppo-cartpole", {"env_backend": "torch", "env_id": "Acrobot-v1"})


EXTRA_OF = {"dqn-atari": "ale_py", "ppo-atari": "ale_py", "qrdqn-atari": "ale_py", "ppo-mujoco": "mujoco",
            "sac-mujoco": "mujoco", "td3-mujoco": "mujoco"}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_default_config_passes_its_env_check_or_names_its_missing_extra(recipe):
    config = make_config(recipe)
    extra = EXTRA_OF.get(recipe)
    if extra is None or importlib.util.find_spec(extra) is not None:
        config.check_env()
        return
    with pytest.raises(ValueError, match=f"^{type(config).__name__}: env_id '{re.escape(config.env_id)}' needs "
                                         f"{re.escape(gym_envs.EXTRAS[extra])}$"):
        config.check_env()


def test_atari_ids_are_told_apart_as_ale_py_registers_them():
    pytest.importorskip("ale_py", reason="ale-py is not installed (the [atari] extra)")
    import ale_py  # noqa: F401  (registers the games)

    atari = {env_id for env_id, spec in gym.registry.items() if str(spec.entry_point).startswith("ale_py")}
    assert len(atari) > 300
    assert {env_id for env_id in gym.registry if is_atari_id(env_id)} == atari


def test_an_atari_id_without_ale_py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` raises ModuleNotFoundError
    needs = "needs the Atari extra: pip install engine_rl[atari] (ale-py)"
    for env_id in ("ALE/NoSuchGame-v5", "NoSuchGameNoFrameskip-v4"):  # not registered even with ale_py
        with pytest.raises(ValueError, match=rf"^demo: env_id '{re.escape(env_id)}' {re.escape(needs)}$"):
            env_spec(env_id, owner="demo")
    with pytest.raises(ValueError, match=rf"^demo: env_id 'ale_py:ALE/Pong-v5' {re.escape(needs)}$"):
        env_spec("ale_py:ALE/Pong-v5", owner="demo")
    # an id that is no Atari game keeps its message
    with pytest.raises(ValueError, match=r"^demo: env_id 'Cartpole-v1' is not a registered gymnasium env; close "):
        env_spec("Cartpole-v1", owner="demo")
