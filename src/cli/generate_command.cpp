// megatron generate: sample text from a checkpoint (KV-cache decoding on the CPU engine).
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "core/error.h"
#include "cli/tokenizer_flags.h"
#include "data/tokenizer/tokenizer.h"
#include "model/gpt_generator.h"
#include "model/gpt_model.h"
#include "model/sampling.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"

namespace megatron::cli {
namespace {

// The non-empty lines of --prompt-file `path`; Error naming the flag when it is a directory or
// cannot be opened or read.
std::vector<std::string> read_prompt_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw_error("[--prompt-file] ", path, " is a directory (expected a file of prompts, one per line)");
  }
  std::ifstream in(path);
  if (!in) throw_error("[--prompt-file] cannot open ", path, ": ", errno_string(errno));
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  if (in.bad()) throw_error("[--prompt-file] cannot read ", path, ": ", errno_string(errno));
  return prompts;
}

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

int run_generate(const CommandArgs& argv) {
  Args args("generate", "sample text from a checkpoint");
  args.option("--load", "DIR", "checkpoint directory (its latest iteration)", std::nullopt, true)
      .option("--iteration", "N", "load this iteration instead of the latest")
      .option("--prompt", "TEXT", "the text to continue")
      .option("--prompt-file", "F", "one prompt per line")
      .option("--max-new-tokens", "N", "tokens to generate per prompt", "64")
      .option("--temperature", "T", "softmax temperature; 0 is greedy", "1.0")
      .option("--top-k", "K", "sample among the K most likely tokens (0: all)", "0")
      .option("--top-p", "P", "sample among the most likely tokens that reach probability P (0: off)", "0")
      .option("--seed", "S", "sampling seed", "1234");
  declare_tokenizer_flags(args, "GPT2BPETokenizer");
  declare_device_flag(args);
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  std::vector<std::string> prompts;
  if (args.given("--prompt")) prompts.push_back(args.get_string("--prompt"));
  if (args.given("--prompt-file")) {
    const std::vector<std::string> lines = read_prompt_file(args.get_string("--prompt-file"));
    prompts.insert(prompts.end(), lines.begin(), lines.end());
  }
  if (prompts.empty() && args.given("--prompt-file")) {
    throw_error("[--prompt-file] ", args.get_string("--prompt-file"), " holds no prompt (every line is empty)");
  }
  if (prompts.empty()) throw_error("[--prompt] give --prompt TEXT or --prompt-file F");
  // The context bounds the tokens generated, so any count is fine.
  const int64_t max_new = args.get_int("--max-new-tokens", 0);
  model::SamplingParams sp;
  // Sampling computes in fp32: a temperature that rounds to 0 there is greedy, as 0 is.
  sp.temperature = static_cast<float>(args.get_double("--temperature", {0.0, kMaxFp32}));
  sp.top_k = args.get_int("--top-k", 0);
  sp.top_p = static_cast<float>(args.get_double("--top-p", {0.0, 1.0}));
  sp.seed = static_cast<uint64_t>(args.get_int("--seed"));

  const std::unique_ptr<data::Tokenizer> tokenizer_ptr = data::make_tokenizer(tokenizer_options(args));
  const data::Tokenizer& tokenizer = *tokenizer_ptr;
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
  if (cm.config.vocab_size != tokenizer.vocab_size()) {
    throw_error("[--tokenizer-type] ", args.get_string("--tokenizer-type"), " has ", tokenizer.vocab_size(),
                " tokens but the checkpoint was trained with ", cm.config.vocab_size);
  }

  std::ostringstream device_line;  // keep stdout for the generated text alone
  std::unique_ptr<backend::Backend> backend = make_backend(args, device_line);
  model::GPTModel model(cm.config, *backend, cm.dtype, 1);
  ckpt::load_checkpoint_weights(ck, model.parameters(), *backend);
  const int64_t context = cm.config.max_position_embeddings;
  model::GPTGenerator generator(cm.config, model.parameters(), *backend, context);

  uint64_t draw = 0;
  for (const std::string& prompt : prompts) {
    std::vector<int32_t> ids;
    tokenizer.encode(prompt, &ids);
    if (ids.empty()) ids.push_back(tokenizer.eod());  // an empty prompt starts a new document
    if (static_cast<int64_t>(ids.size()) >= context) {
      throw_error("[--prompt] the prompt has ", ids.size(), " tokens; the model has ", context, " positions");
    }
    generator.reset();
    std::vector<float> logits = generator.append(ids);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < max_new && generator.context_length() < context; ++i) {
      const int32_t next = model::sample_token(logits, cm.config.vocab_size, sp, draw++);
      if (next == tokenizer.eod()) break;
      out.push_back(next);
      if (generator.context_length() < context) logits = generator.append(std::span<const int32_t>(&next, 1));
    }
    // The continuation's text is what it adds to the prompt's decoded text: SentencePiece drops
    // the word-initial space of a text's first piece, so decode(out) alone would lose it.
    std::vector<int32_t> all = ids;
    all.insert(all.end(), out.begin(), out.end());
    const std::string base = tokenizer.decode(ids);
    const std::string full = tokenizer.decode(all);
    const std::string added = full.compare(0, base.size(), base) == 0 ? full.substr(base.size()) : tokenizer.decode(out);
    std::cout << prompt << added << "\n" << std::flush;
  }
  return 0;
}

}  // namespace megatron::cli
