// Subcommands of the `megatron` binary. Each takes the arguments after its name
// and returns the process exit code; bad input throws megatron::Error.
#pragma once

#include <string>
#include <vector>

namespace megatron::cli {

using CommandArgs = std::vector<std::string>;

int run_tokenize(const CommandArgs& args);         // tokenize_command.cpp
int run_preprocess(const CommandArgs& args);       // preprocess_command.cpp
int run_merge_datasets(const CommandArgs& args);   // merge_datasets_command.cpp
int run_dataset_info(const CommandArgs& args);     // dataset_info_command.cpp
int run_checkpoint_info(const CommandArgs& args);  // checkpoint_info_command.cpp
int run_version(const CommandArgs& args);          // version_command.cpp
int run_train(const CommandArgs& args);            // train_command.cpp
int run_generate(const CommandArgs& args);         // generate_command.cpp
int run_serve(const CommandArgs& args);            // serve_command.cpp
int run_bench(const CommandArgs& args);            // bench_command.cpp
int run_bench_sweep(const CommandArgs& args);      // bench_sweep_command.cpp (bench --sweep)
int run_plan(const CommandArgs& args);             // plan_command.cpp
int run_preflight(const CommandArgs& args);        // preflight_command.cpp
int run_convert(const CommandArgs& args);          // convert_command.cpp

}  // namespace megatron::cli
