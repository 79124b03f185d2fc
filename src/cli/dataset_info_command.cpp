#include "cli/commands.h"
#include "core/error.h"

namespace megatron::cli {

int run_dataset_info(const CommandArgs& args) { throw_error("megatron dataset-info: not implemented yet"); }

}  // namespace megatron::cli
