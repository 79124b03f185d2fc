#!/usr/bin/env bash
# The copy engines' fall-back on 2 or 4 GPUs of one host (MEGATRON_DP_COPY_ENGINE=1 with
# MEGATRON_TEST_NCCL_FAIL, comm/injected_failure.h). A set-up step that fails on every rank, or
# on one rank only, turns the engines off on every rank of that data-parallel group. The log line
# (world rank 0's group) names the call and the rank, and the run ends normally (no hang).
# The check is each run's log line against what the injection must produce. The losses are
# also compared with the SM run's: bit for bit where the engines are off. This is a weak check:
# at DP2 the engines' sum of two pieces equals the SM kernels' too.
# Usage: bench/gpu_copy_engine_fallback.sh PACK OUT [NPROC]
#   NPROC 2: DP2 (one group, world ranks {0,1});
#   NPROC 4: PP2 x DP2 (groups {0,1} and {2,3}, rank order tp-cp-dp-pp), which adds a one-rank
#            failure in the group that does not log (rank 0's line must say on).
set -uo pipefail
P=${1:?pack folder}; OUT=${2:?out folder}; N=${3:-2}; W=/tmp/mt_ce_fallback_$N
rm -rf "$W"  # the metrics files are appended to
. bench/gpu_runs.sh
PAR="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
  --micro-batch-size 4 --global-batch-size 16 --log-interval 1 --deterministic-mode --ddp-bucket-size 1000000 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
[ "$N" -eq 4 ] && PAR="$PAR --pipeline-model-parallel-size 2"
ON="on the copy engines"
# injection | what world rank 0's log line must contain
CASES=("-|$ON"
       "ncclMemAlloc|off (rank 0: ncclMemAlloc failed"
       "ncclMemAlloc:3@1|off (rank 1: the receive buffer: ncclMemAlloc failed"
       "ncclCommSplit@1|off (rank 1: ncclCommSplit failed"
       "ncclCommWindowRegister|off (rank 0: ncclCommWindowRegister failed"
       "ncclCommWindowRegister:2@1|off (rank 1: ncclCommWindowRegister failed")
[ "$N" -eq 4 ] && CASES+=("ncclCommWindowRegister@3|$ON" "ncclCommSplit@2|$ON")
train sm $N 10 $PAR
for c in "${CASES[@]}"; do
  f=${c%%|*}; want=${c#*|}
  name=ce_$(echo "$f" | tr ':@-' '__x')
  if [ "$f" = "-" ]; then
    MEGATRON_DP_COPY_ENGINE=1 train "$name" $N 10 $PAR > /dev/null
  else
    MEGATRON_DP_COPY_ENGINE=1 MEGATRON_TEST_NCCL_FAIL=$f train "$name" $N 10 $PAR > /dev/null
  fi
  line=$(grep -h 'MEGATRON_DP_COPY_ENGINE' $W/$name.log | head -1)
  case "$line" in *"$want"*) verdict=ok ;; *) verdict=FAIL ;; esac
  echo "$name|$f|$verdict|$line"
done > $W/cases.txt
python3 - $W <<'PY' | tee $OUT/fallback_${N}.txt
import sys
sys.path.insert(0, "bench")
from gpu_runs import rows
w = sys.argv[1]
sm = rows(w, "sm")
for case in open(f"{w}/cases.txt"):
    name, injected, verdict, line = case.rstrip("\n").split("|", 3)
    o = rows(w, name)
    if not sm or len(o) != len(sm):
        print(f"{injected}: {len(o)} vs {len(sm)} iterations logged: FAIL"); continue
    same = all(a["lm_loss"] == b["lm_loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(sm, o))
    dl = max(abs(a["lm_loss"] - b["lm_loss"]) for a, b in zip(sm, o))
    on = "on the copy engines" in line
    losses_ok = dl < 1e-3 if on else same
    print(f"{injected}: log line {verdict}; losses vs SM: max diff {dl:.2e}, identical {same}: "
          f"{'ok' if losses_ok else 'FAIL'}\n    {line.strip()}")
PY
cat $OUT/failures.txt 2>/dev/null | tail -30
