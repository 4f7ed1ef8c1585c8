"""The config base of every recipe: the fields all recipes share, each declared and checked once here.

:class:`RecipeConfig` holds the fields every recipe has (where its envs come from, how many
frames, the update's common numbers, evaluation, device, seed); :class:`ReplayConfig` adds those
of the recipes that learn from a replay buffer (DQN, SAC, TD3). A recipe config subclasses one of
them and declares only what differs: its own fields, each with a docstring, and its values of the
shared fields whose default differs, as a bare ``name: type = value`` that keeps the docstring
written here (:func:`~engine_rl.recipes.config.field_docs`). A shared field has a default here
only where every recipe family uses the same one; the recipe module's docstring says where its
values come from (rl-baselines3-zoo, CleanRL).

``__post_init__`` checks each field alone (:class:`~engine_rl.recipes.checks.FieldChecks`); a
subclass calls ``super().__post_init__()`` and then checks its own. Making a config makes no env,
so every config is made and listed without the extras its env needs; :meth:`RecipeConfig.check_env`
checks the env when the recipe is built (and when ``engine-rl train`` starts, before its ``--out``
is written to).

Examples:
    >>> from engine_rl.recipes.dqn_cartpole import DQNConfig
    >>> cfg = DQNConfig(env_id="Pendulum-v1")  # fields only: no env made
    >>> cfg.check_env()
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions (set env_id to an env with Discrete actions)
    >>> DQNConfig(num_envs=0)
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: num_envs must be a positive int, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine_rl.collectors.env_factory import EnvFactory
from engine_rl.recipes.checks import VECTORIZATIONS, EnvNeeds, FieldChecks
from engine_rl.recipes.collection import check_collector_fields, check_ray_reachable
from engine_rl.recipes.env_source import recipe_spaces

__all__ = ["RecipeConfig", "ReplayConfig"]


@dataclass(kw_only=True)
class RecipeConfig:
    """The fields every recipe has, and their checks; a recipe family sets those without a default."""

    env_id: str
    """Gymnasium id of the env. Its spaces must suit the recipe's algorithm (``env_needs``, checked by
    :meth:`check_env`): DQN takes Discrete actions; PPO Discrete or MultiDiscrete actions (a categorical
    policy) or 1-D Box actions (a Gaussian one); SAC and TD3 1-D Box actions. The Atari recipes take a
    ``NoFrameskip-v4`` id, or an ``ALE/*-v5`` id (made with frameskip=1, keeping v5's sticky actions),
    since their wrappers skip frames."""
    make_env: EnvFactory | str | None = None
    """For Python users: a callable that makes one env copy (a function, a class, ``functools.partial(MyEnv,
    size=5)``) or ``'module:function'`` naming one, used instead of env_id (then unused) for training and
    evaluation; vectorized 'sync' or 'async', wrapped by ``wrappers``. config.json records it by name, which
    ``--resume`` and ``engine-rl eval`` import back only when named again or trusted (``--set make_env=...``,
    ``--trust-config``: ``engine_rl.run.stored_config``). None by default."""
    env_kwargs: dict[str, Any] | None = None
    """Keyword arguments of ``gymnasium.make`` (or of ``make_env``), as Python literals, e.g. ``--set
    "env_kwargs={'map_name': '8x8', 'is_slippery': False}"`` or ``{'obs_type': 'ram'}``; None by default."""
    env_backend: str = "gymnasium"
    """'gymnasium' (``gymnasium.make_vec``), 'torch': the batched torch version of the env
    (``engine_rl.envs``: CartPole-v1, Pendulum-v1), stepped as tensors on the training device with no
    numpy round trip, for thousands of copies (``--set num_envs=4096``); no wrappers, info_keys,
    env_kwargs or make_env there; or 'envpool' (the ``envpool`` extra): the env_id in EnvPool, stepped
    in C++ threads (``engine_rl.collectors.envpool_env``): an Atari game as ``BreakoutNoFrameskip-v4``,
    ``ALE/Breakout-v5`` or ``Breakout-v5`` with the Atari recipes' wrappers, which EnvPool's own options
    do; any other id EnvPool has (``Hopper-v5``, ``Hopper-v4``) with no wrappers; env_kwargs are EnvPool
    options; no make_env. Training and evaluation both; its env state is not saved, so ``--resume``
    continues with fresh episodes (said on stderr and in summary.json's ``fresh_env_episodes``)."""
    wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers applied to each env copy (training and evaluation), in order: class names
    in ``gymnasium.wrappers``, keyword arguments as literals, e.g. ``--set wrappers=FlattenObservation``
    (Discrete, Tuple or Dict observations to a 1-D Box) or ``--set 'wrappers=TimeLimit(max_episode_steps=200)'``.
    None by default; the Atari recipes' default is their preprocessing (``engine_rl.collectors.atari.ATARI_WRAPPERS``:
    no-op starts, frame skip 4, 84x84 grayscale, FIRE at each life's start, 4 stacked frames)."""
    info_keys: tuple[str, ...] = ()
    """Scalar entries of the env's ``info`` to record per frame and average over the episodes that
    finish in each batch (``train_info_<key>`` in metrics.jsonl) and over the evaluation episodes
    (``eval_info_<key>``), e.g. ``--set info_keys=is_success``."""
    num_envs: int
    """Environment copies stepped together by the collector."""
    vectorization: str = "auto"
    """Gymnasium vectorization: 'auto' (the env's numpy-batched vector entry point if it registers
    one, as CartPole does, else 'sync'), 'vector_entry_point', 'sync' or 'async'."""
    total_frames: int
    """Frames (agent steps) to collect in the whole run."""
    batch_size: int
    """Transitions per gradient step: sampled from the replay (DQN, SAC, TD3), or a minibatch of PPO's
    batch (a divisor of the batch is best: the remainder waits for the next epoch)."""
    lr: float
    """Adam learning rate at the start of the run (where the recipe has an ``lr_end``, it decays linearly
    to it); SAC and TD3 use it for every network, and SAC for its temperature."""
    gamma: float
    """Discount factor."""
    hidden: tuple[int, ...]
    """Hidden layer widths of each MLP: DQN's Q network, PPO's actor and critic (separate networks), the
    actor and each critic of SAC and TD3; ``()``: a linear head. For image and Dict observations the MLPs
    sit on an encoder's features (``engine_rl.algos.encoders``; for images the Nature CNN's 512, the
    pixels kept uint8 until the network; PPO's actor and critic share one)."""
    nonfinite: str = "stop"
    """What a NaN or Inf in a loss or a gradient does: 'stop' (the reference: raise NonFiniteError
    naming the loss entry or parameter, the optim step and the frames, before the optimizer step,
    so the weights and checkpoints stay finite) or 'skip' (drop that step's gradients, so no weight,
    optimizer state or priority changes, and count it: ``nonfinite_skipped`` in metrics.jsonl). A NaN
    or Inf in observations or rewards always stops (handlers.NaNGuard)."""
    eval_episodes: int = 10
    """Evaluation episodes per evaluation, acting deterministically (DQN's greedy action, PPO's most
    likely action, SAC's mean action, TD3's action without noise)."""
    eval_seed: int = 10_000
    """Seed of the evaluation env (the same at every evaluation, so scores compare)."""
    compile: bool = False
    """Run the loss (forward and backward) under ``torch.compile`` (``engine_rl.algos.compile``; CUDA
    graphs on a GPU); falls back to eager with one warning if compiling fails. Off by default:
    on CPU it has not been faster than eager (``docs/benchmarks.md``)."""
    device: str = "auto"
    """Where the networks, the loss, the collected batches and the updates live: 'auto' (CUDA when
    available, else the CPU), 'cpu', 'cuda' or 'cuda:N' (``--device``). A run may resume on another
    device (``--resume --device cpu``), continuing from its checkpoint (not bitwise like a same-device resume)."""
    seed: int = 0
    """Seed of torch, the envs, the exploration (DQN's epsilon, the warm-up actions and TD3's noise) or
    PPO's action sampling, and the replay sampler or PPO's minibatch shuffling."""
    collector: str = "local"
    """Where the envs are stepped: 'local' (the reference: in the trainer's process) or 'ray': in
    ``ray_workers`` Ray actors, each with ``num_envs / ray_workers`` env copies and a CPU copy of the
    policy (``engine_rl.collectors.ray_collector``, the [ray] extra); PPO gathers every batch from all
    actors with the current weights, DQN, SAC and TD3 collect asynchronously (``policy_lag`` in
    metrics.jsonl). Gymnasium envs and feed-forward policies only."""
    ray_workers: int = 2
    """Ray actors with ``collector='ray'``; num_envs must be a multiple of it."""
    ray_address: str | None = None
    """``HOST:PORT`` of a running Ray cluster's head for ``collector='ray'`` to join (``--ray-address``);
    None: a Ray on this machine, started and stopped by the run. A resumed run may name another one."""

    #: What the recipe's algorithm takes of the env (None: any env that can be made); a class
    #: constant, not a field.
    env_needs: ClassVar[EnvNeeds | None] = None
    #: What ``--set KEY=...`` of a field this recipe lacks but others have says (instead of listing the valid keys).
    absent_field_hints: ClassVar[dict[str, str]] = {
        key: "recurrent policies (core=lstm or gru) are PPO's: the ppo-lstm recipe, or --set core=lstm on "
             "ppo-cartpole, ppo-atari or ppo-mujoco"
        for key in ("core", "core_size", "critic_core")
    }

    def __post_init__(self) -> None:
        """Checks the shared fields; the env itself is checked when the recipe is built (:meth:`check_env`)."""
        check = FieldChecks(self)
        check.positive_ints("num_envs", "total_frames", "batch_size", "eval_episodes")
        check.nonnegative_ints("eval_seed", "seed")
        check.seeds("eval_seed", "seed")
        check.choice("vectorization", VECTORIZATIONS)
        check.choice("env_backend", ("gymnasium", "torch", "envpool"))
        if self.env_backend == "torch":
            check.torch_env()
        check.choice("nonfinite", ("stop", "skip"))
        check.devices("device")
        check.positive("lr")
        check.fractions("gamma")
        check.widths("hidden")
        check.names("info_keys", "wrappers")
        check.kwargs("env_kwargs")
        if self.env_backend == "envpool":
            check.envpool_env()
        check.bools("compile")
        check_collector_fields(self)
        check.env_fields()  # the env itself: check_env(), when the recipe is built

    def check_env(self) -> None:
        """Check the env this config names, making one copy of it (once per id or callable, wrappers
        and env_kwargs: :func:`~engine_rl.collectors.gym_envs.env_spaces`): ``make_env`` makes an env, or
        ``env_id`` is registered (an id from an extra that is not installed names the extra), and its
        spaces suit ``env_needs`` (:meth:`~engine_rl.recipes.checks.FieldChecks.env`); a ``ValueError``
        naming the config otherwise. Each recipe's build function calls it first. With ``collector='ray'``,
        also that Ray is installed and ``ray_address`` answers."""
        check_ray_reachable(self)
        if self.env_needs is None:
            recipe_spaces(self)
            return
        FieldChecks(self).env(
            algo=self.env_needs.algo, actions=self.env_needs.actions, vectorization=self.vectorization,
            encoders=True, normalized=getattr(self, "normalize_observations", False),
        )


@dataclass(kw_only=True)
class ReplayConfig(RecipeConfig):
    """The fields of the recipes that learn from a replay buffer (DQN, SAC, TD3), and their checks."""

    frames_per_batch: int
    """Frames per collected batch, a multiple of num_envs (Stable-Baselines3: train_freq * num_envs)."""
    learning_starts: int
    """Frames collected before the first gradient step (SAC and TD3 take uniform random actions until then)."""
    buffer_size: int
    """Replay capacity in transitions (SAC and TD3 cap it at total_frames, which never fill more)."""
    replay_device: str = "auto"
    """Where the replay rows live: 'auto' (the training device), 'cpu', 'cuda' or 'cuda:N'; samples
    move to the training device."""
    n_step: int = 1
    """Frames per replay transition (n-step returns, ``handlers.NStepTransitions``): each row holds
    the discounted reward of n frames of one env copy, the observation to bootstrap from n frames on
    and the discount to apply (gamma^n). A terminal inside the window ends the sum and the bootstrap; a
    truncation ends the sum and bootstraps from the true final observation. 1 (rl-zoo's and
    Stable-Baselines3's default): one-step transitions; Rainbow (Hessel et al., 2018) uses 3."""

    def __post_init__(self) -> None:
        """Checks the shared fields and these; the subclass checks its own after."""
        super().__post_init__()
        check = FieldChecks(self)
        check.positive_ints("frames_per_batch", "buffer_size", "n_step")
        check.nonnegative_ints("learning_starts")
        check.devices("replay_device")
        if self.frames_per_batch % self.num_envs:
            raise ValueError(f"{check.owner}: frames_per_batch ({self.frames_per_batch}) must be a multiple of "
                             f"num_envs ({self.num_envs})")
        if self.learning_starts > self.total_frames:
            raise ValueError(f"{check.owner}: learning_starts ({self.learning_starts}) exceeds total_frames "
                             f"({self.total_frames})")
        check.at_least("buffer_size", "batch_size")
