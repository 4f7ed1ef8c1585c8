"""``engine-rl train RECIPE``: train with a progress bar; metrics, checkpoints, summary to ``--out``.

``--resume`` continues the run in ``--out`` from its newest checkpoint (or ``--resume PATH``)
with the config saved in ``--out/config.json``; it exits with an error if ``--frames``,
``--seed`` or ``--set`` would change that config. A run that fails on a bad checkpoint or an env
error exits with status 1 and a one-line message naming the file, or the env copy and step.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from engine_rl.checkpoint import CheckpointError, latest_checkpoint
from engine_rl.collectors import EnvError
from engine_rl.recipes import get_recipe
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.runner import RunError, load_run_config, make_config, train


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
    t.add_argument("--visdom", nargs="?", const="http://127.0.0.1:8097", default=None, metavar="URL",
                   help="plot the run live on a visdom server (default URL http://127.0.0.1:8097; "
                        "start one with `engine-rl dashboard`); one env per run, named after --out")
    t.add_argument("--resume", nargs="?", const=True, default=False, metavar="PATH",
                   help="continue the run in --out from its newest checkpoint (or from PATH), with its saved config")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="batches between full checkpoints (default: a tenth of the run)")
    t.add_argument("--until-frames", type=int, default=None, metavar="F",
                   help="pause after F frames with a checkpoint (continue later with --resume)")
    t.add_argument("--patience", type=int, default=None, metavar="N",
                   help="stop early when the evaluation return has not improved for N evaluations")


def run(args: argparse.Namespace) -> int:
    try:
        get_recipe(args.recipe)
        overrides = list(args.overrides)
        if args.frames is not None:
            overrides.append(f"total_frames={args.frames}")
        if args.seed is not None:
            overrides.append(f"seed={args.seed}")
        if args.resume:
            seed = args.seed if args.seed is not None else make_config(args.recipe).seed
            out = args.out or f"runs/{args.recipe}-seed{seed}"
            config = load_run_config(out, args.recipe)
            if overrides:  # the runner refuses them if they change the saved config
                config = apply_overrides(config, overrides)
        else:
            config = make_config(args.recipe, overrides)
            out = args.out or f"runs/{args.recipe}-seed{config.seed}"
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
    except ValueError as err:
        print(f"engine-rl: error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    try:
        summary = train(
            args.recipe, config, out, progress=not args.no_progress, visdom=args.visdom, resume=args.resume,
            checkpoint_every=args.checkpoint_every, until_frames=args.until_frames, patience=args.patience,
        )
    except RunError as err:
        print(f"engine-rl: error: {err}", file=sys.stderr)
        return 2
    except (CheckpointError, EnvError) as err:
        latest = latest_checkpoint(f"{out}/checkpoints")
        hint = f"; the latest checkpoint, {latest}, is intact: continue with --resume" if latest else ""
        print(f"engine-rl: error: {err}{hint if isinstance(err, EnvError) else ''}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0
