#!/usr/bin/env bash
# On the GPU machine: every GPU test binary of a pack (bench/pack_for_gpu_machine.sh), then the
# 124M per-op profile with our attention kernels and with cuDNN's, logs under OUT.
#   bench/gpu_tests_and_profile.sh PACK_DIR OUT_DIR
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
for f in lib tests; do [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ldconfig -p | grep -E "libcudnn.so|libcublasLt.so" | head -3 > "$OUT/libs.txt"
for t in "$P"/tests/*_test; do
  name=$(basename "$t")
  timeout "${TEST_TIMEOUT:-150}" "$t" --gtest_brief=1 > "$OUT/$name.txt" 2>&1
  echo "$name: exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$name.txt" | tr '\n' ' ')"
done
for impl in own cudnn; do
  MEGATRON_ATTENTION_IMPL=$impl timeout 120 "$P/megatron" bench --model gpt2-124m --micro-batch-size 16 \
    --global-batch-size 16 --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda --bench-iters 10 \
    --warmup-iters 3 --profile-ops > "$OUT/profile_124m_$impl.txt" 2>&1
  echo "profile $impl: exit $?"; grep -E "tokens/s|ms/iter" "$OUT/profile_124m_$impl.txt" | head -3
  grep -A16 -E "^op " "$OUT/profile_124m_$impl.txt" | head -18
done
