#include "cli/inference_model.h"

#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "cli/backend_choice.h"
#include "cli/checkpoint_tokenizer.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

// After --load's checkpoint failed to load: an --iteration that the directory does not hold is
// named as the cause (when it holds any; a missing directory stays --load's error).
void check_iteration(const std::string& dir, int64_t iteration) {
  const std::vector<ckpt::CheckpointSummary> all = ckpt::list_checkpoints(dir);
  std::string held;
  for (const ckpt::CheckpointSummary& c : all) {
    if (!c.release && c.iteration == iteration) return;
    if (!c.release) held += (held.empty() ? "" : ", ") + std::to_string(c.iteration);
  }
  if (held.empty()) return;
  throw_error("[--iteration] no checkpoint of iteration ", iteration, " in ", dir, " (it holds iterations ", held, ")");
}

}  // namespace

InferenceModel load_inference_model(const Args& args, std::ostream& device_log) {
  InferenceModel m;
  std::optional<int64_t> iteration;
  if (args.given("--iteration")) iteration = args.get_int("--iteration", 1);
  const std::string dir = args.get_string("--load");
  ckpt::LoadedCheckpoint ck;
  try {
    ck = ckpt::load_checkpoint_dir(dir, iteration);
  } catch (const Error&) {
    if (iteration) check_iteration(dir, *iteration);
    throw;
  }
  if (!ck.found) throw_error("[--load] no checkpoint in ", dir, " (", ck.tracker_path, " is missing)");
  const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);
  // The tokenizer flags default to the checkpoint's own (cli/checkpoint_tokenizer.h).
  const data::TokenizerOptions tokenizer_opts = checkpoint_tokenizer_options(args, ck);
  m.tokenizer = data::make_tokenizer(tokenizer_opts);
  if (cm.config.vocab_size != m.tokenizer->vocab_size()) {
    throw_error("[--tokenizer-type] ", tokenizer_opts.type, " has ", m.tokenizer->vocab_size(),
                " tokens but the checkpoint was trained with ", cm.config.vocab_size);
  }
  m.config = cm.config;
  m.dtype = cm.dtype;
  m.iteration = cm.iteration;
  m.backend = make_backend(args, device_log);
  m.model = std::make_unique<model::GPTModel>(cm.config, *m.backend, cm.dtype, 1);
  ckpt::load_checkpoint_weights(ck, m.model->parameters(), *m.backend);
  return m;
}

}  // namespace megatron::cli
