#!/usr/bin/env bash
# The planner against our own measured runs (its bar, docs/planner.md: tokens/s within 10%,
# memory within 5%). `megatron bench --sweep` measures each configuration and keeps the
# planner's prediction alongside (predicted_ms_per_iter, planned_memory_per_gpu_bytes); the
# summary prints measured vs predicted per case.
#   bench/gpu_plan_validation.sh PACK_DIR OUT_DIR [NGPUS] [GPU]   (GPU: the planner's --gpu name)
#
# NGPUS >= 2 (nvidia-h200-x4, or -x2 with NGPUS 2; GPU default h200-141gb): DP for 350M and
# 1.3B, TP with and without SP for 2.7B, on 1, 2, 4 (8) GPUs.
# NGPUS = 1 (nvidia-h100-x1; GPU default h100-80gb): one GPU, the three shapes the planner's
# calibration did not fix alone, each at two micro-batch sizes, with and without full
# recompute (--recompute-granularity full --recompute-method uniform --recompute-num-layers 1):
#   gpt2-350m mbs 8, 16;  gpt3-1.3b mbs 2, 4;  gpt3-2.7b mbs 2, 4   (12 runs, ~4-6 min of GPU;
#   each sweep is capped so the whole matrix stays under ~8 min).
# DRY_RUN=1: pass --dry-run to every sweep (planner only, no GPU; checks the command lines).
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-4}
if [ "$N" -eq 1 ]; then GPU=${4:-h100-80gb}; else GPU=${4:-h200-141gb}; fi
DRY=${DRY_RUN:+--dry-run}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
for f in lib tests; do [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
COMMON="--device cuda --bf16 --attention-dropout 0 --hidden-dropout 0 --bench-iters 10 --warmup-iters 3 --gpu $GPU"
sweep() {  # sweep NAME SECONDS FLAGS...
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$P/megatron" bench $COMMON "$@" $DRY --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name: exit $?"
}
if [ "$N" -eq 1 ]; then
  sweep one_350m 120 --model gpt2-350m --sweep mbs=8,16 recompute=none,full
  sweep one_1.3b 150 --model gpt3-1.3b --sweep mbs=2,4 recompute=none,full
  sweep one_2.7b 200 --model gpt3-2.7b --sweep mbs=2,4 recompute=none,full
else
  DP=1 TP=1
  for g in 2 4 8; do [ "$g" -le "$N" ] && DP="$DP,$g" && TP="$TP,$g"; done
  sweep dp_1.3b 560 --model gpt3-1.3b --micro-batch-size 4 --sweep dp=$DP
  sweep dp_350m 560 --model gpt2-350m --micro-batch-size 16 --sweep dp=$DP
  sweep tp_2.7b 560 --model gpt3-2.7b --micro-batch-size 4 --sweep tp=$TP sp=off,on
fi
python3 - "$OUT"/*.json <<'PY' | tee "$OUT/plan_validation.txt"
import json, sys
print("| case | mbs | recompute | sp | measured ms/iter | predicted | error | measured MiB | planned | error |")
print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        head = f"| {r['case']} | {r.get('micro_batch', '')} | {r.get('recompute', '')} | {r.get('sequence_parallel', '')}"
        if r["status"] not in ("measured", "predicted"):
            print(f"{head} | {r['status']}: {r.get('reason', '')} | | | | | |")
            continue
        ms, pms = r["ms_per_iter"], r["predicted_ms_per_iter"]
        mem, pmem = r["memory_per_gpu_bytes"] / 2**20, r["planned_memory_per_gpu_bytes"] / 2**20
        # tokens/s error = measured time / predicted time - 1 ("predicted" rows: --dry-run, 0 by construction)
        print(f"{head} | {ms:.1f} | {pms:.1f} | {ms / pms - 1:+.1%} | {mem:.0f} | {pmem:.0f} | {pmem / mem - 1:+.1%} |")
PY
