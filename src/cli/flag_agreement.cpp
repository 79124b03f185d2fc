#include "cli/flag_agreement.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <span>
#include <vector>

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

}  // namespace

FlagDisagreement compare_flags_across_ranks(const Args& args, comm::Communicator& world) {
  FlagDisagreement out;
  const int64_t ranks = world.size(), me = world.rank();
  if (ranks == 1) return out;
  std::vector<Args::Setting> compared;
  for (Args::Setting& s : args.settings()) {
    if (!may_differ(s)) compared.push_back(std::move(s));
  }
  const size_t n = compared.size();
  // First a fixed-size header, so that ranks of another build or command (whose flag lists, and
  // so the lengths of the reductions below, differ) stop here instead of hanging: the version,
  // the command and the number of flags compared, against rank 0's.
  {
    std::string names;
    for (const Args::Setting& s : compared) names += s.name + " ";
    const std::vector<std::pair<std::string, std::string>> header = {
        {"the megatron.cpp version", MT_VERSION}, {"the command", args.command()}, {"the flag set", names}};
    std::vector<double> h(header.size()), h0(header.size(), 0.0);
    for (size_t i = 0; i < header.size(); ++i) h[i] = hash48(header[i].first, header[i].second);
    if (me == 0) h0 = h;
    world.all_reduce_host(std::span<double>(h0), comm::ReduceOp::kSum);
    std::vector<double> count(header.size(), 0.0), first(header.size(), static_cast<double>(ranks));
    for (size_t i = 0; i < header.size(); ++i) {
      if (h[i] != h0[i]) {
        count[i] = 1.0;
        first[i] = static_cast<double>(me);
      }
    }
    world.all_reduce_host(std::span<double>(count), comm::ReduceOp::kSum);
    world.all_reduce_host(std::span<double>(first), comm::ReduceOp::kMin);
    std::string what;
    for (size_t i = 0; i < header.size(); ++i) {
      if (count[i] == 0.0) continue;
      out.any = true;
      if (me == 0) {
        what += str_cat(what.empty() ? "" : "; ", header[i].first, " differs on ", static_cast<int64_t>(count[i]),
                        " of ", ranks, " ranks (rank ", static_cast<int64_t>(first[i]), " first)");
      } else if (h[i] != h0[i]) {
        what += str_cat(what.empty() ? "" : "; ", header[i].first, " differs from rank 0's");
      }
    }
    if (out.any) {
      if (me == 0) {
        out.message = str_cat("the ranks do not run the same program: ", what, " (megatron.cpp ", MT_VERSION, " `",
                              args.command(), "` here). Every rank must run the same build and command");
      } else if (!what.empty()) {
        out.message = str_cat("[rank ", me, "] ", what, ": megatron.cpp ", MT_VERSION, " `", args.command(), "` here");
      }
      return out;
    }
  }
  std::vector<double> mine(n), rank0(n, 0.0);
  for (size_t i = 0; i < n; ++i) mine[i] = hash48(compared[i].name, compared[i].value);
  if (me == 0) rank0 = mine;
  world.all_reduce_host(std::span<double>(rank0), comm::ReduceOp::kSum);
  // Per flag: how many ranks differ from rank 0, and the first of them.
  std::vector<double> count(n, 0.0), first(n, static_cast<double>(ranks));
  for (size_t i = 0; i < n; ++i) {
    if (mine[i] != rank0[i]) {
      count[i] = 1.0;
      first[i] = static_cast<double>(me);
    }
  }
  world.all_reduce_host(std::span<double>(count), comm::ReduceOp::kSum);
  world.all_reduce_host(std::span<double>(first), comm::ReduceOp::kMin);
  // Rank 0 lists every differing flag with its value there; another rank the flags where it
  // differs, with its own values. At most five each.
  std::vector<std::string> lines;
  for (size_t i = 0; i < n; ++i) {
    if (count[i] == 0.0) continue;
    out.any = true;
    const Args::Setting& s = compared[i];
    if (me == 0) {
      lines.push_back(str_cat(s.name, " is ", shown(s.value), " on rank 0 but not on ", static_cast<int64_t>(count[i]),
                              " of ", ranks, " ranks (rank ", static_cast<int64_t>(first[i]), " first)"));
    } else if (mine[i] != rank0[i]) {
      lines.push_back(str_cat(s.name, " is ", shown(s.value), " here"));
    }
  }
  std::string mismatches;
  for (size_t i = 0; i < lines.size() && i < 5; ++i) mismatches += (i > 0 ? "; " : "") + lines[i];
  if (lines.size() > 5) mismatches += str_cat("; and ", lines.size() - 5, " more");
  if (!out.any) return out;
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
  // One write, so that the line does not interleave with rank 0's on a shared stderr.
  if (!d.message.empty()) std::fputs(str_cat("error: ", d.message, "\n").c_str(), stderr);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  return false;
}

}  // namespace megatron::cli
