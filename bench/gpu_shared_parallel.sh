#!/usr/bin/env bash
# On a machine with ONE GPU: the CUDA engine's parallel code paths, with every rank on that GPU
# (--distributed-backend mpi: host-staged collectives over MPI; NCCL refuses two ranks on one
# device). Not a speed measurement: it checks that data, tensor, sequence and pipeline
# parallelism (1F1B and interleaved), the distributed optimizer with overlapped reductions,
# and full recompute give the one-process losses on the GPU as they do on the CPU.
# A small GPT (4 layers, hidden 128, 4 heads, seq 128; global batch 16 of micro-batches 2;
# 20 iterations on the Brown Corpus, no dropout, --deterministic-mode) runs as one process and
# in each layout, in fp32 and in bf16; the summary prints, per layout, the largest loss and
# relative grad-norm differences from the one-process run of the same dtype. Then, in fp32 with
# dropout 0.1 (our kernels draw the single-process masks in every layout), in fp16 (dynamic
# loss scaling; DP2 with the distributed optimizer against replicated DP2), and checkpoints: a bf16 TP2 x PP2 run saved at iteration 10 resumes in the same
# layout (bit-exact: the differences must be 0) and as one process (the same model, bf16).
#   bench/gpu_shared_parallel.sh PACK_DIR OUT_DIR     (needs data/gpt2 and data/brown)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
W=/tmp/mt_shared
FAILURES=shared_failures.txt
. bench/gpu_runs.sh
# gpu_runs.sh's `train` with this script's flags in place of its bf16 Brown Corpus defaults.
COMMON="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \
  --micro-batch-size 2 --global-batch-size 16 --lr 3e-4 --lr-warmup-iters 2 --log-interval 1 --seed 7 \
  --attention-dropout 0 --hidden-dropout 0 --eval-interval 100000 --eval-iters 0 --device cuda \
  --deterministic-mode --distributed-backend mpi $DATA"
# run NAME NPROC FLAGS...: 20 iterations of the small GPT. TP 1 runs pad the vocabulary as TP 2
# does (50432 rows: a multiple of 128 x 2), so that every layout trains the same model.
run() {
  local name=$1 nproc=$2
  shift 2
  local pad=(--make-vocab-size-divisible-by 256)
  case " $* " in *" --tensor-model-parallel-size 2 "*) pad=() ;; esac
  train "$name" "$nproc" 20 "${pad[@]}" "$@"
}
LAYOUTS="dp2 dp2_distopt tp2 tp2_sp pp2 pp2_vp tp2pp2 tp2pp2dp2_distopt_recompute"
for dtype in fp32 bf16; do
  D=()
  [ $dtype = bf16 ] && D=(--bf16)
  run ${dtype}_one 1 "${D[@]}"
  run ${dtype}_dp2 2 "${D[@]}"
  run ${dtype}_dp2_distopt 2 "${D[@]}" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  run ${dtype}_tp2 2 "${D[@]}" --tensor-model-parallel-size 2
  run ${dtype}_tp2_sp 2 "${D[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  run ${dtype}_pp2 2 "${D[@]}" --pipeline-model-parallel-size 2
  run ${dtype}_pp2_vp 2 "${D[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  run ${dtype}_tp2pp2 4 "${D[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
  run ${dtype}_tp2pp2dp2_distopt_recompute 8 "${D[@]}" --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
done
DROP=(--attention-dropout 0.1 --hidden-dropout 0.1)
run drop_one 1 "${DROP[@]}"
run drop_dp2 2 "${DROP[@]}"
run drop_tp2_sp 2 "${DROP[@]}" --tensor-model-parallel-size 2 --sequence-parallel
run drop_pp2_vp 2 "${DROP[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
run fp16_one 1 --fp16
run fp16_dp2 2 --fp16
run fp16_dp2_distopt 2 --fp16 --use-distributed-optimizer
run fp16_tp2_sp 2 --fp16 --tensor-model-parallel-size 2 --sequence-parallel
CK=$W/ck_tp2pp2
rm -rf $CK
run ck_saved 4 --bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save $CK --save-interval 10 \
  --exit-interval 10
run ck_resumed 4 --bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --load $CK
run ck_resumed_one 1 --bf16 --load $CK
python3 - $W "$LAYOUTS" <<'PY' | tee $OUT/shared_summary.txt
import sys
sys.path.insert(0, "bench")
from gpu_runs import print_parity, rows
w, layouts = sys.argv[1], sys.argv[2].split()
for dtype in ("fp32", "bf16"):
    print(f"-- {dtype}")
    print_parity(w, f"{dtype}_one", [f"{dtype}_{l}" for l in layouts])
print("-- fp32, dropout 0.1")
print_parity(w, "drop_one", ["drop_dp2", "drop_tp2_sp", "drop_pp2_vp"])
print("-- fp16")
print_parity(w, "fp16_one", ["fp16_tp2_sp"])
# Under DP the one process is not fp16's reference: each rank divides its loss by its own
# number of micro-batches (as Megatron), so DP2's activation gradients are twice as large and
# overflow at other iterations. The distributed optimizer must skip exactly as replicated DP2.
print_parity(w, "fp16_dp2", ["fp16_dp2_distopt"])
print("-- checkpoint saved at 10 under TP2 x PP2 (bf16), resumed")
for ref, got in (("bf16_tp2pp2", "ck_resumed"), ("bf16_one", "ck_resumed_one")):
    a = {r["iteration"]: r for r in rows(w, ref)}
    b = {r["iteration"]: r for r in rows(w, got)}
    its = sorted(set(a) & set(b))
    if not its or min(its) != 11 or len(its) != 10:
        print(f"{got}: iterations {its} in common with {ref}: FAIL")
        continue
    dl = max(abs(a[i]["lm_loss"] - b[i]["lm_loss"]) for i in its)
    dg = max(abs(a[i]["grad_norm"] - b[i]["grad_norm"]) / a[i]["grad_norm"] for i in its)
    print(f"{got} vs {ref}, iterations 11-20: max |loss diff| {dl:.2e}, max rel grad-norm diff {dg:.2e}")
PY
