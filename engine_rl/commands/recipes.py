"""``engine-rl recipes``: list the recipes with every config field, its default and meaning."""

from __future__ import annotations

import argparse

from engine_rl.recipes import RECIPES
from engine_rl.recipes.config import describe_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("recipes", help="list recipes with their defaults")


def run(args: argparse.Namespace) -> int:
    for name in sorted(RECIPES):
        recipe = RECIPES[name]
        print(f"{name}: {recipe.summary}")
        print(describe_config(recipe.config_cls()))
    return 0
