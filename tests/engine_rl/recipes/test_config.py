import dataclasses
import re

import pytest

from engine_rl.recipes import DQNConfig, get_recipe
from engine_rl.recipes.config import apply_overrides, describe_config, field_docs


def test_overrides_types_and_errors():
    cfg = apply_overrides(DQNConfig(), ["lr=3e-4", "num_envs=16", "hidden=(32, 32)", "prioritized=true", "frames_per_batch=512"])
    assert (cfg.lr, cfg.num_envs, cfg.hidden, cfg.prioritized) == (3e-4, 16, (32, 32), True)
    with pytest.raises(ValueError, match=r"unknown key 'lrr'; valid keys: alpha, async_collection, batch_size"):
        apply_overrides(DQNConfig(), ["lrr=1"])
    with pytest.raises(ValueError, match=r"override num_envs='eight' is not a valid int"):
        apply_overrides(DQNConfig(), ["num_envs=eight"])
    with pytest.raises(ValueError, match="must look like key=value"):
        apply_overrides(DQNConfig(), ["lr"])


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match=r"frames_per_batch \(250\) must be a multiple of num_envs \(32\)"):
        DQNConfig(frames_per_batch=250)
    with pytest.raises(ValueError, match=r"learning_starts \(2000\) exceeds total_frames \(1000\)"):
        DQNConfig(total_frames=1000, learning_starts=2000)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        DQNConfig(batch_size=0)


def test_every_field_is_documented():
    docs = field_docs(DQNConfig)
    assert {f.name for f in dataclasses.fields(DQNConfig)} == set(docs)
    assert "lr = 0.0023  # Adam learning rate at the start of the run." in describe_config(DQNConfig())
    from engine_rl.recipes import RECIPES

    for name, recipe in RECIPES.items():
        assert {f.name for f in dataclasses.fields(recipe.config_cls)} == set(field_docs(recipe.config_cls)), name


def test_subclassed_configs_inherit_field_docs_and_redeclared_fields_document_anew():
    from engine_rl.recipes.config_base import RecipeConfig
    from engine_rl.recipes.off_policy import OffPolicyConfig
    from engine_rl.recipes.td3_mujoco import TD3MujocoConfig
    from engine_rl.recipes.td3_pendulum import TD3Config

    base, td3 = field_docs(RecipeConfig), field_docs(TD3Config)
    assert td3["env_id"] == base["env_id"]  # inherited
    # a new default without a docstring keeps the base's docstring
    assert field_docs(TD3MujocoConfig)["log_every_frames"] == field_docs(OffPolicyConfig)["log_every_frames"]
    assert "gamma = 0.98  # Discount factor (rl-zoo: 0.98)." in describe_config(TD3Config())

    @dataclasses.dataclass(kw_only=True)
    class Mine(TD3Config):
        gamma: float = 0.9
        """Discount factor of my task."""

    assert field_docs(Mine)["gamma"] == "Discount factor of my task."  # a docstring of its own documents it anew
    assert field_docs(Mine)["tau"] == field_docs(OffPolicyConfig)["tau"]


