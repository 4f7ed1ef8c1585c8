"""Every recipe config checks its fields at construction: errors name the config, the field, what
it accepts and the value. The env a config names (registered, spaces suiting the algorithm) is
checked when the recipe is built: tests/engine_rl/recipes/test_env_checks.py."""

import dataclasses

import pytest

from engine_rl.recipes import RECIPES
from engine_rl.recipes.checks import FieldChecks
from engine_rl.recipes.dqn_atari import DQNAtariConfig
from engine_rl.recipes.dqn_cartpole import DQNConfig
from engine_rl.recipes.off_policy import OffPolicyConfig
from engine_rl.recipes.ppo_cartpole import PPOConfig
from engine_rl.recipes.sac_pendulum import SACConfig
from engine_rl.recipes.td3_pendulum import TD3Config

NAN, INF = float("nan"), float("inf")

BAD = [
    (DQNConfig, {"lr": NAN}, "DQNConfig: lr must be a positive finite number, got nan"),
    (DQNConfig, {"lr": -1.0}, "DQNConfig: lr must be a positive finite number, got -1.0"),
    (DQNConfig, {"lr": INF}, "DQNConfig: lr must be a positive finite number, got inf"),
    (DQNConfig, {"lr": "0.1"}, "DQNConfig: lr must be a positive finite number, got '0.1'"),
    (DQNConfig, {"lr_end": -0.1}, "DQNConfig: lr_end must be a finite number >= 0 or None, got -0.1"),
    (DQNConfig, {"gamma": 2.0}, r"DQNConfig: gamma must be a number in \[0, 1\], got 2.0"),
    (DQNConfig, {"hidden": (0,)}, r"DQNConfig: hidden must be a tuple of positive ints \(layer widths\), got \(0,\)"),
    (DQNConfig, {"hidden": [64]}, r"DQNConfig: hidden must be a tuple of positive ints \(layer widths\), got \[64\]"),
    (DQNConfig, {"learning_starts": -5}, "DQNConfig: learning_starts must be a non-negative int, got -5"),
    (DQNConfig, {"vectorization": "bogus"},
     r"DQNConfig: vectorization must be one of \('auto', 'vector_entry_point', 'sync', 'async'\), got 'bogus'"),
    (DQNConfig, {"eps_start": 0.1, "eps_end": 0.5}, r"DQNConfig: eps_start \(0.1\) must be >= eps_end \(0.5\)"),
    (DQNConfig, {"eps_end": -0.1}, r"DQNConfig: eps_end must be a number in \[0, 1\], got -0.1"),
    (DQNConfig, {"target_tau": 0.0}, r"DQNConfig: target_tau must be a number in \(0, 1\] or None, got 0.0"),
    (DQNConfig, {"max_grad_norm": NAN}, "DQNConfig: max_grad_norm must be a finite number, got nan"),
    (DQNConfig, {"double": "yes"}, "DQNConfig: double must be True or False, got 'yes'"),
    (DQNConfig, {"seed": -1}, "DQNConfig: seed must be a non-negative int, got -1"),
    # torch.manual_seed(2**64) raised "Overflow when unpacking long long"; runs add env copies and ranks to seeds
    (DQNConfig, {"seed": 2**64}, r"DQNConfig: seed must be an int in \[0, 2\*\*63\) \(torch takes seeds below 2\*\*64; "
                                 r"env copies and ranks add to a seed\), got 18446744073709551616"),
    (PPOConfig, {"eval_seed": 2**63}, r"PPOConfig: eval_seed must be an int in \[0, 2\*\*63\) .*, got 9223372036854775808"),
    (TD3Config, {"seed": 2**63}, r"TD3Config: seed must be an int in \[0, 2\*\*63\)"),
    (DQNConfig, {"info_keys": ("a", "a")},
     r"DQNConfig: info_keys must be a tuple of distinct non-empty strings, got \('a', 'a'\)"),
    (DQNConfig, {"buffer_size": 100, "batch_size": 256}, r"DQNConfig: buffer_size \(100\) must be >= batch_size \(256\)"),
    # the replay recipes' shared checks name the config that failed them
    (DQNAtariConfig, {"frames_per_batch": 250}, r"^DQNAtariConfig: frames_per_batch \(250\) must be a multiple of num_envs \(8\)$"),
    (TD3Config, {"learning_starts": 30_000}, r"^TD3Config: learning_starts \(30000\) exceeds total_frames \(20000\)$"),
    (PPOConfig, {"gae_lambda": 1.5}, r"PPOConfig: gae_lambda must be a number in \[0, 1\], got 1.5"),
    (PPOConfig, {"adam_eps": 0.0}, "PPOConfig: adam_eps must be a positive finite number, got 0.0"),
    (PPOConfig, {"entropy_coef": -0.01}, "PPOConfig: entropy_coef must be a finite number >= 0, got -0.01"),
    (PPOConfig, {"target_kl": 0.0}, "PPOConfig: target_kl must be a positive finite number or None, got 0.0"),
    (PPOConfig, {"activation": "gelu"}, r"PPOConfig: activation must be one of \('relu', 'tanh'\), got 'gelu'"),
    (SACConfig, {"buffer_size": 100, "batch_size": 256}, r"SACConfig: buffer_size \(100\) must be >= batch_size \(256\)"),
    (SACConfig, {"tau": 0.0}, r"SACConfig: tau must be a number in \(0, 1\], got 0.0"),
    (SACConfig, {"alpha_init": NAN}, "SACConfig: alpha_init must be a positive finite number, got nan"),
    (SACConfig, {"target_entropy": INF}, "SACConfig: target_entropy must be a finite number or None, got inf"),
    (SACConfig, {"vectorization": "fast"}, "SACConfig: vectorization must be one of"),
    (TD3Config, {"noise_clip": INF}, "TD3Config: noise_clip must be a finite number >= 0, got inf"),
    (TD3Config, {"optim_steps_per_batch": 0}, "TD3Config: optim_steps_per_batch must be a positive int or None, got 0"),
]


@pytest.mark.parametrize("cls, fields, match", BAD, ids=[f"{c.__name__}-{'-'.join(f)}" for c, f, _ in BAD])
def test_bad_fields_are_named_with_the_value_and_what_is_accepted(cls, fields, match):
    with pytest.raises(ValueError, match=match):
        cls(**fields)


def test_defaults_and_good_values_pass():
    for recipe in RECIPES.values():
        recipe.config_cls()
    DQNConfig(lr_end=None, target_tau=0.005, hidden=(), env_id="Acrobot-v1", vectorization="sync")
    PPOConfig(env_id="Pendulum-v1", value_clip=0.2, target_kl=0.01)
    SACConfig(target_entropy=-2, env_id="MountainCarContinuous-v0")
    OffPolicyConfig(env_id="CartPole-v1")  # the base has no algorithm: recipes check the spaces
    SACConfig(seed=2**63 - 1, eval_seed=2**63 - 1)


def test_every_field_of_every_recipe_is_checked():
    """A wrong type in any field is refused by name (a new field needs its check)."""
    for recipe in RECIPES.values():
        for field in dataclasses.fields(recipe.config_cls):
            with pytest.raises(ValueError, match=f"{recipe.config_cls.__name__}: {field.name}"):
                recipe.config_cls(**{field.name: object()})


def test_field_checks_on_any_dataclass():
    @dataclasses.dataclass
    class Mine:
        n: int = 1

    with pytest.raises(ValueError, match="Mine: n must be a positive int, got True"):
        FieldChecks(Mine(n=True)).positive_ints("n")
