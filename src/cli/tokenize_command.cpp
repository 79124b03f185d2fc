#include "cli/commands.h"
#include "core/error.h"

namespace megatron::cli {

int run_tokenize(const CommandArgs& args) { throw_error("megatron tokenize: not implemented yet"); }

}  // namespace megatron::cli
