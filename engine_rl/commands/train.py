"""``engine-rl train RECIPE``: train with a progress bar; metrics, checkpoints, summary to ``--out``."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from engine_rl.recipes import get_recipe
from engine_rl.recipes.runner import make_config, train


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train a recipe, writing metrics.jsonl, checkpoints and summary.json")
    t.add_argument("recipe", help="recipe name (see `engine-rl recipes`)")
    t.add_argument("--frames", type=int, default=None, help="total frames (overrides the recipe's total_frames)")
    t.add_argument("--seed", type=int, default=None, help="seed (overrides the recipe's seed)")
    t.add_argument("--out", default=None, help="output folder (default: runs/RECIPE-seedS)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field; repeatable (e.g. --set lr=3e-4 --set num_envs=16)")
    t.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on 2 shared cores 1 thread is the safe choice)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    try:
        get_recipe(args.recipe)
        overrides = list(args.overrides)
        if args.frames is not None:
            overrides.append(f"total_frames={args.frames}")
        if args.seed is not None:
            overrides.append(f"seed={args.seed}")
        config = make_config(args.recipe, overrides)
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
    except ValueError as err:
        print(f"engine-rl: error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    out = args.out or f"runs/{args.recipe}-seed{config.seed}"
    summary = train(args.recipe, config, out, progress=not args.no_progress)
    print(json.dumps(summary))
    return 0
