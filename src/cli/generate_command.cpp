// megatron generate: sample text from a checkpoint (KV-cache decoding on the CPU engine).
// The tokenizer is the flags' or the checkpoint's (cli/checkpoint_tokenizer.h, which also says
// where BOS comes from and which tokens stop generation).
#include <algorithm>
#include <cerrno>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/checkpoint_tokenizer.h"
#include "cli/commands.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "data/tokenizer/tokenizer.h"
#include "model/gpt_generator.h"
#include "model/gpt_model.h"
#include "model/sampling.h"

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
      .option("--seed", "S", "sampling seed", "1234")
      .flag("--token-ids",
            "prompts are token ids (whitespace-separated), used as given (no BOS added, no tokenizer read); "
            "each output line is the ids of the prompt and its continuation")
      .option("--dump-logits", "FILE",
              "write each prompt's ids, its continuation's and the fp32 logits after each of those tokens (one at a "
              "time through the KV cache) to FILE as safetensors: prompt.N.tokens [n], prompt.N.generated [m], "
              "prompt.N.logits [n + m, vocab]");
  declare_tokenizer_flags(args, "");  // default: the checkpoint's tokenizer, else GPT2BPETokenizer
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
  const bool token_ids = args.get_flag("--token-ids");
  const std::string dump = args.given("--dump-logits") ? args.get_string("--dump-logits") : "";

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
  const int64_t vocab = cm.config.vocab_size;
  std::unique_ptr<data::Tokenizer> tokenizer;  // none with --token-ids
  data::TokenizerOptions tokenizer_opts;
  if (!token_ids) {
    tokenizer_opts = checkpoint_tokenizer_options(args, ck);
    tokenizer = data::make_tokenizer(tokenizer_opts);
    if (vocab != tokenizer->vocab_size()) {
      throw_error("[--tokenizer-type] ", tokenizer_opts.type, " has ", tokenizer->vocab_size(),
                  " tokens but the checkpoint was trained with ", vocab);
    }
  }
  const GenerationTokens special = generation_tokens(tokenizer_opts, tokenizer.get(), ck);

  // Every prompt's ids first: the KV cache holds the longest prompt and its continuation (not
  // every position a long-context model has).
  const int64_t positions = cm.config.max_position_embeddings;
  std::vector<std::vector<int32_t>> prompt_ids;
  int64_t longest = 0;
  for (const std::string& prompt : prompts) {
    std::vector<int32_t> ids;
    if (token_ids) {
      std::istringstream in(prompt);
      for (std::string word; in >> word;) {
        const int64_t id = parse_int(word, "--prompt");
        if (id < 0 || id >= vocab) throw_error("[--prompt] token id ", id, " is outside the vocabulary of ", vocab);
        ids.push_back(static_cast<int32_t>(id));
      }
      if (ids.empty()) throw_error("[--prompt] --token-ids: a prompt holds no token id");
    } else {
      ids = special.prefix;
      tokenizer->encode(prompt, &ids);
      if (ids.empty()) ids.push_back(tokenizer->eod());  // an empty prompt starts a new document
    }
    if (static_cast<int64_t>(ids.size()) >= positions) {
      throw_error("[--prompt] the prompt has ", ids.size(), " tokens; the model has ", positions, " positions");
    }
    longest = std::max(longest, static_cast<int64_t>(ids.size()));
    prompt_ids.push_back(std::move(ids));
  }
  const int64_t context = max_new >= positions - longest ? positions : longest + std::max<int64_t>(max_new, 1);

  std::ostringstream device_line;  // keep stdout for the generated text alone
  std::unique_ptr<backend::Backend> backend = make_backend(args, device_line);
  model::GPTModel model(cm.config, *backend, cm.dtype, 1);
  ckpt::load_checkpoint_weights(ck, model.parameters(), *backend);
  model::GPTGenerator generator(cm.config, model.parameters(), *backend, context);

  std::deque<std::vector<int32_t>> dumped_generated;  // with prompt_ids, what --dump-logits writes
  std::deque<std::vector<float>> dumped_logits;
  uint64_t draw = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string& prompt = prompts[p];
    const std::vector<int32_t>& ids = prompt_ids[p];
    generator.reset();
    std::vector<float>* rows = nullptr;  // --dump-logits: [tokens appended, vocab]
    if (!dump.empty()) {
      dumped_generated.emplace_back();
      rows = &dumped_logits.emplace_back();
    }
    auto keep = [&](const std::vector<float>& logits) {
      if (rows) rows->insert(rows->end(), logits.begin(), logits.begin() + vocab);
    };
    std::vector<float> logits;
    if (rows) {  // one token at a time: the logits after each prompt token
      for (const int32_t id : ids) keep(logits = generator.append(std::span<const int32_t>(&id, 1)));
    } else {
      logits = generator.append(ids);
    }
    std::vector<int32_t> out;
    bool stopped = false;  // at an end-of-text token
    for (int64_t i = 0; i < max_new && generator.context_length() < context; ++i) {
      const int32_t next = model::sample_token(logits, vocab, sp, draw++);
      if ((stopped = special.stops(next))) break;
      out.push_back(next);
      if (generator.context_length() < context) {
        logits = generator.append(std::span<const int32_t>(&next, 1));
        keep(logits);
        if (rows) dumped_generated.back().push_back(next);  // a token whose logits were computed
      }
    }
    // Short of --max-new-tokens without a stop token: the model's positions ran out.
    const bool at_context = !stopped && static_cast<int64_t>(out.size()) < max_new;
    auto context_note = [&] {
      if (!at_context) return;
      std::cerr << "note: prompt " << p + 1 << " stopped at the model's context: " << positions << " positions ("
                << ids.size() << " prompt tokens + " << out.size() << " generated) before --max-new-tokens " << max_new
                << "\n"
                << std::flush;
    };
    std::vector<int32_t> all = ids;
    all.insert(all.end(), out.begin(), out.end());
    if (token_ids) {
      for (size_t i = 0; i < all.size(); ++i) std::cout << (i ? " " : "") << all[i];
      std::cout << "\n" << std::flush;
      context_note();
      continue;
    }
    // The continuation's text is what it adds to the prompt's decoded text: SentencePiece drops
    // the word-initial space of a text's first piece, so decode(out) alone would lose it.
    const std::string base = tokenizer->decode(ids);
    const std::string full = tokenizer->decode(all);
    const std::string added =
        full.compare(0, base.size(), base) == 0 ? full.substr(base.size()) : tokenizer->decode(out);
    std::cout << prompt << added << "\n" << std::flush;
    context_note();
  }
  if (!dump.empty()) {
    std::vector<ckpt::TensorToWrite> tensors;
    for (size_t p = 0; p < dumped_logits.size(); ++p) {
      const std::string name = "prompt." + std::to_string(p) + ".";
      const int64_t n = static_cast<int64_t>(prompt_ids[p].size()),
                    m = static_cast<int64_t>(dumped_generated[p].size());
      ckpt::TensorToWrite t;
      t.name = name + "tokens";
      t.dtype = DType::kI32;
      t.shape = {n};
      t.data = prompt_ids[p].data();
      tensors.push_back(t);
      t.name = name + "generated";
      t.shape = {m};
      t.data = dumped_generated[p].data();
      tensors.push_back(t);
      t.name = name + "logits";
      t.dtype = DType::kF32;
      t.shape = {n + m, vocab};
      t.data = dumped_logits[p].data();
      tensors.push_back(t);
    }
    try {
      ckpt::write_safetensors(dump, tensors, {{"vocab_size", std::to_string(vocab)}});
    } catch (const Error& e) {
      throw_error("[--dump-logits] ", e.what());
    }
  }
  return 0;
}

}  // namespace megatron::cli
