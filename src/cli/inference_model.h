// What `megatron serve` runs on: the tokenizer of the tokenizer flags and the model of --load's
// checkpoint (--iteration, or its latest), its weights on the --device backend, loaded and
// checked as `megatron generate` does (cli/generate_command.cpp). The command declares those
// flags (cli/tokenizer_flags.h, cli/backend_choice.h).
#pragma once

#include <memory>
#include <ostream>

#include "backend/ops.h"
#include "cli/args.h"
#include "core/dtype.h"
#include "data/tokenizer/tokenizer.h"
#include "model/gpt_config.h"
#include "model/gpt_model.h"

namespace megatron::cli {

struct InferenceModel {
  std::unique_ptr<data::Tokenizer> tokenizer;
  model::GPTConfig config;
  DType dtype = DType::kF32;
  int64_t iteration = 0;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::GPTModel> model;  // on `backend` (declared after it: destroyed first)
};

// Throws Error naming the flag: no checkpoint in --load, an --iteration it does not hold, a
// tokenizer whose vocabulary is not the checkpoint's. The device line goes to `device_log`.
InferenceModel load_inference_model(const Args& args, std::ostream& device_log);

}  // namespace megatron::cli
