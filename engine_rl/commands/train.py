"""``engine-rl train RECIPE``: train with a progress bar; metrics, checkpoints, summary to ``--out``.

``--resume`` continues the run in ``--out`` from its newest checkpoint (or ``--resume PATH``)
with the config saved in ``--out/config.json``; it exits with an error if ``--frames``,
``--seed`` or ``--set`` would change that config. A run that fails on a bad checkpoint or an env
error exits with status 1 and a one-line message naming the file, or the env copy and step.
``--device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) is the one field a resume may change: a run
saved on a GPU machine continues on a CPU one with ``--resume --device cpu``. ``config.json`` is
data: a ``make_env`` or an ``env_id`` with a module prefix in it runs only when named again
(``--resume --set make_env=mymodule:make_env``) or with ``--trust-config``.

``--nproc N`` trains data-parallel in N processes on this machine (``ignite.distributed``, gloo
on CPU, nccl on GPU; see :mod:`engine_rl.distributed`); ``--frames`` then counts the frames of
all of them. Several machines: run ``torchrun --nnodes M --nproc-per-node N ... -m engine_rl
train RECIPE ...`` on each (no ``--nproc``), or ``engine-rl train RECIPE --nproc N --nnodes M
--node-rank K --master-addr HOST --master-port PORT`` on machine ``K``.

``--video N`` records N evaluation episodes of the final policy (``--video-best``: and of each new
best) as MP4s in ``--out/videos/`` (rank 0; :mod:`engine_rl.video`); an env that cannot render is
refused in one line before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import ignite.distributed as idist
import torch
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from engine_rl.collectors import EnvError
from engine_rl.commands import fail, one_line, one_line_output
from engine_rl.device import config_devices
from engine_rl.finite import NonFiniteElsewhere
from engine_rl.recipes import get_recipe
from engine_rl.recipes.env_source import check_recipe_renders
from engine_rl.run.checkpoint import latest_checkpoint
from engine_rl.run.driver import RunError, load_run_config, make_config, train
from engine_rl.run.launch import launched_externally, run_parallel
from engine_rl.trackers import TrackerSpec

#: Where a bare ``--visdom`` posts (and where it starts a server if none answers).
DEFAULT_VISDOM_URL = "http://127.0.0.1:8097"


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train a recipe, writing metrics.jsonl, checkpoints and summary.json")
    t.add_argument("recipe", help="recipe name (see `engine-rl recipes`)")
    t.add_argument("--frames", type=int, default=None, help="total frames (overrides the recipe's total_frames)")
    t.add_argument("--seed", type=int, default=None, help="seed (overrides the recipe's seed)")
    t.add_argument("--out", default=None, help="output folder (default: runs/RECIPE-seedS)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field; repeatable (e.g. --set lr=3e-4 --set num_envs=16)")
    t.add_argument("--device", default=None, metavar="DEVICE",
                   help="auto (default: CUDA when available, else the CPU), cpu, cuda or cuda:N; sets the config's "
                        "device (a resumed run may move to another device)")
    t.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="with --set collector=ray: join the running Ray cluster whose head is there (sets the config's "
                        "ray_address; a resumed run may join another one); default: a Ray on this machine for the run")
    t.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on 2 shared cores 1 thread is the safe choice)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--visdom", nargs="?", const=DEFAULT_VISDOM_URL, default=None, metavar="URL",
                   help="plot the run live on a visdom server (default URL http://127.0.0.1:8097; with no URL "
                        "and no server there, one is started for the run); one env per run, named after --out")
    t.add_argument("--logger", dest="loggers", action="append", default=[], metavar="NAME[=TARGET]",
                   help="also log every metrics.jsonl line to tensorboard (RUN/tensorboard/), mlflow (RUN/mlflow.db) "
                        "or wandb (offline in RUN/wandb/ unless W&B is configured); repeatable; TARGET: a directory, "
                        "an MLflow tracking URI or a W&B project; --resume continues the same tracker runs")
    t.add_argument("--resume", nargs="?", const=True, default=False, metavar="PATH",
                   help="continue the run in --out from its newest checkpoint (or from PATH), with its saved config")
    t.add_argument("--trust-config", action="store_true",
                   help="with --resume: let the run folder's config.json run the code it names (make_env, an "
                        "env_id with a module prefix); without it, that code must be named again with --set")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="batches between full checkpoints (default: a tenth of the run)")
    t.add_argument("--until-frames", type=int, default=None, metavar="F",
                   help="pause after F frames with a checkpoint (continue later with --resume)")
    t.add_argument("--patience", type=int, default=None, metavar="N",
                   help="stop early when the evaluation return has not improved for N evaluations")
    t.add_argument("--video", type=int, default=None, metavar="N",
                   help="record N evaluation episodes of the final policy as MP4s in OUT/videos/ (the [video] extra)")
    t.add_argument("--video-best", action="store_true",
                   help="with --video N: also record N episodes of each policy that evaluates better than all before")
    d = t.add_argument_group("data-parallel training (ignite.distributed)")
    d.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="processes on this machine, each with its own envs and replay shard, gradients averaged "
                        "(default 1: no process group); --frames counts the frames of all processes")
    d.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="torch.distributed backend (default: nccl if CUDA is available, else gloo)")
    d.add_argument("--nnodes", type=int, default=None, metavar="M", help="machines taking part (with --node-rank)")
    d.add_argument("--node-rank", type=int, default=None, metavar="K", help="this machine's index, 0..M-1")
    d.add_argument("--master-addr", default=None, metavar="HOST", help="address of machine 0 (several machines)")
    d.add_argument("--master-port", type=int, default=None, metavar="PORT",
                   help="rendezvous port on machine 0 (default: a free port when on one machine)")


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` say; a bad argument or config field raises a ``ValueError`` naming it
    (``engine_rl.cli.main`` prints it as one line, status 2)."""
    get_recipe(args.recipe)
    for name in ("threads", "checkpoint_every", "until_frames", "patience", "video"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for text in args.loggers:  # an unknown name or a missing package: one line, before anything runs
        TrackerSpec.parse(text)
    if args.video_best and args.video is None:
        raise ValueError("--video-best goes with --video N (N: the episodes of each new best to record)")
    overrides = list(args.overrides)
    if args.frames is not None:
        overrides.append(f"total_frames={args.frames}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    if args.ray_address is not None:
        overrides.append(f"ray_address={args.ray_address}")
    if args.resume:
        seed = args.seed if args.seed is not None else make_config(args.recipe).seed
        out = args.out if args.out is not None else f"runs/{args.recipe}-seed{seed}"
        # the runner refuses overrides that change the saved config; naming its make_env or
        # module-prefixed env_id again (or --trust-config) is what lets the stored config run that code
        config = load_run_config(out, args.recipe, overrides=overrides, trust_config=args.trust_config)
    elif args.trust_config:
        raise ValueError("--trust-config goes with --resume (it trusts the code a run folder's config.json names); "
                         "without --resume the config comes from this command line")
    else:
        config = make_config(args.recipe, overrides)
        out = args.out if args.out is not None else f"runs/{args.recipe}-seed{config.seed}"
    if hasattr(config, "check_env"):  # an env that cannot be made or does not suit the recipe (one from an
        config.check_env()  # extra that is not installed: naming it) is refused before --out is written to
    config_devices(config)  # a device this machine lacks is refused before anything is written to --out
    if args.video is not None:  # an env that cannot render, or no ffmpeg: refused before training
        check_recipe_renders(config, owner=f"--video {args.video}")
    parallel = _parallel_options(args)
    debug = getattr(args, "debug", False)
    job = {
        "recipe": args.recipe, "config": config, "out": out, "threads": args.threads, "debug": debug,
        "options": {
            "progress": not args.no_progress, "visdom": args.visdom, "resume": args.resume,
            "checkpoint_every": args.checkpoint_every, "until_frames": args.until_frames, "patience": args.patience,
            "loggers": tuple(args.loggers),
            "video": args.video, "video_best": args.video_best,
        },
    }
    with _local_dashboard(args.visdom, out):
        if parallel is None:
            return _train_and_report(job)
        return _train_parallel(job, parallel)


def _train_parallel(job: dict, parallel: dict) -> int:
    try:
        run_parallel(_worker, job, **parallel)
    except ProcessExitedException as err:  # the failing process printed its error
        return err.exit_code if err.exit_code in (1, 2) else 1
    except ProcessRaisedException as err:  # its message ends with the process's traceback
        if job["debug"]:
            raise
        last = [line for line in str(err).splitlines() if line.strip()][-1:]
        print(f"engine-rl: error: a training process failed: {last[0].strip() if last else err}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _local_dashboard(visdom: str | None, out: str) -> Iterator[None]:
    """With a bare ``--visdom`` and nothing listening on 127.0.0.1:8097, run a local visdom
    server (offline, loopback only) for the duration of the run, so one flag gives live plots."""
    if visdom != DEFAULT_VISDOM_URL or _listening("127.0.0.1", 8097):
        yield
        return
    from engine_rl.dashboard import VisdomServer

    try:
        server = VisdomServer(port=8097).start()
    except Exception as err:  # the dashboard must never stop training
        print(f"engine-rl: warning: could not start a visdom server ({err}); training without live plots",
              file=sys.stderr)
        yield
        return
    name = Path(out).resolve().name
    print(f"engine-rl: dashboard at {server.env_url(name)} (stops with this run; "
          f"`engine-rl dashboard` then `engine-rl dashboard --replay {out}` shows it again)", file=sys.stderr)
    try:
        yield
    finally:
        server.stop()


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _parallel_options(args: argparse.Namespace) -> dict | None:
    """``run_parallel`` options, or ``None`` to train in this process alone."""
    multi_node = {"nnodes": args.nnodes, "node_rank": args.node_rank, "master_addr": args.master_addr,
                  "master_port": args.master_port}
    if launched_externally():  # torchrun started this process: join its group
        if args.nproc != 1:
            raise ValueError(f"--nproc {args.nproc}: this process was started by torchrun, which spawns the "
                             "processes itself; drop --nproc")
        return {"backend": args.backend}
    if args.nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {args.nproc}")
    if args.nnodes is not None and args.nnodes < 1:
        raise ValueError(f"--nnodes must be >= 1, got {args.nnodes}")
    nnodes = args.nnodes or 1
    if args.node_rank is not None and not 0 <= args.node_rank < nnodes:
        raise ValueError(f"--node-rank must be in [0, {nnodes - 1}] (--nnodes {nnodes}), got {args.node_rank}")
    if nnodes > 1 and (args.node_rank is None or args.master_addr is None or args.master_port is None):
        raise ValueError(f"--nnodes {nnodes} needs --node-rank, --master-addr and --master-port")
    if args.master_port is not None and not 1 <= args.master_port <= 65535:
        raise ValueError(f"--master-port must be a port number in [1, 65535], got {args.master_port}")
    if args.backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("--backend nccl needs CUDA GPUs and none is available here; use --backend gloo")
    if args.nproc == 1 and nnodes == 1:
        return None
    return {"nproc_per_node": args.nproc, "backend": args.backend, **multi_node}


def _train_and_report(job: dict) -> int:
    """Train as ``job`` says in this process (one rank of a group, or alone); print the summary
    (rank 0) or a one-line error; return the exit status."""
    rank, world = idist.get_rank(), idist.get_world_size()
    who = f" (rank {rank} of {world})" if world > 1 else ""
    torch.set_num_threads(job["threads"])
    out = job["out"]
    try:
        summary = train(job["recipe"], job["config"], out, **job["options"])
    except RunError as err:  # the same on every rank: one process per machine says it
        if job["debug"]:
            raise
        if idist.get_local_rank() == 0:
            fail(err, 2, who=who if rank else "")
        return 2
    except NonFiniteElsewhere:  # another rank found the NaN and prints the run's one error line
        if job["debug"]:
            raise
        return 1
    except EnvError as err:
        if job["debug"]:
            raise
        latest = latest_checkpoint(f"{out}/checkpoints")
        hint = f"; the latest checkpoint, {latest}, is intact: continue with --resume" if latest else ""
        print(f"engine-rl: error{who}: {one_line(err)}{hint}", file=sys.stderr)
        return 1
    except Exception as err:  # CheckpointError, a config the recipe cannot build, ...: one line
        return fail(err, debug=job["debug"], who=who)
    if rank == 0:
        print(json.dumps(summary), flush=True)
    return 0


def _worker(local_rank: int, job: dict) -> None:
    """One process of ``--nproc``/``torchrun`` training; a failure exits with its status, which
    stops the other processes."""
    with one_line_output(debug=job["debug"]):  # as in engine-rl's own process
        status = _train_and_report(job)
    if status:
        # Leave the process group first: a process that exits holding it can abort in torch's C++
        # teardown ('terminate called without an active exception', SIGABRT; rank 0, which hosts
        # the rendezvous store, in 2 of 15 tries here), and the launcher then reports whichever
        # process it sees exit first: status 1 for the abort, or this one.
        with contextlib.suppress(Exception):
            idist.finalize()
        raise SystemExit(status)
