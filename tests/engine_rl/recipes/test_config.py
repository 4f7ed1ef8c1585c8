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
    import dataclasses

    assert {f.name for f in dataclasses.fields(DQNConfig)} == set(docs)
    assert "lr = 0.0023  # Adam learning rate at the start of the run." in describe_config(DQNConfig())
    from engine_rl.recipes import RECIPES

    for name, recipe in RECIPES.items():
        assert {f.name for f in dataclasses.fields(recipe.config_cls)} == set(field_docs(recipe.config_cls)), name


def test_subclassed_configs_inherit_field_docs_and_redeclared_fields_document_anew():
    from engine_rl.recipes.off_policy import OffPolicyConfig
    from engine_rl.recipes.td3_pendulum import TD3Config

    base, td3 = field_docs(OffPolicyConfig), field_docs(TD3Config)
    assert td3["env_id"] == base["env_id"]  # inherited
    assert td3["gamma"] == "Discount factor (rl-zoo: 0.98)." != base["gamma"]  # redeclared
    assert "gamma = 0.98  # Discount factor (rl-zoo: 0.98)." in describe_config(TD3Config())


def test_unknown_recipe():
    with pytest.raises(ValueError, match=r"unknown recipe 'dqn-pong'; known recipes: dqn-atari, dqn-cartpole"):
        get_recipe("dqn-pong")
