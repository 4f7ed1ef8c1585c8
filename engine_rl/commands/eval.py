"""``engine-rl eval CHECKPOINT``: evaluate an inference checkpoint and print the metrics as JSON.

An inference checkpoint (``RUN/inference.pt``, ``RUN/best/*.pt``; a run folder means its
``inference.pt``) holds the evaluation policy's weights, any normalizer, and the recipe and
config that rebuild the policy. The recipe is built with that config, the weights are loaded
into its evaluation policy, and its own evaluator runs (the same env copies as the run's
evaluations), so with the run's ``eval_seed`` and ``eval_episodes`` (the defaults) the scores
are those of an evaluation during training with that policy.

The stored config is data: a checkpoint whose config names code (a ``make_env``, an ``env_id``
with a module prefix) is refused before anything is built from it, unless ``--trust-config``
says the file is trusted (:mod:`engine_rl.run.stored_config`); evaluating a checkpoint from
someone else never runs their code by itself.

``--video DIR`` also records the episodes (``--episodes``, default the run's ``eval_episodes``) as
MP4s, ``DIR/<checkpoint name>_ep<k>.mp4`` (:mod:`engine_rl.video`: one env copy seeded with the
evaluation seed, rendering), listed in the JSON's ``videos``; an env that cannot render is refused
in one line before anything is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from engine_rl.commands import fail
from engine_rl.engine import attached_objects
from engine_rl.evaluation import Evaluator, create_evaluator
from engine_rl.recipes import get_recipe
from engine_rl.recipes.checks import SEED_LIMIT
from engine_rl.recipes.env_source import check_recipe_renders, recipe_render_env, recipe_vec_env
from engine_rl.run.checkpoint import CheckpointError, InferenceState, load_inference
from engine_rl.run.driver import make_config
from engine_rl.run.folder import REMOVED_FIELDS
from engine_rl.run.stored_config import check_stored_code
from engine_rl.video import VideoError, record_episodes


def add_parser(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("eval", help="evaluate an inference checkpoint; print return/length metrics as JSON")
    e.add_argument("checkpoint", help="inference checkpoint (RUN/inference.pt, RUN/best/*.pt) or a run folder")
    e.add_argument("--episodes", type=int, default=None, help="episodes (default: the run's eval_episodes)")
    e.add_argument("--seed", type=int, default=None, help="evaluation env seed (default: the run's eval_seed)")
    e.add_argument("--device", default="auto", metavar="DEVICE",
                   help="where the policy runs: auto (default: CUDA when available, else the CPU), cpu, cuda or cuda:N; "
                        "a checkpoint written on a GPU evaluates on a CPU")
    e.add_argument("--video", default=None, metavar="DIR",
                   help="also record the episodes as MP4s in DIR, one per episode (the [video] extra)")
    e.add_argument("--trust-config", action="store_true",
                   help="let the checkpoint's config run the code it names (make_env, an env_id with a module "
                        "prefix); refused without it")


def evaluate_checkpoint(
    path: str | Path,
    *,
    episodes: int | None = None,
    seed: int | None = None,
    device: str = "auto",
    trust_config: bool = False,
    video: str | Path | None = None,
) -> dict:
    """Rebuild the policy of an inference checkpoint on ``device`` and evaluate it; return the metrics
    (with ``video``, a folder, also the episodes recorded there: ``"videos"``, see the module docstring).

    A config that names code (``make_env``, a module-prefixed ``env_id``) is a ``ValueError``
    unless ``trust_config``; nothing it names is imported or called before that check.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "inference.pt").exists():
            raise CheckpointError(f"checkpoint {path}: a folder without inference.pt; name an inference checkpoint "
                                  "(RUN/inference.pt, RUN/best/*.pt) or a run folder holding inference.pt")
        path = path / "inference.pt"
    state = load_inference(path)
    cannot = f"checkpoint {path}: its recipe and config cannot be rebuilt here"
    try:
        recipe = get_recipe(state["recipe"])
    except ValueError as err:
        raise ValueError(f"{cannot}: {err}") from err
    check_stored_code(state["config"], source=f"checkpoint {path}: its config", owner=recipe.config_cls.__name__,
                      trusted=trust_config)
    try:
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in state["config"].items()
                  if k not in REMOVED_FIELDS}  # removed fields shaped the training only: any value evaluates
        known = {f.name for f in dataclasses.fields(recipe.config_cls)}
        fields.update({k: device if k == "device" else "auto" for k in ("device", "replay_device") if k in known})
        config = make_config(recipe.name, fields)
        if hasattr(config, "check_env"):
            config.check_env()
    except ValueError as err:  # e.g. its env is not registered here, or needs an extra not installed here
        raise ValueError(f"{cannot}: {err}") from err
    if video is not None:
        check_recipe_renders(config, owner=f"--video {video}")
    setup = recipe.build(config)
    try:
        try:
            InferenceState(setup.eval_policy, normalizer=getattr(setup, "normalizer", None)).load_state_dict(state)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"checkpoint {path}: the policy does not load into recipe {recipe.name!r}: {err}") from err
        evaluator = _evaluator(setup, config, episodes)
        if episodes is not None:
            evaluator.num_episodes = episodes
        if seed is not None:
            evaluator.seed = seed
        metrics = dict(evaluator.run().metrics)
        result = {
            "checkpoint": str(path), "recipe": recipe.name, "episodes": evaluator.num_episodes,
            "seed": evaluator.seed, **metrics,
        }
        if video is not None:
            videos = record_episodes(recipe_render_env(config), evaluator.policy, evaluator.num_episodes, video,
                                     name=path.stem, seed=evaluator.seed, device=evaluator.device)
            result["videos"] = [v.as_dict() for v in videos]
        return result
    finally:
        setup.close()


def _evaluator(setup: Any, config: Any, episodes: int | None) -> Evaluator:
    """The recipe's own evaluator (the one its ValidationRollout drives), found by type so the CLI
    needs no import of the handlers package; else one on evaluation envs of the config."""
    evaluator = next(
        (o.evaluator for o in attached_objects(setup.trainer) if isinstance(getattr(o, "evaluator", None), Evaluator)),
        None,
    )
    if evaluator is None:
        n = episodes or getattr(config, "eval_episodes", 10)
        env = recipe_vec_env(config, min(n, 16), evaluation=True)
        setup.closers.append(env.close)
        evaluator = create_evaluator(env, setup.eval_policy, num_episodes=n, seed=getattr(config, "eval_seed", 0),
                                     info_keys=getattr(config, "info_keys", ()))
    return evaluator


def run(args: argparse.Namespace) -> int:
    """Print the metrics as JSON; a bad argument or checkpoint, or a video that cannot be written,
    is one error line (status 2 for a ``ValueError``, 1 for a ``CheckpointError`` or ``VideoError``)."""
    try:
        for name in ("episodes", "seed"):
            value = getattr(args, name)
            if value is not None and value < (1 if name == "episodes" else 0):
                raise ValueError(f"--{name} must be {'>= 1' if name == 'episodes' else '>= 0'}, got {value}")
        if args.seed is not None and args.seed >= SEED_LIMIT:
            raise ValueError(f"--seed must be below 2**63 (torch takes seeds below 2**64; env copies add to a seed), "
                             f"got {args.seed}")
        result = evaluate_checkpoint(args.checkpoint, episodes=args.episodes, seed=args.seed, device=args.device,
                                     trust_config=args.trust_config, video=args.video)
    except (ValueError, CheckpointError, VideoError) as err:
        return fail(err, debug=getattr(args, "debug", False))
    print(json.dumps(result))
    return 0
