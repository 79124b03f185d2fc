#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h100-x4 / -x2): what the CPU tests check under mpirun, on GPU
# ranks over NCCL:
#  1. checkpoints: a TP2 x DP2 run (4 GPUs; DP2 with 2) with the distributed optimizer saves at
#     iteration 10 (every rank writes its own bytes: the fully parallel save), resumes to 20 and
#     must log the bits of the straight 20-iteration run; the same checkpoint resumed under
#     PP2 x DP2 (another layout) must log its losses to bf16 reduction-order noise;
#  2. a stopped rank (SIGSTOP, alive but silent): every rank must end within a minute, the
#     watchdog naming the operation and group (--distributed-timeout-minutes 0.2);
#  3. a killed rank (SIGKILL): the launcher must end the job within a minute naming the rank.
#   bench/gpu_multi_gpu_checks.sh PACK_DIR OUT_DIR NGPUS     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-4}
W=/tmp/mt_checks
FAILURES=checks_failures.txt
. bench/gpu_runs.sh
SUM=$OUT/checks_summary.txt
: > "$SUM"
SMALL="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
  --micro-batch-size 4 --global-batch-size 16 --log-interval 1 --deterministic-mode --use-distributed-optimizer"
LAYOUT="--tensor-model-parallel-size 2"
OTHER="--pipeline-model-parallel-size 2 --make-vocab-size-divisible-by 256"  # TP2's padded vocabulary
[ "$N" -lt 4 ] && LAYOUT="" && OTHER="--tensor-model-parallel-size 2"
rm -rf $W/ckpt
train ck_straight $N 20 $SMALL $LAYOUT
train ck_first $N 20 $SMALL $LAYOUT --save $W/ckpt --save-interval 10 --exit-interval 10
train ck_resumed $N 20 $SMALL $LAYOUT --load $W/ckpt
train ck_other_layout $N 20 $SMALL $OTHER --load $W/ckpt
python3 - $W <<'PY' | tee -a "$SUM"
import sys
sys.path.insert(0, "bench")
from gpu_runs import rows
w = sys.argv[1]
straight = {r["iteration"]: r for r in rows(w, "ck_straight")}
for name in ("ck_resumed", "ck_other_layout"):
    got = [r for r in rows(w, name) if r["iteration"] > 10]
    if len(got) != 10 or any(r["iteration"] not in straight for r in got):
        print(f"{name}: {len(got)} iterations after the resume: FAIL"); continue
    dl = max(abs(r["lm_loss"] - straight[r["iteration"]]["lm_loss"]) for r in got)
    dg = max(abs(r["grad_norm"] - straight[r["iteration"]]["grad_norm"]) for r in got)
    print(f"{name} vs the straight run, iterations 11-20: max |loss diff| {dl:.3e}, max |grad-norm diff| {dg:.3e}"
          + (" (bit-identical)" if dl == 0 and dg == 0 else ""))
PY
ls -la $W/ckpt/iter_0000010 >> "$SUM" 2>&1

# 2 and 3: a long DP run; rank 1 (found by its RANK in /proc/PID/environ among the launcher's
# children) is stopped or killed once iteration 3 is logged; the time to the job's end is printed.
fail_rank() {  # fail_rank NAME SIGNAL EXTRA_FLAGS...
  local name=$1 sig=$2
  shift 2
  "$P/megatron" train --nproc-per-node $N $COMMON $SMALL --train-iters 100000 "$@" > $W/$name.log 2>&1 &
  local launcher=$! victim="" t0
  for _ in $(seq 1 600); do
    grep -q "iteration        3/" $W/$name.log 2>/dev/null && break
    sleep 0.2
  done
  for c in $(pgrep -P $launcher); do
    tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx "RANK=1" && victim=$c
  done
  t0=$(date +%s.%N)
  [ -n "$victim" ] && kill -$sig $victim
  local rc=timeout
  for _ in $(seq 1 300); do
    if ! kill -0 $launcher 2>/dev/null; then wait $launcher; rc=$?; break; fi
    sleep 0.2
  done
  local t=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  [ "$rc" = timeout ] && { pkill -KILL -P $launcher; kill -KILL $launcher; }
  [ -n "$victim" ] && kill -KILL $victim 2>/dev/null
  echo "$name: rank 1 (pid ${victim:-not found}) got SIG$sig; the job ended after $t s with exit $rc" | tee -a "$SUM"
  grep -E "watchdog|rank 1|error" $W/$name.log | head -n 8 | tee -a "$SUM"
}
[ -n "${SKIP_FAIL:-}" ] && exit 0
fail_rank stopped_rank STOP --distributed-timeout-minutes 0.2
fail_rank killed_rank KILL
tar -C $W -czf $OUT/checks_logs.tar.gz $(cd $W && ls *.log)
