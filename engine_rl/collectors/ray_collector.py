"""Collection by Ray actors: :class:`RayCollector`, the learner's end of N :class:`~engine_rl.collectors.ray_worker.RayWorker`.

Each actor is a :class:`~engine_rl.collectors.GymCollector` with ``num_envs / N`` env copies and
its own CPU copy of the policy; the trainer iterates the :class:`RayCollector` as any collector.
Ray runs on this machine (started by the collector, and stopped by :meth:`RayCollector.shutdown`)
or on a cluster the collector joins (``address``, e.g. ``127.0.0.1:6379`` of a ``ray start
--head``; the actors spread over its nodes, each asking for one CPU).

Modes.

- Synchronous (``sync=True``, PPO): each batch asks every actor for ``frames_per_batch / N``
  frames with the current weights and joins the answers along the env dimension, in actor order:
  a ``[num_envs, T]`` batch as a :class:`~engine_rl.collectors.GymCollector` with ``num_envs``
  copies makes. Collection and optimization take turns; ``policy_lag`` is 0.
- Asynchronous (``sync=False``, DQN, SAC, TD3): every actor always has a request in flight; the
  batches are taken round-robin (actor 0, 1, ..., N-1, 0, ...), each ``frames_per_batch``
  frames of one actor (``[num_envs / N, N * T]``), and an actor is sent its next request, with
  the newest weights, as soon as its batch is taken. The learner optimizes while the actors
  collect; ``policy_lag`` says how many optim steps old the weights of each batch were.

Weights. :meth:`RayCollector.update_policy_weights_` (what :class:`~handlers.WeightSync` calls)
puts the weights (on the CPU) into Ray's object store once; each request carries the reference,
and an actor fetches it only when it is newer than its weights.

Failures. Actors are created with ``max_restarts=-1``: Ray restarts an actor whose process died.
Its in-flight batch is dropped (its frames were never handed to the trainer, so nothing is
counted twice), a warning names the actor, and its next request carries the newest weights and a
new seed for its env copies (drawn from ``seed``, the actor and its restarts, so restarted
episodes do not repeat old ones). An exception raised inside an actor (an env error), an actor
that cannot be made, or one that does not deliver a batch within ``restart_timeout`` seconds of
its death raises :class:`RayCollectorError`.

Checkpoints. :meth:`RayCollector.state_dict` holds the counters and each actor's collector and
policy state (asked from the actors, so after any batch in flight); a collector loaded from it
makes its actors start from those states (the policy's saved weights, its env copies where they
were). Synchronous collection resumes exactly (no request is in flight between batches);
asynchronous collection loses the batch each actor had in flight (its actors' states are asked
after it), so a resumed run continues after those frames, without them
(:attr:`RayCollector.not_checkpointed` says so).
"""

from __future__ import annotations

import copy
import logging
import socket
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import torch
from gymnasium.vector import VectorEnv
from ignite.engine import Engine, Events
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.checks import fail, is_int, positive_int, positive_number
from engine_rl.collectors.info import check_info_keys
from engine_rl.collectors.ray_worker import RayWorker, derived_seed
from engine_rl.events import RLEvents

__all__ = ["RayCollector", "RayCollectorError", "check_ray_address", "ray_missing"]

_CONNECT_S = 3.0  # how long an --ray-address may take to answer


class RayCollectorError(RuntimeError):
    """An actor of a :class:`RayCollector` failed in a way a restart does not mend."""


def ray_missing() -> str | None:
    """Why Ray cannot be used here (not installed: the ``[ray]`` extra), or ``None``."""
    try:
        import ray  # noqa: F401
    except ImportError as err:
        return f"Ray is not installed ({err}); install the [ray] extra: pip install 'engine_rl[ray]'"
    return None


