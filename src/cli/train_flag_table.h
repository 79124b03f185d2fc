// The flags of `megatron train` that are documented no-ops or not supported yet (train_args.h
// describes the three states): one table, kFlagTable in train_flag_table.cpp. Enabling a
// feature means deleting its row there and reading the flag in parse_train_config().
#pragma once

#include "cli/args.h"

namespace megatron::cli {

// Declares every flag of the table on `args`, its help saying what it does here.
void declare_table_flags(Args& args);
// Throws megatron::Error "[--flag] is not supported yet (reason)" for the first given flag the
// table refuses (an unsupported flag, a value outside the accepted ones, a removed flag).
void check_table_flags(const Args& args);

}  // namespace megatron::cli
