"""Ready trainers, each a dataclass config plus a build function, registered by name."""

from engine_rl.recipes import dqn_cartpole  # noqa: F401  (registers "dqn-cartpole")
from engine_rl.recipes.base import RECIPES, Recipe, Setup, get_recipe
from engine_rl.recipes.dqn_cartpole import DQNConfig

__all__ = ["RECIPES", "Recipe", "Setup", "get_recipe", "DQNConfig"]
