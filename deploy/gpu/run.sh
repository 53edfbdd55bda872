#!/usr/bin/env bash
# The GPU hero check (docs/TRAINING.md "GPU"): the ~1.3B-total MoE of deploy/gpu/hero_1b.toml and its dense twin
# (same attention and width, a dense MLP: ~0.18B), STEPS steps each on one GPU, then one JSON summary with MFU,
# the MoE/dense step-time ratio and the drop fraction. About 6-8 minutes on one H200 at the default 300 steps.
#   bash deploy/gpu/run.sh [STEPS] [--set K=V ...]   # writes $OUT (or var/gpu)/{moe,dense}.{jsonl,log}, gpu_hero.json
# Needs only what the device image has (jax with CUDA, optax, orbax, tokenizers, psutil); no Redis, no network.
set -euo pipefail
STEPS="${1:-300}"
shift || true   # the rest: extra trainer arguments for both runs (e.g. a tiny --set model.* for a CPU smoke)
DEST="${OUT:-var/gpu}"
PY="${PYTHON:-python3}"
mkdir -p "$DEST"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$DEST/gpu.txt" 2>&1 || true
for kind in moe dense; do
  extra=()
  if [ "$kind" = dense ]; then extra=(--set model.mlp='"dense"'); fi
  echo "== $kind: $STEPS steps"
  PYTHONUNBUFFERED=1 "$PY" -m training run --config deploy/gpu/hero_1b.toml --run-id "gpu-$kind" --fresh \
    --steps "$STEPS" --no-redis --metrics-jsonl "$DEST/$kind.jsonl" \
    --set checkpoint.dir='"/tmp/gpu-checkpoints"' "${extra[@]}" "$@" >"$DEST/$kind.log" 2>&1 \
    || { tail -n 30 "$DEST/$kind.log"; exit 1; }
  tail -n 2 "$DEST/$kind.log"
done
"$PY" deploy/gpu/summarise.py "$DEST/moe.jsonl" "$DEST/dense.jsonl" | tee "$DEST/gpu_hero.json"
