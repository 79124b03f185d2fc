#include "cli/commands.h"
#include "core/error.h"

namespace megatron::cli {

int run_merge_datasets(const CommandArgs& args) { throw_error("megatron merge-datasets: not implemented yet"); }

}  // namespace megatron::cli
