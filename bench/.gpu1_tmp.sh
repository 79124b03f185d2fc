#!/usr/bin/env bash
set -uo pipefail
export NCCL_NVLS_ENABLE=0
P=build-gpu-pack
cd $P && tar -xJf lib.tar.xz && tar -xJf tests.tar.xz && xz -d megatron.xz && chmod +x megatron && cd ..
export LD_LIBRARY_PATH=$PWD/$P/lib
M=$P/megatron
timeout 90 $P/tests/backend_cuda_cuda_fp8_test > $OUT/fp8_test.txt 2>&1; echo "rc=$?" >> $OUT/fp8_test.txt
timeout 200 $P/tests/backend_cuda_gpu_model_test --gtest_filter='*QkLayernorm*:*Fp16*:*Llama*' > $OUT/gpu_model_test.txt 2>&1; echo "rc=$?" >> $OUT/gpu_model_test.txt
timeout 60 $P/tests/backend_cuda_cuda_elementwise_test > $OUT/elementwise_test.txt 2>&1; echo "rc=$?" >> $OUT/elementwise_test.txt
timeout 60 $P/tests/backend_cuda_gpu_telemetry_nvml_test > $OUT/telemetry_test.txt 2>&1; echo "rc=$?" >> $OUT/telemetry_test.txt
T="--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 4 --train-iters 60 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --log-interval 10 --eval-interval 1000 --mock-data --vocab-size 4096 --tokenizer-type NullTokenizer --device cuda --bf16"
for r in none delayed tensorwise; do
  extra=""; [ $r != none ] && extra="--fp8-format hybrid --fp8-recipe $r --fp8-amax-history-len 16 --fp8-amax-compute-algo max"
  timeout 120 $M train $T $extra --log-energy --codecarbon-dir /tmp/cc_$r > $OUT/train_fp8_$r.txt 2>&1; echo "rc=$?" >> $OUT/train_fp8_$r.txt
  cp /tmp/cc_$r/emissions.csv $OUT/emissions_$r.csv 2>/dev/null
done
B="--seq-length 2048 --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda --bench-iters 8 --warmup-iters 3 --json"
for r in none delayed tensorwise; do
  extra=""; [ $r != none ] && extra="--fp8-format hybrid --fp8-recipe $r"
  timeout 150 $M bench --model gpt3-2.7b --micro-batch-size 4 --global-batch-size 4 $B $extra 2>&1 | tail -4 >> $OUT/bench_fp8.txt
done
grep -E "PASSED|FAILED|rc=" $OUT/*_test.txt; tail -3 $OUT/train_fp8_*.txt
