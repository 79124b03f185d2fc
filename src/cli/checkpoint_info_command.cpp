// megatron checkpoint-info: what a checkpoint directory holds (ckpt/checkpoint_io.h).
//
//   megatron checkpoint-info DIR [--iteration N]
//       the iterations present with their sizes, the tracker's iteration, then for the
//       latest checkpoint (or iteration N) every tensor of every safetensors file
//       (name, dtype, shape, global shape, layout) and metadata.json pretty-printed.
// A corrupt file, and anything train --load, generate or convert would refuse
// (ckpt/checkpoint_contents.h), is an error (exit 1) naming the file and what is wrong, printed
// after what could be shown.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>

#include "ckpt/checkpoint_contents.h"
#include "ckpt/checkpoint_io.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using ckpt::CheckpointSummary;
using ckpt::LoadedCheckpoint;
using ckpt::SafetensorsFile;
using ckpt::SafetensorsTensor;

void print_tensors(std::ostream& out, const std::string& file_name, const SafetensorsFile& f) {
  int64_t elements = 0;
  for (const SafetensorsTensor& t : f.tensors()) elements += t.numel;
  out << "  " << file_name << ": " << f.size_bytes() << " bytes, " << f.tensors().size() << " tensors, " << elements
      << " elements\n";
  size_t name_width = 4;
  for (const SafetensorsTensor& t : f.tensors()) name_width = std::max(name_width, t.name.size());
  char line[256];
  std::snprintf(line, sizeof(line), "    %-*s  %-5s  %-18s  %-18s  %s\n", static_cast<int>(name_width), "name", "dtype",
                "shape", "global shape", "layout");
  out << line;
  for (const SafetensorsTensor& t : f.tensors()) {
    const std::string dtype(ckpt::safetensors_dtype_name(t.dtype));
    const std::string shape = ckpt::shape_to_string(t.shape);
    const std::string global = ckpt::shape_to_string(t.global_shape);
    out << "    " << t.name << std::string(name_width - t.name.size(), ' ') << "  ";
    std::snprintf(line, sizeof(line), "%-5s  %-18s  %-18s  ", dtype.c_str(), shape.c_str(), global.c_str());
    out << line << (t.layout.empty() ? "-" : t.layout) << "\n";
  }
  const std::string suffix_a = ".global_shape", suffix_b = ".layout";
  bool header = false;
  for (const auto& [key, value] : f.metadata()) {
    auto ends = [&](const std::string& s) {
      return key.size() > s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0 &&
             f.find(std::string_view(key).substr(0, key.size() - s.size())) != nullptr;
    };
    if (ends(suffix_a) || ends(suffix_b)) continue;
    if (!header) out << "    metadata:\n";
    header = true;
    out << "      " << key << " = " << value << "\n";
  }
}

}  // namespace

int run_checkpoint_info(const CommandArgs& argv) {
  Args a("checkpoint-info", "iterations, sizes, tensors and metadata of a checkpoint directory");
  a.positional("dir", "checkpoint directory (--save / --load)")
      .option("--iteration", "N", "show this iteration instead of the tracker's latest");
  if (!a.parse(argv)) {
    std::cout << a.usage();
    return 0;
  }
  const std::string dir = a.get_string("dir");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw_error(dir, ": not a checkpoint directory (no such directory)");

  std::ostream& out = std::cout;
  out << "checkpoint directory " << dir << "\n";
  std::optional<ckpt::TrackerInfo> tracker;
  std::string tracker_problem;
  try {
    tracker = ckpt::read_tracker(dir);
  } catch (const Error& e) {
    tracker_problem = e.what();
  }
  out << "  tracker: ";
  if (!tracker_problem.empty()) {
    out << "INVALID: " << tracker_problem << "\n";
  } else if (!tracker) {
    out << "missing (" << dir << "/" << ckpt::kTrackerFileName << "): Megatron would start from random\n";
  } else if (tracker->release) {
    out << "release\n";
  } else {
    out << "iteration " << tracker->iteration << "\n";
  }

  const std::vector<CheckpointSummary> list = ckpt::list_checkpoints(dir);
  out << "  checkpoints: " << list.size() << "\n";
  for (const CheckpointSummary& s : list) {
    char line[160];
    std::snprintf(line, sizeof(line), "    %-14s %14lld bytes%s\n",
                  s.release ? "release" : ckpt::iteration_dir_name(s.iteration).c_str(),
                  static_cast<long long>(s.bytes), s.latest ? "  (latest)" : "");
    out << line;
  }

  std::optional<int64_t> iteration;
  if (a.given("--iteration")) {
    iteration = a.get_int("--iteration");
    if (*iteration <= 0) throw_error("[--iteration] must be >= 1, got ", *iteration);
  } else if (!tracker && !list.empty() && !list.back().release) {
    iteration = list.back().iteration;  // no usable tracker: show the newest directory
  }
  if (!iteration && !tracker) {
    if (!tracker_problem.empty()) throw_error(tracker_problem);  // every loader refuses it
    out << "no checkpoint to show\n";
    return 0;
  }
  const LoadedCheckpoint ckpt = ckpt::load_checkpoint_dir(dir, iteration);
  out << "\n"
      << (ckpt.release ? std::string("release") : "iteration " + std::to_string(ckpt.iteration)) << ": "
      << ckpt.directory << "\n";
  for (const auto& [name, file] : ckpt.tensor_files) print_tensors(out, name, file);
  if (ckpt.optimizer() == nullptr) out << "  (no " << ckpt::kOptimizerFileName << ": saved without optimizer state)\n";
  out << "  " << ckpt::kMetadataFileName << ":\n" << ckpt::reformat_json(ckpt.metadata_json, 2) << "\n";
  // What train --load, generate and convert check before using it (the values' finiteness
  // aside, which needs every byte read): a checkpoint they refuse is an error here too.
  ckpt::read_checkpoint_model(ckpt);
  ckpt::read_checkpoint_state(ckpt);
  if (!tracker_problem.empty()) throw_error(tracker_problem);
  out << "  checked: the metadata's values are in range and the tensors are the model's\n";
  return 0;
}

}  // namespace megatron::cli
