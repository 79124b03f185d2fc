#include "cli/flag_agreement.h"

#include <cstdint>
#include <span>
#include <vector>

#include "comm/launch.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

// FNV-1a of "name\0value", kept to 48 bits so that a double holds it exactly.
double hash48(const std::string& name, const std::string& value) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  };
  for (char c : name) add(static_cast<unsigned char>(c));
  add(0);
  for (char c : value) add(static_cast<unsigned char>(c));
  return static_cast<double>(h & ((uint64_t{1} << 48) - 1));
}

bool may_differ(const Args::Setting& s) {
  return s.metavar == "FILE" || s.metavar == "DIR" || s.metavar == "PATH" || s.name == "--nproc-per-node" ||
         s.name == "--local-rank" || s.name == "--local_rank";
}

std::string shown(const std::string& value) { return value.empty() ? "(none)" : "'" + value + "'"; }

// One round of the comparison: (what, value) pairs hashed and held against rank 0's. Every rank
// must pass as many pairs (three host all-reduces of that length).
struct Round {
  std::vector<bool> mine_differs;  // this rank's value differs from rank 0's
  std::vector<int64_t> count;      // ranks whose value differs
  std::vector<int64_t> first;      // the first of them
  bool any = false;
};
Round compare_with_rank0(const std::vector<std::pair<std::string, std::string>>& pairs, comm::Communicator& world) {
  const size_t n = pairs.size();
  std::vector<double> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = hash48(pairs[i].first, pairs[i].second);
  const std::vector<double> rank0 = comm::broadcast_host(world, mine);
  std::vector<double> count(n, 0.0), first(n, static_cast<double>(world.size()));
  Round r;
  r.mine_differs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.mine_differs[i] = mine[i] != rank0[i];
    if (r.mine_differs[i]) {
      count[i] = 1.0;
      first[i] = static_cast<double>(world.rank());
    }
  }
  world.all_reduce_host(std::span<double>(count), comm::ReduceOp::kSum);
  world.all_reduce_host(std::span<double>(first), comm::ReduceOp::kMin);
  for (size_t i = 0; i < n; ++i) {
    r.count.push_back(static_cast<int64_t>(count[i]));
    r.first.push_back(static_cast<int64_t>(first[i]));
    r.any = r.any || count[i] > 0.0;
  }
  return r;
}

}  // namespace

FlagDisagreement compare_flags_across_ranks(const Args& args, comm::Communicator& world) {
  FlagDisagreement out;
  const int64_t ranks = world.size(), me = world.rank();
  if (ranks == 1) return out;
  std::vector<std::pair<std::string, std::string>> flags;
  std::string names;
  for (const Args::Setting& s : args.settings()) {
    if (may_differ(s)) continue;
    flags.emplace_back(s.name, s.value);
    names += s.name + " ";
  }
  // First a fixed-size header, so that ranks of another build or command (whose flag lists, and
  // so the lengths of the reductions below, differ) stop here instead of hanging: the version,
  // the command and the flags compared, against rank 0's.
  const std::vector<std::pair<std::string, std::string>> header = {
      {"the megatron.cpp version", MT_VERSION}, {"the command", args.command()}, {"the flag set", names}};
  const Round program = compare_with_rank0(header, world);
  if (program.any) {
    out.any = true;
    std::string what;
    for (size_t i = 0; i < header.size(); ++i) {
      if (program.count[i] == 0) continue;
      if (me == 0) {
        what += str_cat(what.empty() ? "" : "; ", header[i].first, " differs on ", program.count[i], " of ", ranks,
                        " ranks (rank ", program.first[i], " first)");
      } else if (program.mine_differs[i]) {
        what += str_cat(what.empty() ? "" : "; ", header[i].first, " differs from rank 0's");
      }
    }
    if (me == 0) {
      out.message = str_cat("the ranks do not run the same program: ", what, " (megatron.cpp ", MT_VERSION, " `",
                            args.command(), "` here). Every rank must run the same build and command");
    } else if (!what.empty()) {
      out.message = str_cat("[rank ", me, "] ", what, ": megatron.cpp ", MT_VERSION, " `", args.command(), "` here");
    }
    return out;
  }
  const Round values = compare_with_rank0(flags, world);
  if (!values.any) return out;
  out.any = true;
  // Rank 0 lists every differing flag with its value there; another rank the flags where it
  // differs, with its own values. At most five each.
  std::vector<std::string> lines;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (values.count[i] == 0) continue;
    const auto& [name, value] = flags[i];
    if (me == 0) {
      lines.push_back(str_cat(name, " is ", shown(value), " on rank 0 but not on ", values.count[i], " of ", ranks,
                              " ranks (rank ", values.first[i], " first)"));
    } else if (values.mine_differs[i]) {
      lines.push_back(str_cat(name, " is ", shown(value), " here"));
    }
  }
  std::string mismatches;
  for (size_t i = 0; i < lines.size() && i < 5; ++i) mismatches += (i > 0 ? "; " : "") + lines[i];
  if (lines.size() > 5) mismatches += str_cat("; and ", lines.size() - 5, " more");
  if (me == 0) {
    out.message = str_cat("the ranks were not started with the same flags: ", mismatches,
                          ". Every rank must run the same command (only file and directory flags may differ)");
  } else if (!mismatches.empty()) {
    out.message = str_cat("[rank ", me, "] ", mismatches, ", unlike rank 0");
  }
  return out;
}

bool flags_agree_across_ranks(const Args& args, comm::Communicator& world) {
  const FlagDisagreement d = compare_flags_across_ranks(args, world);
  if (!d.any) return true;
  if (world.rank() == 0) throw_error(d.message);
  comm::let_rank0_report_first(d.message);
  return false;
}

}  // namespace megatron::cli
