"""Ready trainers, each a dataclass config plus a build function, registered by name.

Every module in this package that calls :func:`register` is imported here, so a new recipe is
one new file.
"""

import importlib
import pkgutil

from engine_rl.recipes.base import RECIPES, Recipe, Setup, get_recipe, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "config"):
        importlib.import_module(f"{__name__}.{_module.name}")

from engine_rl.recipes.dqn_cartpole import DQNConfig  # noqa: E402

__all__ = ["RECIPES", "Recipe", "Setup", "get_recipe", "register", "DQNConfig"]
