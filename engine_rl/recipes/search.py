"""Sampling helpers for the recipes' tuning search spaces (``search_space(trial, config)``, see
:data:`engine_rl.recipes.base.SearchSpace`).

The spaces follow rl-baselines3-zoo's samplers (``rl_zoo3/hyperparams_opt.py``,
https://github.com/DLR-RM/rl-baselines3-zoo, read at commit 22e3ff2): the same ranges and choices,
written as this project's config fields. ``trial`` is an Optuna trial, used only through its
``suggest_float``, ``suggest_int`` and ``suggest_categorical`` methods, so the recipes import no
Optuna (it comes with the ``[tune]`` extra). The parameter names are rl-zoo's where a value is
sampled in another form than the field takes (``one_minus_gamma``, ``batch_size_pow``,
``net_arch``), so a study reads like rl-zoo's.

Examples:
    >>> import optuna
    >>> trial = optuna.trial.FixedTrial({"one_minus_gamma": 0.01, "batch_size_pow": 6, "net_arch": "small"})
    >>> round(discount(trial), 6), power_of_two(trial, "batch_size", 2, 10), network(trial, OFF_POLICY_NETS)
    (0.99, 64, (64, 64))
"""

from __future__ import annotations

from typing import Any

__all__ = ["OFF_POLICY_NETS", "discount", "network", "off_policy_space", "power_of_two"]

#: rl-zoo's ``net_arch`` choices of its off-policy samplers (DQN, SAC, TD3) as ``hidden`` widths.
OFF_POLICY_NETS: dict[str, tuple[int, ...]] = {"small": (64, 64), "medium": (256, 256), "big": (400, 300)}


def discount(trial: Any) -> float:
    """``gamma`` as rl-zoo samples it: 1 minus a log-uniform ``one_minus_gamma`` in [1e-4, 0.03]."""
    return 1.0 - trial.suggest_float("one_minus_gamma", 1e-4, 0.03, log=True)


def power_of_two(trial: Any, name: str, low: int, high: int) -> int:
    """``2 ** k`` for an int ``k`` in [low, high], sampled as ``<name>_pow`` (rl-zoo's batch sizes)."""
    return 2 ** trial.suggest_int(f"{name}_pow", low, high)


def network(trial: Any, choices: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Hidden widths from a named choice, sampled as ``net_arch`` (Optuna's choices must be plain values)."""
    return choices[trial.suggest_categorical("net_arch", list(choices))]


def off_policy_space(trial: Any, config: Any) -> dict[str, Any]:
    """What rl-zoo's ``sample_sac_params`` and ``sample_td3_params`` share, as the fields of
    :class:`~engine_rl.recipes.off_policy.OffPolicyConfig`: ``gamma`` (:func:`discount`);
    ``batch_size`` 2**2..2**11; ``lr`` [1e-5, 2e-3] (log-uniform); rl-zoo's ``train_freq`` 1..10 steps
    of each env copy per batch with one update per frame (``frames_per_batch = optim_steps_per_batch =
    train_freq * num_envs``);
    ``tau`` [0.001, 0.08] (log); ``hidden`` small, medium or big (:data:`OFF_POLICY_NETS`)."""
    gamma, batch_size = discount(trial), power_of_two(trial, "batch_size", 2, 11)
    lr = trial.suggest_float("learning_rate", 1e-5, 2e-3, log=True)
    train_freq = trial.suggest_int("train_freq", 1, 10)
    return {
        "gamma": gamma, "batch_size": batch_size, "lr": lr,
        "frames_per_batch": train_freq * config.num_envs, "optim_steps_per_batch": train_freq * config.num_envs,
        "tau": trial.suggest_float("tau", 0.001, 0.08, log=True),
        "hidden": network(trial, OFF_POLICY_NETS),
    }