def test_shared_fields_are_declared_and_checked_once_and_recipes_document_their_reference_values():
    """A field of the config base is declared and checked there; a recipe config redeclares one to
    change its default or to say where its value comes from (rl-zoo, CleanRL, SB3), and the base's
    checks still apply to it."""
    from engine_rl.recipes import RECIPES
    from engine_rl.recipes.config import _own_field_docs
    from engine_rl.recipes.config_base import RecipeConfig, ReplayConfig

    shared = {f.name for f in dataclasses.fields(ReplayConfig)}
    assert {f.name for f in dataclasses.fields(RecipeConfig)} < shared
    for recipe in RECIPES.values():
        classes = [k for k in recipe.config_cls.__mro__ if dataclasses.is_dataclass(k)]
        assert classes[-1] is RecipeConfig, recipe.name
        for klass, parent in zip(classes, classes[1:]):
            if klass in (RecipeConfig, ReplayConfig):
                continue
            own_docs = _own_field_docs(klass)
            for name in shared & set(vars(klass).get("__annotations__", {})):
                before = parent.__dataclass_fields__.get(name)
                if before is not None and klass.__dataclass_fields__[name].default == before.default:
                    assert name in own_docs and own_docs[name] != field_docs(parent).get(name), (klass.__name__, name)
    listings = {name: describe_config(RECIPES[name].config_cls()) for name in RECIPES}
    for name, line in [("dqn-atari", "lr = 0.0001  # Adam learning rate (rl-zoo: 1e-4)."),
                       ("dqn-atari", "eps_frames = 1000000  # Frames over which epsilon decays linearly (rl-zoo: 10% of 10M)."),
                       ("ppo-atari", "num_envs = 8  # Environment copies stepped together by the collector (CleanRL: num_envs=8)."),
                       ("ppo-mujoco", "gae_lambda = 0.95  # GAE lambda (CleanRL: 0.95)."),
                       ("sac-mujoco", "lr = 0.0003  # Adam learning rate of the actor, the critics and the temperature (SB3 default: 3e-4)."),
                       ("td3-mujoco", "hidden = (400, 300)  # Hidden layer widths of the actor and of each critic (rl-zoo: net_arch [400, 300]).")]:
        assert line in listings[name], (name, line)
    with pytest.raises(ValueError, match="lr"):  # the base's check, on a field a recipe redeclares
        RECIPES["dqn-atari"].config_cls(lr=0.0)


def test_override_values_parse_as_the_field_type():
    from engine_rl.recipes.ppo_cartpole import PPOConfig
    from engine_rl.recipes.sac_pendulum import SACConfig

    cfg = apply_overrides(DQNConfig(), ["total_frames=1e5", "lr_end=None", "info_keys=is_success,x",
                                        "wrappers=TimeLimit(max_episode_steps=200),FlattenObservation",
                                        "hidden=32", "double=no", "seed=0012", "target_tau=none"])
    assert (cfg.total_frames, cfg.lr_end, cfg.info_keys, cfg.hidden, cfg.double, cfg.seed, cfg.target_tau) == (
        100_000, None, ("is_success", "x"), (32,), False, 12, None)
    assert cfg.wrappers == ("TimeLimit(max_episode_steps=200)", "FlattenObservation")
    assert apply_overrides(DQNConfig(), ["info_keys=", "hidden=()"]).info_keys == ()
    assert apply_overrides(SACConfig(), ["optim_steps_per_batch=None"]).optim_steps_per_batch is None
    ppo = apply_overrides(PPOConfig(), ["env_kwargs={'map_name': '8x8'}", "make_env=mymodule:make", "lr=2.5e-4"])
    assert (ppo.env_kwargs, ppo.make_env, ppo.lr) == ({"map_name": "8x8"}, "mymodule:make", 2.5e-4)
    bad = [("total_frames=1.5", "int"), ("lr_end=x", "float"), ("hidden=(32, 'a')", "tuple"), ("info_keys=3", "tuple"),
           ("double=maybe", "bool"), ("env_kwargs={[1]: 2}", "dict"), ("seed=1e400", "int")]
    for item, kind in bad:
        key, text = item.split("=", 1)
        message = f"DQNConfig: override {key}={text!r} is not a valid {kind}"  # one line: the field, the text, the type
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            apply_overrides(DQNConfig(), [item])
    with pytest.raises(ValueError, match="^PPOConfig: override lr_end='None' is not a valid float$"):
        apply_overrides(PPOConfig(), ["lr_end=None"])  # PPO's lr_end takes no None
    with pytest.raises(ValueError, match=r"^DQNConfig: seed must be an int in \[0, 2\*\*63\)"):
        apply_overrides(DQNConfig(), ["seed=" + "9" * 400])  # parsed, then refused by the check


def test_unknown_recipe():
    with pytest.raises(ValueError, match=r"unknown recipe 'dqn-pong'; known recipes: dqn-atari, dqn-cartpole"):
        get_recipe("dqn-pong")
