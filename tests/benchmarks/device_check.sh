#!/usr/bin/env bash
# The GPU check (issue #28), for a machine with CUDA; about 7 minutes on one H100. Run from the repository root:
#   bash tests/benchmarks/device_check.sh [OUT]        (OUT: where logs and run folders go; default $OUT or /tmp/device_check)
# 1. the tests marked `gpu` (each recipe trains on cuda, resumes and evaluates on the CPU; CPU replay sampled onto
#    the GPU; PPO on torch CartPole on the GPU);
# 2. PPO on 4,096 torch CartPoles on the GPU, 2M frames: frames/s and the time (and frames) to an evaluation of 475;
# 3. two minutes each of ppo-atari and of DQN on Breakout (dqn-cartpole with the Atari preprocessing and its Nature
#    CNN) on the GPU: training frames/s.
# Prints one JSON line per part (the last lines); exits non-zero if the tests fail or a run cannot start.
# DEVICE=cpu runs parts 2 and 3 on the CPU instead (a smoke run of the script, or the CPU's figures).
set -uo pipefail
out="${1:-${OUT:-/tmp/device_check}}"
device="${DEVICE:-cuda}"
mkdir -p "$out"
status=0
if [ "$device" = cuda ]; then
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'device_check: torch.cuda.is_available() is False')" || exit 2
  python -m pytest -q -m gpu tests/e2e/test_device.py > "$out/gpu_tests.log" 2>&1 || status=1
  tail -1 "$out/gpu_tests.log" | python -c "import json, sys; print(json.dumps({'part': 'gpu_tests', 'result': sys.stdin.read().strip()}))"
fi

report() {  # report PART RUN_FOLDER [THRESHOLD]: frames/s of the train lines, the first eval at THRESHOLD
  python - "$@" <<'PY'
import json, sys
part, run = sys.argv[1], sys.argv[2]
threshold = float(sys.argv[3]) if len(sys.argv) > 3 else None
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip()]
train = [l for l in lines if l["kind"] == "train"]
evals = [l for l in lines if l["kind"] == "eval"]
first = train[min(2, len(train) - 1)]  # after warm-up (CUDA init, first allocations)
last = train[-1]
fps = (last["frames"] - first["frames"]) / max(last["time"] - first["time"], 1e-9)
row = {"part": part, "frames": last["frames"], "seconds": round(last["time"], 1), "fps_after_warmup": round(fps, 1)}
if threshold is not None:
    hit = next((e for e in evals if e["eval_return_mean"] >= threshold), None)
    row.update({"threshold": threshold, "frames_to_threshold": hit and hit["frames"],
                "seconds_to_threshold": hit and round(hit["time"], 1),
                "final_eval_return": evals[-1]["eval_return_mean"] if evals else None})
print(json.dumps(row))
PY
}

rm -rf "$out/ppo_torch_cartpole"
python -m engine_rl train ppo-cartpole --device "$device" --out "$out/ppo_torch_cartpole" --no-progress --frames 2097152 \
  --set env_backend=torch --set num_envs=4096 --set steps_per_env=8 --set batch_size=4096 --set num_epochs=10 \
  --set lr_end=0.001 --set clip_epsilon_end=0.2 --set eval_every=2 --set eval_episodes=16 \
  > "$out/ppo_torch_cartpole.log" 2>&1 || status=1
report ppo_torch_cartpole_4096 "$out/ppo_torch_cartpole" 475 || status=1

for arm in ppo-atari dqn-atari; do
  rm -rf "$out/$arm"
  if [ "$arm" = ppo-atari ]; then
    cmd=(python -m engine_rl train ppo-atari)
  else
    cmd=(python -m engine_rl train dqn-cartpole --set env_id=BreakoutNoFrameskip-v4
         --set "wrappers=$(python -c 'from engine_rl.collectors.atari import ATARI_WRAPPERS as w; print(repr(w))')"
         --set num_envs=8 --set hidden=\(\) --set buffer_size=100000 --set learning_starts=2048 --set batch_size=32
         --set optim_steps_per_batch=64)
  fi
  # killed at two minutes on purpose; the "; true" keeps bash's "Killed" report inside the silenced subshell
  ( timeout -s KILL 120 "${cmd[@]}" --device "$device" --out "$out/$arm" --no-progress --set eval_every=100000 \
    > "$out/$arm.log" 2>&1; true ) 2>/dev/null
  report "${arm}_2min" "$out/$arm" || status=1
done
exit $status
