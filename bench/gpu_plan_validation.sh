#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x4, or -x2 with NGPUS 2): the planner against our own
# measured runs (issue 7 validation (a): tokens/s within 10%, memory within 5%) on 1, 2 and 4
# GPUs. `megatron bench --sweep` measures each configuration and keeps the planner's
# prediction alongside (predicted_ms_per_iter, planned_memory_per_gpu_bytes); the summary
# prints measured vs predicted per case.
#   bench/gpu_plan_validation.sh PACK_DIR OUT_DIR [NGPUS] [GPU]   (GPU: the planner's --gpu name)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-4}
GPU=${4:-h200-141gb}
export NCCL_NVLS_ENABLE=0
for f in lib tests; do [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DP=1 TP=1
for g in 2 4 8; do [ "$g" -le "$N" ] && DP="$DP,$g" && TP="$TP,$g"; done
COMMON="--device cuda --bf16 --attention-dropout 0 --hidden-dropout 0 --bench-iters 10 --warmup-iters 3 --gpu $GPU"
sweep() {  # sweep NAME FLAGS...
  local name=$1
  shift
  timeout 560 "$P/megatron" bench $COMMON "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name: exit $?"
}
sweep dp_1.3b --model gpt3-1.3b --micro-batch-size 4 --sweep dp=$DP
sweep dp_350m --model gpt2-350m --micro-batch-size 16 --sweep dp=$DP
sweep tp_2.7b --model gpt3-2.7b --micro-batch-size 4 --sweep tp=$TP sp=off,on
python3 - "$OUT"/*.json <<'PY' | tee "$OUT/plan_validation.txt"
import json, sys
print("| case | sp | measured ms/iter | predicted | error | measured MiB | planned | error |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if r["status"] != "measured":
            print(f"| {r['case']} | {r['sequence_parallel']} | {r['status']}: {r.get('reason', '')} | | | | | |")
            continue
        ms, pms = r["ms_per_iter"], r["predicted_ms_per_iter"]
        mem, pmem = r["memory_per_gpu_bytes"] / 2**20, r["planned_memory_per_gpu_bytes"] / 2**20
        # tokens/s error = measured time / predicted time - 1
        print(f"| {r['case']} | {r['sequence_parallel']} | {ms:.1f} | {pms:.1f} | {ms / pms - 1:+.1%} "
              f"| {mem:.0f} | {pmem:.0f} | {pmem / mem - 1:+.1%} |")
PY
