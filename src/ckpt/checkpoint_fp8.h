// The FP8 scaling state in a training checkpoint (GPTConfig::fp8; backend/fp8_recipe.h), so that
// a resume continues the delayed recipe's amax histories and scales bit for bit.
//
// fp8_state.safetensors, beside model.safetensors, holds for each linear layer of the model, by
// global layer number (so the file does not depend on the TP/PP/DP layout, and a reshard
// copies it unchanged):
//   <linear>.fp8_amax_history  fp32 [L, 3]  L: the history length (1 for tensorwise)
//   <linear>.fp8_scale         fp32 [3]
//   <linear>.fp8_scale_inv     fp32 [3]
// <linear> = decoder.layers.<g>.self_attention.linear_qkv, ...linear_proj, decoder.layers.<g>
// .mlp.linear_fc1, ...linear_fc2 (the weights' names without ".weight"); column r is operand
// Fp8Role r (input, weight, output gradient); the rows are Fp8ScalingState's (row 0: the amax
// recorded since the last update). __metadata__ "fp8_format" and "fp8_recipe" name what the state
// belongs to (Megatron's spellings). This is Transformer Engine's per-module `_extra_state`
// (scale_fwd / amax_history_fwd of the input and weight, scale_bwd / amax_history_bwd of the
// output gradient) as plain tensors: no pickle.
//
// The state is the same on every rank of a pipeline stage (the amaxes are all-reduced over
// TP x DP x CP before each update), so one copy per layer is saved: the stage's TP-0 DP-0 rank
// sends its layers to global rank 0, which writes the file.
//
// On a resume (TE's set_extra_state, then its first forward under the run's recipe):
//   - the same --fp8-recipe and --fp8-format: the state is loaded; an amax history of another
//     --fp8-amax-history-len is cut to its first rows or extended with zero rows (TE's
//     adjust_amax_history_length); --fp8-margin and --fp8-amax-compute-algo apply from the
//     next update on;
//   - another recipe (TE: "Recipe type changed", its meta tensors re-initialised) or another
//     format (TE keeps the other format's scales, a known defect of its, TE issue 3157): fresh
//     state (scales 1, histories 0), with a one-line note;
//   - a checkpoint without FP8 state: fresh state, with a one-line note;
//   - a run without FP8: the file is not read.
// Megatron checks none of the FP8 flags on resume; the load prints their differences with the
// other args'.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backend/fp8_recipe.h"
#include "ckpt/checkpoint_io.h"
#include "model/gpt_config.h"
#include "parallel/process_groups.h"

namespace megatron::ckpt {

inline constexpr const char* kFp8StateFileName = "fp8_state.safetensors";

// This rank's FP8 scaling state (GPTModel::fp8_state: local linear 4 i + {QKV, proj, FC1, FC2}
// of local layer i) and its pipeline stage (an index of CheckpointRun::stages).
struct Fp8StageState {
  backend::Fp8ScalingState* state = nullptr;  // null: FP8 off
  int64_t stage = 0;
};

// The global layer of each local layer of stage `pipeline` (GPTModel's order: chunk after chunk).
std::vector<int64_t> stage_global_layers(const model::GPTConfig& config, const model::PipelineStageOptions& pipeline);

// The file of a save, on global rank 0 (nullopt elsewhere, and when fp8.state is null).
// Collective over groups.world: row 0 of every history (the amaxes recorded since the last
// update, by evaluation's forwards too, which differ across DP ranks) is first all-reduced (MAX)
// over groups.tp_dp_cp, as the next update would do first anyway, so the saved copy is every
// rank's; then each stage's TP-0 DP-0 rank sends its state to rank 0 over the pipeline group.
// The returned file's tensors point into its `data` (moves keep them valid; copies are deleted).
struct Fp8StateFile {
  std::vector<float> data;
  CheckpointFile file;
  Fp8StateFile() = default;
  Fp8StateFile(Fp8StateFile&&) = default;
  Fp8StateFile& operator=(Fp8StateFile&&) = default;
  Fp8StateFile(const Fp8StateFile&) = delete;
  Fp8StateFile& operator=(const Fp8StateFile&) = delete;
};
std::optional<Fp8StateFile> gather_fp8_state(const model::GPTConfig& config,
                                             const std::vector<model::PipelineStageOptions>& stages,
                                             const Fp8StageState& fp8, const parallel::ProcessGroups& groups,
                                             backend::Backend& backend);

// What fp8_state.safetensors of `checkpoint` holds, checked against a model of `num_layers`
// layers: every tensor of every layer present (none extra), fp32, of the shapes above with one L,
// and known metadata; Errors name the file. nullopt when the checkpoint has no such file.
struct Fp8StateInfo {
  backend::Fp8Mix format = backend::Fp8Mix::kHybrid;
  backend::Fp8Recipe recipe = backend::Fp8Recipe::kDelayed;
  int64_t history_len = 1;
};
std::optional<Fp8StateInfo> read_fp8_state_info(const LoadedCheckpoint& checkpoint, int64_t num_layers);

// Loads this rank's layers into fp8.state by the rules above (no communication), notes to `log`.
void load_fp8_state(const LoadedCheckpoint& checkpoint, const model::GPTConfig& config,
                    const std::vector<model::PipelineStageOptions>& stages, const Fp8StageState& fp8,
                    backend::Backend& backend, std::ostream& log);

}  // namespace megatron::ckpt
