#!/usr/bin/env bash
# Memory and throughput of `megatron preprocess` on a multi-GB JSONL.
#
#   bench/preprocess_memory_bench.sh [size_gb] [workers ...]
#     size_gb  size of the generated JSONL (default 3)
#     workers  worker counts to run (default: 1 and `nproc`)
#   env: MT_BIN (default build/megatron), BENCH_DIR (default $TMPDIR or /tmp)
#
# The corpus repeats data/brown/brown.jsonl; each copy renames the ids, prefixes the
# text and turns " the " into " the<k> " (k cycling over 1000 values), so documents
# differ and the tokenizer keeps meeting new words. Peak RSS comes from /usr/bin/time -v
# (or VmHWM in /proc/<pid>/status when that binary is missing). It must stay under 1 GB:
# preprocess keeps a bounded number of ~1 MB batches in flight and spills the index.
# Everything generated is deleted at exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZE_GB="${1:-3}"
shift || true
WORKERS=("$@")
if [ ${#WORKERS[@]} -eq 0 ]; then
  WORKERS=(1)
  [ "$(nproc)" -gt 1 ] && WORKERS+=("$(nproc)")
fi
MT_BIN="${MT_BIN:-$ROOT/build/megatron}"
BROWN="$ROOT/data/brown/brown.jsonl"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
[ -x "$MT_BIN" ] || { echo "error: $MT_BIN not found (build first or set MT_BIN)" >&2; exit 1; }
[ -f "$BROWN" ] || { echo "error: $BROWN not found (run scripts/setup.sh)" >&2; exit 1; }

WORK="$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/mt_preprocess_bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
INPUT="$WORK/corpus.jsonl"

echo "generating ${SIZE_GB} GB of JSONL in $WORK ..."
"$PY" - "$BROWN" "$INPUT" "$SIZE_GB" <<'PY'
import sys
brown, out, size_gb = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = open(brown, encoding="utf-8").read().splitlines()
target = int(size_gb * (1 << 30))
written, copy = 0, 0
with open(out, "w", encoding="utf-8") as f:
    while written < target:
        k = copy % 1000
        chunk = "\n".join(
            l.replace('"id":"', '"id":"c%d-' % copy, 1).replace('"text":"', '"text":"Copy %d. ' % copy, 1)
             .replace(" the ", " the%d " % k)
            for l in lines) + "\n"
        f.write(chunk)
        written += len(chunk.encode("utf-8"))
        copy += 1
PY
BYTES=$(stat -c %s "$INPUT")
DOCS=$(wc -l < "$INPUT")
echo "input: $BYTES bytes, $DOCS documents"

VOCAB="$ROOT/data/gpt2/vocab.json"
MERGES="$ROOT/data/gpt2/merges.txt"
for W in "${WORKERS[@]}"; do
  OUT="$WORK/out_w$W"
  CMD=("$MT_BIN" preprocess --input "$INPUT" --output-prefix "$OUT" --tokenizer-type GPT2BPETokenizer
       --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod --workers "$W" --log-interval 100000)
  START=$(date +%s.%N)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v "${CMD[@]}" > "$WORK/log" 2> "$WORK/err"
    PEAK_KB=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$WORK/err")
  else
    "${CMD[@]}" > "$WORK/log" 2> "$WORK/err" &
    PID=$!
    PEAK_KB=0
    while kill -0 "$PID" 2>/dev/null; do
      HWM=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
      [ -n "$HWM" ] && [ "$HWM" -gt "$PEAK_KB" ] && PEAK_KB=$HWM
      sleep 0.2
    done
    wait "$PID"
  fi
  END=$(date +%s.%N)
  SECS=$(echo "$END - $START" | bc -l 2>/dev/null || "$PY" -c "print($END - $START)")
  tail -n 1 "$WORK/log"
  "$PY" - "$W" "$BYTES" "$DOCS" "$SECS" "$PEAK_KB" "$OUT" <<'PY'
import sys, os
w, nbytes, docs, secs, peak_kb, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
binsize = os.path.getsize(out + "_text_document.bin")
print("workers=%s  %.1f MB/s  %.0f docs/s  wall %.1f s  peak RSS %.1f MB  (.bin %.0f MB)"
      % (w, nbytes / 1e6 / secs, docs / secs, secs, peak_kb / 1024, binsize / 1e6))
if peak_kb >= 1024 * 1024:
    print("FAIL: peak RSS >= 1 GB")
    sys.exit(1)
PY
  rm -f "$OUT"_*
done
