// The flags of `megatron train` that are documented no-ops or not supported yet (train_args.h
// describes the states): the flag table, whose rows are kFlagTable in train_flag_table.cpp and
// the per-family rows of current Megatron's options in train_flag_families.cpp. Enabling a
// feature means deleting its row and reading the flag in parse_train_config().
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"

namespace megatron::cli {

enum class FlagType { kSwitch, kValue, kList };
enum class FlagState {
  kNoOp,         // accepted with any value; changes nothing here; its note is printed at start-up
  kValues,       // accepted with the listed values (the first is the default); others: not supported yet
  kUnsupported,  // "[--flag] is not supported yet (note)"
  kRemoved,      // Megatron itself rejects it; the note says what to use instead
};
// Where a flag's name comes from: current Megatron-LM (tests/cli/fixtures/megatron_flags.txt
// lists its options), an older Megatron-LM that job scripts still pass, or megatron.cpp alone.
enum class FlagOrigin { kMegatron, kOlderMegatron, kOurs };

struct FlagRow {
  // One name, or several separated by '|' (aliases, the --no-/--disable- forms of one
  // switch); each is declared and checked on its own.
  const char* name;
  FlagType type;
  FlagState state;
  const char* values;  // kValues: accepted values separated by '|', the first is the default
  const char* note;    // kNoOp notes start with "no-op: "; kValues notes that do too are no-ops as well
  FlagOrigin origin = FlagOrigin::kMegatron;
};

// The rows of train_flag_families.cpp.
std::span<const FlagRow> family_flag_rows();
// The supported flags (train_flags.cpp) whose names are not current Megatron's, with their origin.
struct NamedOrigin {
  const char* name;
  FlagOrigin origin;
};
std::span<const NamedOrigin> supported_flag_origins();

// Every row of the table, kFlagTable's then the families'.
std::vector<FlagRow> train_flag_rows();
// The origin of any declared train flag: its row's, or supported_flag_origins()' (kMegatron for
// the other supported flags).
FlagOrigin train_flag_origin(const std::string& name);

// Declares every flag of the table on `args`, its help saying what it does here.
void declare_table_flags(Args& args);
// One message "[--flag] is not supported yet (reason)" per given flag the table refuses (an
// unsupported flag, a value outside the accepted ones, a removed flag), in table order.
std::vector<std::string> table_flag_errors(const Args& args);
// One line "note: --flag has no effect here (reason)" per given no-op flag, to `log`.
void print_table_notes(const Args& args, std::ostream& log);

}  // namespace megatron::cli
