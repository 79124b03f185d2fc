// Offline resharding of a checkpoint for another parallel layout (`megatron convert --load A
// --save B --target-tensor-parallel-size T ...`).
//
// Our checkpoints hold every tensor in its global shape (checkpoint_io.h), so the files do not
// depend on TP/PP/DP. What does depend on the layout:
//   - the padded vocabulary (docs/megatron-formats.md, "Tensor-parallel layers and vocabulary padding"):
//       V_pad = ceil(V / (N * T)) * (N * T),  N = --make-vocab-size-divisible-by, T = TP size.
//     The trainer refuses a checkpoint whose padded size differs from its own (checkpoint.h),
//     so the rows of embedding.word_embeddings.weight and output_layer.weight (untied), and of
//     their optimizer state (main_param./exp_avg./exp_avg_sq.), are re-padded here: rows
//     [0, min(old, new)) are copied bit for bit, added rows are zero (weights and optimizer
//     state), and rows past the new size are dropped (they are dummy rows, since the new
//     V_pad >= V). So TP1 -> TP8 -> TP1 gives back the same bytes. Example, GPT-2 V = 50257,
//     N = 128: TP1 has 50304 rows (47 dummy); TP8 51200 (the same 50304 rows, then 896 zero
//     rows); back at TP1, the first 50304 rows again.
//     The dummy rows are ordinary rows of the softmax (not masked, as in Megatron): changing
//     V_pad changes the model's losses slightly, exactly as training at that V_pad would.
//   - metadata.json: layout.tensor_model_parallel_size / pipeline_model_parallel_size and
//     args --tensor-model-parallel-size, --pipeline-model-parallel-size,
//     --make-vocab-size-divisible-by, padded_vocab_size. Everything else (iteration, consumed
//     samples, scheduler, grad scaler, the other args) is copied unchanged, and so is
//     fp8_state.safetensors (ckpt/checkpoint_fp8.h): its state is per global layer and the
//     same on every TP rank, so every layout reads it as it is.
// The target is validated against the model first: heads and FFN size divisible by T,
// layers divisible by P.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace megatron::convert {

struct ReshardOptions {
  std::optional<int64_t> tensor_model_parallel_size;    // default: the checkpoint's
  std::optional<int64_t> pipeline_model_parallel_size;  // default: the checkpoint's
  std::optional<int64_t> make_vocab_size_divisible_by;  // default: the checkpoint's
  std::optional<int64_t> iteration;                     // default: the tracker's
};

struct ReshardResult {
  int64_t iteration = 0;
  bool release = false;
  int64_t vocab_size = 0, old_padded_vocab_size = 0, new_padded_vocab_size = 0;
  int64_t old_tp = 1, new_tp = 1, old_pp = 1, new_pp = 1;
  std::vector<std::string> repadded;  // the tensors whose rows changed, by file order
};

// Reads the checkpoint in load_dir (its latest iteration, or options.iteration) and writes the
// resharded one as the new directory save_dir (convert/convert_output.h: atomic, never touches
// load_dir). One-line Errors naming the flag or file: a target that does not fit the model,
// a save_dir that exists and is not empty, a malformed checkpoint.
ReshardResult reshard_checkpoint(const std::string& load_dir, const std::string& save_dir,
                                 const ReshardOptions& options);

// The bytes of a [rows, ...] tensor (row_bytes each) cut or zero-extended to new_rows rows.
std::vector<uint8_t> repad_rows(const uint8_t* data, int64_t rows, int64_t row_bytes, int64_t new_rows);

}  // namespace megatron::convert
