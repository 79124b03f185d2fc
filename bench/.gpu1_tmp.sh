#!/usr/bin/env bash
set -uo pipefail
export NCCL_NVLS_ENABLE=0
P=build-gpu-pack
cd $P && tar -xJf lib.tar.xz && tar -xJf tests.tar.xz && xz -d megatron.xz && chmod +x megatron && cd ..
export LD_LIBRARY_PATH=$PWD/$P/lib
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git log -1 --format=%H 2>/dev/null; $P/megatron version; } 2>&1 | tee $OUT/machine.txt
timeout 60 $P/tests/backend_cuda_cuda_qk_norm_test 2>&1 | tail -30 > $OUT/qk_norm_test.txt
timeout 60 $P/tests/backend_cuda_cuda_fp8_test 2>&1 | tail -40 > $OUT/fp8_test.txt
timeout 200 $P/tests/backend_cuda_gpu_model_test 2>&1 > $OUT/gpu_model_test.txt; echo "rc=$?" >> $OUT/gpu_model_test.txt
for spec in "llama3.2-1b 2" "llama3.2-3b 1" "llama2-1.3b 2"; do set -- $spec
  $P/megatron bench --model $1 --seq-length 4096 --micro-batch-size $2 --global-batch-size $2 --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda --bench-iters 10 --warmup-iters 3 --json 2>&1 | tail -3 >> $OUT/ours_llama.txt
done
timeout 240 python3 bench/torch_llama_bench.py llama3.2-1b llama3.2-3b llama2-1.3b > $OUT/torch_llama.txt 2>&1
$P/megatron bench --model llama3.2-3b --seq-length 4096 --micro-batch-size 1 --global-batch-size 1 --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda --bench-iters 5 --warmup-iters 2 --profile-ops 2>&1 | tail -45 > $OUT/profile_3b.txt
tail -3 $OUT/*.txt