def check_ray_address(address: str, *, owner: str, timeout: float = _CONNECT_S) -> None:
    """A ``ValueError`` naming ``owner`` unless something listens at ``address`` (``HOST:PORT`` of a
    Ray head's GCS, e.g. ``127.0.0.1:6379``) within ``timeout`` seconds.

    Examples:
        >>> check_ray_address("127.0.0.1:1", owner="demo", timeout=0.5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: demo: ray_address '127.0.0.1:1': no Ray head answers there (...); ...
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{owner}: ray_address must be HOST:PORT of a running Ray head (e.g. 127.0.0.1:6379), "
                         f"got {address!r}")
    hint = "start one with `ray start --head --port=PORT`, or leave ray_address out for a Ray on this machine"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ValueError(f"{owner}: ray_address {address!r}: no Ray head answers there ({err.strerror or err}); "
                         f"{hint}") from None
    # something listens: ask it as Ray's own GCS client would (an authentication refusal is a Ray head too)
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError, RpcError
    except ImportError:  # another Ray than the [ray] extra's: ray.init will tell
        return
    try:
        GcsClient(address=address).internal_kv_get(b"session_name", b"session", timeout=timeout)
    except AuthenticationError:
        return
    except RpcError as err:
        raise ValueError(f"{owner}: ray_address {address!r}: no Ray head answers there (what listens answered: "
                         f"{str(err).splitlines()[0]}); {hint}") from None


class RayCollector:
    """Collect with ``num_workers`` Ray actors, each a :class:`~engine_rl.collectors.GymCollector`.

    See the module docstring for the modes, weights, failures and checkpoints.

    Args:
        env_fn: picklable callable ``env_fn(n)`` making a gymnasium vector env of ``n`` copies
            (e.g. ``functools.partial(make_vec_env, "CartPole-v1")``); it runs in the actors.
        policy: the acting policy (an ``nn.Module``); each actor acts with its own CPU copy,
            which :meth:`update_policy_weights_` refreshes.
        num_envs: env copies of all actors together, a multiple of ``num_workers``.
        frames_per_batch: frames of each batch the trainer gets, a multiple of ``num_envs``.
        num_workers: actors.
        sync: synchronous (every batch from the current weights, gathered from all actors) or
            asynchronous collection.
        seed: actor ``i``'s env copies get ``seed + i * num_envs / num_workers + j`` (the seeds
            of one :class:`~engine_rl.collectors.GymCollector` with ``num_envs`` copies), its
            policy's generators seeds drawn from ``(seed, i)``.
        address: ``HOST:PORT`` of a running Ray cluster to join; ``None``: start Ray on this
            machine (``num_workers`` CPUs, no dashboard) and stop it at :meth:`shutdown`. If
            Ray is already initialized in this process, it is used as it is.
        storing_device: where batches are returned.
        info_keys: as :class:`~engine_rl.collectors.GymCollector`'s.
        restart_timeout: seconds a dead actor has to deliver a batch again (while Ray restarts it,
            requests are retried without a new warning) before :class:`RayCollectorError` is raised.

    Examples:
        >>> from functools import partial
        >>> from engine_rl.collectors import make_vec_env
        >>> class Left(nn.Module):
        ...     def forward(self, td):
        ...         return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> collector = RayCollector(partial(make_vec_env, "CartPole-v1"), Left(), num_envs=4,  # doctest: +SKIP
        ...                          frames_per_batch=40, num_workers=2, sync=True, seed=0)
        >>> with collector:  # doctest: +SKIP
        ...     batch = next(iter(collector))
        >>> batch.batch_size, collector.frames  # doctest: +SKIP
        (torch.Size([4, 10]), 40)
    """

    def __init__(
        self,
        env_fn: Callable[[int], VectorEnv],
        policy: nn.Module,
        *,
        num_envs: int,
        frames_per_batch: int,
        num_workers: int = 2,
        sync: bool = True,
        seed: int | None = None,
        address: str | None = None,
        storing_device: torch.device | str = "cpu",
        info_keys: tuple[str, ...] = (),
        restart_timeout: float = 300.0,
    ) -> None:
        owner = "RayCollector"
        if not callable(env_fn):
            raise TypeError(f"{owner}: argument env_fn must be callable, got {type(env_fn).__name__}")
        if not isinstance(policy, nn.Module):
            raise TypeError(f"{owner}: argument policy must be an nn.Module, got {type(policy).__name__}")
        for name, value in (("num_envs", num_envs), ("frames_per_batch", frames_per_batch),
                            ("num_workers", num_workers)):
            positive_int(value, name=f"argument {name}", owner=owner)
        if num_envs % num_workers:
            fail(num_envs, f"a multiple of num_workers={num_workers}", name="num_envs", owner=owner)
        if frames_per_batch % num_envs:
            fail(frames_per_batch, f"a multiple of num_envs={num_envs}", name="frames_per_batch", owner=owner)
        if seed is not None and not is_int(seed):
            raise TypeError(f"{owner}: argument seed must be an int or None, got {type(seed).__name__}")
        self.env_fn = env_fn
        self.num_envs = num_envs
        self.frames_per_batch = frames_per_batch
        self.num_workers = num_workers
        self.sync = bool(sync)
        self.seed = seed
        self.address = address
        self.storing_device = torch.device(storing_device)
        self.info_keys = check_info_keys(info_keys, owner=owner)
        self.restart_timeout = positive_number(restart_timeout, name="argument restart_timeout", owner=owner)
        #: The actors' policy copy (what :class:`~handlers.WeightSync` sees: not the learner's module).
        self.policy = copy.deepcopy(policy).cpu()
        #: Frames handed to the trainer.
        self.frames = 0
        #: Batches handed to the trainer.
        self.batches = 0
        #: Restarts of each actor seen so far.
        self.restarts = [0] * num_workers
        #: Optim steps (weight updates without :meth:`attach`) between the weights the last batch
        #: was collected with and the moment it was handed over.
        self.policy_lag = 0
        self._requested = 0  # frames all actors were asked for (the exploration schedules' count)
        self._version = 0
        self._weights: Any = None  # object-store reference of the newest weights
        self._stamp = 0  # the clock when they were published
        self._clock: Callable[[], int] = lambda: self._version
        self._reseed: list[int | None] = [None] * num_workers
        self._died_at: list[float | None] = [None] * num_workers  # when each actor died, until it delivers again
        self._turn = 0  # async: the actor whose batch comes next
        self._resume: list[Mapping[str, Any]] | None = None
        self._actors: list[Any] = []
        self._pending: list[Any] = [None] * num_workers  # async: (ref, stamp) in flight per actor
        self._owns_ray = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def per_worker_frames(self) -> int:
        """Frames of one actor's batch: ``frames_per_batch / num_workers`` (sync) or ``frames_per_batch``."""
        return self.frames_per_batch // self.num_workers if self.sync else self.frames_per_batch

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("RayCollector: shut down; build a new collector to collect again")
        if self._actors:
            return
        import ray

        if not ray.is_initialized():
            if self.address is not None:
                check_ray_address(self.address, owner="RayCollector")
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(num_cpus=self.num_workers, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING)
            self._owns_ray = True
        actor_cls = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=1)(RayWorker)
        per = self.num_envs // self.num_workers
        for i in range(self.num_workers):
            seed = None if self.seed is None else self.seed + i * per
            # Ray cloudpickles the arguments: a policy class of __main__ or a notebook travels too
            self._actors.append(actor_cls.remote(
                partial(self.env_fn, per), self.policy, frames_per_batch=self.per_worker_frames, seed=seed,
                info_keys=self.info_keys,
            ))
        if self._resume is not None:
            ray.get([a.load_state_dict.remote(s) for a, s in zip(self._actors, self._resume) if s is not None])
            self._resume = None

    def pids(self) -> list[int]:
        """The actors' process ids (they change when Ray restarts an actor)."""
        import ray

        self._start()
        return ray.get([a.pid.remote() for a in self._actors])

    def shutdown(self) -> None:
        """Stop the actors, and Ray if this collector started it; idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._actors:
            return
        import ray

        states = self._actor_states()  # for a checkpoint written after the shutdown (the final one)
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- already gone (its node left, Ray stopped)
                pass
        self._actors, self._pending = [], [None] * self.num_workers
        self._resume = states  # what state_dict() reports from now on
        if self._owns_ray:
            ray.shutdown()

    def attach(self, engine: Engine) -> None:
        """Measure ``policy_lag`` in the trainer's optim steps and publish it as
        ``state.metrics["policy_lag"]`` at each ``BATCH_COLLECTED``; stop the actors when the
        trainer completes (``Events.COMPLETED``)."""
        self._clock = lambda: int(engine.state.optim_steps)

        def publish(engine: Engine) -> None:
            engine.state.metrics["policy_lag"] = self.policy_lag

        engine.add_event_handler(RLEvents.BATCH_COLLECTED, publish)
        engine.add_event_handler(Events.COMPLETED, lambda _: self.shutdown())

    def __enter__(self) -> RayCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- weights --------------------------------------------------------------------------
    def update_policy_weights_(self, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module | None = None
                               ) -> None:
        """Put new policy weights in Ray's object store; each actor's next request carries them.

        Args:
            weights: ``TensorDict.from_module(learner_policy)``, its ``state_dict()`` or the
                ``nn.Module`` itself, with the structure of the ``policy`` given at construction.
                ``None`` does nothing.
        """
        if weights is None:
            return
        import ray

        if isinstance(weights, nn.Module):
            weights = TensorDict.from_module(weights)
        weights = weights.detach().cpu() if isinstance(weights, TensorDictBase) else {
            k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in weights.items()}
        if not ray.is_initialized():
            self._start()
        self._weights = ray.put(weights)
        self._version += 1
        self._stamp = self._clock()

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase]:
        self._start()
        while True:
            batch = self._gather() if self.sync else self._next_async()
            self.frames += batch.numel()
            self.batches += 1
            if self.storing_device.type != "cpu":
                batch = batch.to(self.storing_device)
            yield batch

    def _request(self, i: int) -> tuple[Any, int]:
        """Send actor ``i`` its next request; ``(ref, stamp)`` of the weights it carries."""
        weights = [] if self._weights is None else [self._weights]
        # a reseed is sent until a batch comes back (a request may reach a restarting actor and fail)
        ref = self._actors[i].collect.remote(weights, self._version, self._requested, self._reseed[i])
        self._requested += self.per_worker_frames
        return ref, self._stamp

    def _result(self, i: int, ref: Any) -> TensorDictBase | None:
        """Actor ``i``'s batch, or ``None`` if the actor died (dropped, warned, reseeded)."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            batch = ray.get(ref)
        except RayTaskError as err:  # raised by the actor's own code: an env or policy error
            raise RayCollectorError(f"RayCollector: actor {i} raised {err.cause!r}") from err
        except RayActorError as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            if getattr(err, "actor_init_failed", False):
                raise RayCollectorError(f"RayCollector: actor {i} could not be made: {lines[-1] if lines else err}") from err
            died_at = self._died_at[i]
            if died_at is not None:  # still restarting: retry quietly, for a while
                if time.monotonic() - died_at > self.restart_timeout:
                    raise RayCollectorError(
                        f"RayCollector: actor {i} did not come back within restart_timeout={self.restart_timeout} s "
                        f"of its death; last: {lines[0] if lines else type(err).__name__}") from err
                time.sleep(0.1)
                return None
            self._died_at[i] = time.monotonic()
            self.restarts[i] += 1
            warnings.warn(
                f"RayCollector: actor {i} died ({type(err).__name__}); Ray restarts it (restart {self.restarts[i]}), "
                f"its batch in flight ({self.per_worker_frames} frames) is dropped and training continues",
                RuntimeWarning, stacklevel=3,
            )
            if self.seed is not None:
                self._reseed[i] = derived_seed(self.seed, i, self.restarts[i])
            return None
        self._died_at[i] = self._reseed[i] = None
        return batch

    def _gather(self) -> TensorDictBase:
        """Synchronous: a share from every actor with the current weights, joined in actor order."""
        shares: list[TensorDictBase | None] = [None] * self.num_workers
        while True:
            missing = [i for i, share in enumerate(shares) if share is None]
            if not missing:
                break
            refs = {i: self._request(i)[0] for i in missing}
            for i, ref in refs.items():
                shares[i] = self._result(i, ref)
        self.policy_lag = self._clock() - self._stamp
        return torch.cat(shares, dim=0)

    def _next_async(self) -> TensorDictBase:
        """Asynchronous: the next actor's batch, round-robin; the actor is sent its next request."""
        for i in range(self.num_workers):
            if self._pending[i] is None:
                self._pending[i] = self._request(i)
        while True:
            i, self._turn = self._turn, (self._turn + 1) % self.num_workers
            (ref, stamp), self._pending[i] = self._pending[i], None
            batch = self._result(i, ref)
            self._pending[i] = self._request(i)
            if batch is not None:
                self.policy_lag = self._clock() - stamp
                return batch

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters and each actor's collector and policy ``state_dict`` (asked from the running
        actors, after their batches in flight; ``None`` for an actor that is restarting; before
        the first batch, the states loaded if any). Tensors, numbers, strings and plain containers."""
        if self._actors:
            workers = self._actor_states()
        else:
            workers = list(self._resume) if self._resume is not None else [None] * self.num_workers
        return {
            "frames": self.frames, "batches": self.batches, "seed": self.seed, "num_workers": self.num_workers,
            "sync": self.sync, "weights_version": self._version, "requested": self._requested,
            "restarts": list(self.restarts), "workers": workers,
        }

    def _actor_states(self) -> list[dict[str, Any] | None]:
        """Each running actor's ``state_dict`` (``None`` for one that is restarting or gone)."""
        import ray
        from ray.exceptions import RayError

        states: list[dict[str, Any] | None] = []
        for actor in self._actors:
            try:
                states.append(ray.get(actor.state_dict.remote(), timeout=60))
            except (RayError, TimeoutError):
                states.append(None)
        return states

    @property
    def not_checkpointed(self) -> str | None:
        """What :meth:`state_dict` cannot hold, in one line (``None``: synchronous collection
        resumes exactly)."""
        if self.sync:
            return None
        return (f"RayCollector: the batch each actor had in flight when the checkpoint was written (up to "
                f"{self.num_workers} x {self.frames_per_batch} frames) is not in it: a resumed run continues "
                "after those frames, without them")

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` before the first batch: the actors start from the saved
        collector and policy states (an actor saved as ``None`` starts new episodes)."""
        if self._actors:
            raise RuntimeError("RayCollector.load_state_dict: the actors already started; load before iterating")
        missing = {"frames", "batches", "workers"} - set(state_dict)
        if missing:
            raise KeyError(f"RayCollector.load_state_dict: missing key(s) {sorted(missing)}")
        workers = list(state_dict["workers"])
        if len(workers) != self.num_workers:
            raise ValueError(f"RayCollector.load_state_dict: the state holds {len(workers)} actors, this collector "
                             f"has num_workers={self.num_workers}; resume with the same number of actors")
        self.frames = int(state_dict["frames"])
        self.batches = int(state_dict["batches"])
        self._version = int(state_dict.get("weights_version", 0))
        self._requested = int(state_dict.get("requested", self.frames))
        self.restarts = [int(r) for r in state_dict.get("restarts", self.restarts)]
        for i, worker in enumerate(workers):
            if worker is None and self.seed is not None:  # restarting when saved: new episodes
                self._reseed[i] = derived_seed(self.seed, i, self.restarts[i], self.batches)
        self._turn = self.batches % self.num_workers
        self._resume = workers

    def __repr__(self) -> str:
        state = "not started" if not self._actors else ("stopped" if self._closed else "running")
        return (f"RayCollector(num_workers={self.num_workers}, sync={self.sync}, frames_per_batch="
                f"{self.frames_per_batch}, frames={self.frames}, actors={state})")

