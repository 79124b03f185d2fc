#include "cli/commands.h"
#include "core/error.h"

namespace megatron::cli {

int run_preprocess(const CommandArgs& args) { throw_error("megatron preprocess: not implemented yet"); }

}  // namespace megatron::cli
