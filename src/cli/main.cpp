// megatron: one program, several commands (docs/design.md, "One program, several commands").
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const megatron::cli::CommandArgs&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"train", megatron::cli::run_train, "pretrain a GPT (Megatron-LM pretrain_gpt.py flags)"},
    {"bench", megatron::cli::run_bench, "training-step speed and memory (tokens/s, TFLOP/s, MFU, report time)"},
    {"plan", megatron::cli::run_plan, "memory + throughput model: which TP/PP/DP/micro-batch/recompute fits and wins"},
    {"preflight", megatron::cli::run_preflight, "measure every GPU and parallel group's links; name the slow ones"},
    {"generate", megatron::cli::run_generate, "sample text from a checkpoint"},
    {"serve", megatron::cli::run_serve, "Megatron's text generation server and OpenAI completions over HTTP"},
    {"convert", megatron::cli::run_convert, "checkpoint <-> Hugging Face GPT-2 safetensors, reshard for another TP/PP"},
    {"preprocess", megatron::cli::run_preprocess, "JSONL(.gz/.xz/.zst) -> <prefix>_<key>_document.bin/.idx"},
    {"merge-datasets", megatron::cli::run_merge_datasets, "concatenate indexed datasets"},
    {"dataset-info", megatron::cli::run_dataset_info, "counts, splits and the training samples of a dataset"},
    {"checkpoint-info", megatron::cli::run_checkpoint_info, "iterations, sizes, tensors and metadata of a checkpoint"},
    {"tokenize", megatron::cli::run_tokenize, "GPT-2 BPE token ids of stdin"},
    {"version", megatron::cli::run_version, "version and build configuration"},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: megatron <command> [flags]   (megatron <command> --help for its flags)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) return megatron::cli::run_version({});
  const std::string name = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const megatron::Error& e) {
      // A message of several lines is several problems (cli::throw_errors): one "error:" each.
      std::fflush(stdout);
      const std::string what = e.what();
      for (size_t begin = 0; begin <= what.size();) {
        const size_t end = std::min(what.find('\n', begin), what.size());
        std::fprintf(stderr, "error: %s\n", what.substr(begin, end - begin).c_str());
        begin = end + 1;
      }
      return 1;
    } catch (const std::bad_alloc&) {
      std::fflush(stdout);
      std::fprintf(stderr, "error: out of memory\n");
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return 2;
}
