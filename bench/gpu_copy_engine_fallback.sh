#!/usr/bin/env bash
# The copy engines' fall-back on 2 or 4 GPUs of one host (MEGATRON_DP_COPY_ENGINE=1 with
# MEGATRON_TEST_NCCL_FAIL, comm/injected_failure.h): a set-up step that fails on every rank, or
# on one rank only, turns the engines off on every rank, the log line names the call and the
# rank, and the run gives the SM collectives' losses and grad norms bit for bit. The engines on
# are checked against the SM run to bf16 noise. Usage: bench/gpu_copy_engine_fallback.sh PACK OUT
# [NPROC] (NPROC 2: DP2; 4: PP2 x DP2).
set -uo pipefail
P=${1:?pack folder}; OUT=${2:?out folder}; N=${3:-2}; W=/tmp/mt_ce_fallback
. bench/gpu_runs.sh
PAR="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
  --micro-batch-size 4 --global-batch-size 16 --log-interval 1 --deterministic-mode --ddp-bucket-size 1000000 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
[ "$N" -eq 4 ] && PAR="$PAR --pipeline-model-parallel-size 2"
train sm $N 10 $PAR
MEGATRON_DP_COPY_ENGINE=1 train ce $N 10 $PAR
for f in ncclMemAlloc ncclMemAlloc:3@1 ncclCommSplit@1 ncclCommWindowRegister ncclCommWindowRegister:2@1; do
  name=fail_$(echo "$f" | tr ':@' '__')
  MEGATRON_DP_COPY_ENGINE=1 MEGATRON_TEST_NCCL_FAIL=$f train "$name" $N 10 $PAR
  echo "$f: $(grep -h 'MEGATRON_DP_COPY_ENGINE' $W/$name.log | head -1)"
done | tee $OUT/fallback_lines.txt
python3 - $W <<'PY' | tee $OUT/fallback_parity.txt
import sys
sys.path.insert(0, "bench")
from gpu_runs import rows
w = sys.argv[1]
sm = rows(w, "sm")
for name in ["ce", "fail_ncclMemAlloc", "fail_ncclMemAlloc_3_1", "fail_ncclCommSplit_1", "fail_ncclCommWindowRegister",
             "fail_ncclCommWindowRegister_2_1"]:
    o = rows(w, name)
    if not sm or len(o) != len(sm):
        print(f"{name}: {len(o)} vs {len(sm)} iterations: FAIL"); continue
    same = all(a["lm_loss"] == b["lm_loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(sm, o))
    dl = max(abs(a["lm_loss"] - b["lm_loss"]) for a, b in zip(sm, o))
    want = "bf16 noise" if name == "ce" else "bit for bit"
    ok = (dl < 1e-3) if name == "ce" else same
    print(f"{name}: max |loss diff| {dl:.2e} against the SM run, identical {same} (want {want}): {'ok' if ok else 'FAIL'}")
PY
cat $OUT/failures.txt 2>/dev/null | tail -30
