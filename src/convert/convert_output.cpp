#include "convert/convert_output.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/file.h"

namespace megatron::convert {

namespace fs = std::filesystem;

void write_new_directory(const std::string& dir, const std::string& flag,
                         const std::function<void(const std::string& tmp)>& fill) {
  if (dir.empty()) throw_error("[", flag, "] expected a directory path, got an empty string");
  std::error_code ec;
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename() && target.has_parent_path()) target = target.parent_path();  // "out/" -> "out"
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) throw_error("[", flag, "] ", dir, " exists and is not a directory");
    if (!fs::is_empty(target, ec)) {
      throw_error("[", flag, "] ", dir, " already exists and is not empty (convert writes a new directory)");
    }
  }
  const fs::path name = target.filename();
  if (name.empty() || name == "." || name == "..")
    throw_error("[", flag, "] ", dir, " cannot be created (a new directory is expected)");
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  make_directories(parent.string());
  const std::string tmp = (parent / str_cat(".", name.string(), ".convert_tmp.", ::getpid())).string();
  fs::remove_all(tmp, ec);
  make_directories(tmp);
  try {
    fill(tmp);
    fsync_directory(tmp);
    rename_file(tmp, target.string());
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

void write_new_checkpoint(const std::string& dir, const std::string& flag, int64_t iteration, bool release,
                          const std::vector<ckpt::CheckpointFile>& files) {
  MT_CHECK(release || iteration > 0) << "iteration " << iteration;
  write_new_directory(dir, flag, [&](const std::string& tmp) {
    const std::string sub =
        (fs::path(tmp) / (release ? std::string(ckpt::kReleaseDirName) : ckpt::iteration_dir_name(iteration))).string();
    make_directories(sub);
    ckpt::write_checkpoint_files(sub, files);
    AtomicFile tracker((fs::path(tmp) / ckpt::kTrackerFileName).string());
    tracker.write(release ? std::string(ckpt::kReleaseDirName) : std::to_string(iteration));
    tracker.commit();
  });
}

}  // namespace megatron::convert
