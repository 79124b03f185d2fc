// Checkpoint directories: Megatron-LM's layout (docs/megatron-formats.md, "Checkpoints") with our
// files (docs/checkpoints.md). This is the file layer only; train/trainer.cpp decides what goes in.
//
//   DIR/latest_checkpointed_iteration.txt   "100" (no newline) or "release", as Megatron writes it
//   DIR/iter_0000100/                       'iter_{:07d}'
//       model.safetensors                   model weights (model dtype)
//       optimizer.safetensors               fp32 main weights, Adam exp_avg / exp_avg_sq
//                                           (absent with --no-save-optim)
//       metadata.json                       everything else, as the caller's JSON text
//   DIR/release/                            a "release" checkpoint (tracker text "release")
//
// Crash safety (a save killed at any instant, SIGKILL included, leaves a loadable directory
// whose tracker names a complete iteration):
//   1. every file goes into DIR/.tmp_iter_0000100.<pid>/; each file and the directory are fsynced;
//   2. the directory is renamed to iter_0000100. Re-saving an existing iteration swaps the two
//      directories atomically (renameat2 RENAME_EXCHANGE) and deletes the old copy; where the
//      file system cannot exchange, the old copy is first renamed to .old_iter_0000100.<pid>,
//      and a loader that finds iter_0000100 missing uses that copy;
//   3. DIR is fsynced, then the tracker is replaced atomically (temporary file, fsync, rename,
//      fsync DIR);
//   4. with keep_last = K > 0, iter_* directories beyond the K newest are renamed to
//      .del_iter_*.<pid> and deleted (never the one just written).
// Leftovers of killed saves (.tmp_*, .del_*, tracker temporaries, a moved-aside .old_* whose
// iteration is back in place) are removed at the start of the next save.
//
// One process saves into a directory at a time (global rank 0 in a parallel job), and one run:
// a trainer holds SaveDirectoryLock on its --save directory from start-up to exit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/safetensors.h"

namespace megatron::ckpt {

inline constexpr const char* kTrackerFileName = "latest_checkpointed_iteration.txt";
inline constexpr const char* kModelFileName = "model.safetensors";
inline constexpr const char* kOptimizerFileName = "optimizer.safetensors";
inline constexpr const char* kMetadataFileName = "metadata.json";
inline constexpr const char* kReleaseDirName = "release";

// One file of a checkpoint directory: a safetensors file (tensors + string metadata) or a
// text file stored verbatim. Tensor data must stay alive until save_checkpoint_dir returns.
struct CheckpointFile {
  std::string name;  // a plain file name: no '/', not "." or ".."
  bool is_safetensors = false;
  std::vector<TensorToWrite> tensors;
  StringMap metadata;
  std::string text;

  static CheckpointFile safetensors(std::string name, std::vector<TensorToWrite> tensors, StringMap metadata = {});
  static CheckpointFile text_file(std::string name, std::string text);
};

// "iter_0000100" (Megatron's 'iter_{:07d}'); iteration must be >= 0.
std::string iteration_dir_name(int64_t iteration);
// The iteration of an "iter_<digits>" name, or nullopt for anything else.
std::optional<int64_t> parse_iteration_dir_name(std::string_view name);

// Writes `files` into the existing directory `dir` (safetensors files and text files), each
// atomically and fsynced, then fsyncs `dir`.
void write_checkpoint_files(const std::string& dir, const std::vector<CheckpointFile>& files);

// Writes a checkpoint (see the header comment for the steps) and makes it the latest.
// Any list of files is written; a loadable checkpoint needs model.safetensors and
// metadata.json. Throws Error for a negative iteration, a bad or duplicate file name, a
// negative keep_last, or I/O failures (naming the path); the previous checkpoint then stays
// the latest.
void save_checkpoint_dir(const std::string& save_dir, int64_t iteration, const std::vector<CheckpointFile>& files,
                         int64_t keep_last = 0);

// save_checkpoint_dir in two halves, for files written by several processes (the parallel
// save, ckpt/checkpoint.cpp): begin_checkpoint_dir does the clean-up and creates step 1's
// temporary directory, returning its path (temporary_checkpoint_dir with the caller's pid), to
// be filled by the caller and by others; commit_checkpoint_dir does steps 2-4 with it. A
// failure in between leaves only the temporary directory, removed by the next save. One
// process calls both.
std::string begin_checkpoint_dir(const std::string& save_dir, int64_t iteration);
std::string temporary_checkpoint_dir(const std::string& save_dir, int64_t iteration, int64_t pid);
// Removes a temporary directory of begin_checkpoint_dir after a failed save, as far as it can
// (never throws: the caller is reporting the failure; the next save removes what is left).
void abandon_checkpoint_dir(const std::string& tmp) noexcept;
void commit_checkpoint_dir(const std::string& save_dir, int64_t iteration, const std::string& tmp, int64_t keep_last);

inline constexpr const char* kSaveLockFileName = ".megatron_save.lock";

// An advisory lock (flock) on DIR/.megatron_save.lock for the life of the object, so that two
// runs never save into one directory (the second would delete the first's save in progress as
// a leftover, and the checkpoints would silently belong to either run). The file names the
// holder (host, pid, start time) for the error the second run gets, and is removed when the
// holder is done. The kernel drops the lock when the holding process ends, however it ends: a
// crash leaves the file, never a stale lock.
class SaveDirectoryLock {
 public:
  // Creates `dir` when missing. Error "[--save] DIR is in use by another run (host h, pid p,
  // since t): ..." when another process holds the lock, or an I/O error naming the file.
  explicit SaveDirectoryLock(const std::string& dir);
  ~SaveDirectoryLock();
  SaveDirectoryLock(const SaveDirectoryLock&) = delete;
  SaveDirectoryLock& operator=(const SaveDirectoryLock&) = delete;
  // Non-empty when the file system refuses locks (ENOLCK, ENOSYS, ...): the run goes on
  // unprotected, and the caller says so.
  const std::string& unlocked_reason() const { return unlocked_reason_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string unlocked_reason_;
};

// The tracker file as Megatron's read_metadata() reads it: the stripped text is an
// integer > 0, or "release".
struct TrackerInfo {
  std::string path;
  int64_t iteration = 0;  // 0 for release
  bool release = false;
};
// nullopt when DIR/latest_checkpointed_iteration.txt does not exist; Error when it cannot be
// read or holds anything else ("<path>: invalid tracker content 'abc' ...").
std::optional<TrackerInfo> read_tracker(const std::string& dir);

struct LoadedCheckpoint {
  // false: no tracker file. The caller prints Megatron's
  //   WARNING: could not find the metadata file <tracker_path>
  //       will not load any checkpoints and will start from random
  // and starts at iteration 0.
  bool found = false;
  std::string tracker_path;
  int64_t iteration = 0;  // the tracker's (or the requested) iteration; 0 for release
  bool release = false;
  std::string directory;      // the iteration directory that was read
  std::string metadata_json;  // metadata.json verbatim (checked to be well-formed JSON)
  // Every *.safetensors file of the directory, by file name; model.safetensors is always there.
  std::map<std::string, SafetensorsFile> tensor_files;

  const SafetensorsFile& model() const;
  const SafetensorsFile* optimizer() const;  // nullptr when saved with --no-save-optim
};

// Loads the tracker's iteration, or `iteration` when given (then the tracker is not read:
// Megatron's --ckpt-step). One-line Errors naming the file for: a tracker that is not an
// integer or "release", a missing iteration directory, a missing model.safetensors or
// metadata.json, a corrupt safetensors file or metadata.json.
LoadedCheckpoint load_checkpoint_dir(const std::string& load_dir, std::optional<int64_t> iteration = {});

struct CheckpointSummary {
  int64_t iteration = 0;  // 0 for release
  bool release = false;
  std::string path;     // the iteration directory
  int64_t bytes = 0;    // total size of its files
  bool latest = false;  // the tracker names it
};
// The iter_* (and release) directories of DIR, by increasing iteration (release first);
// empty when DIR does not exist. Leftover .tmp_/.old_/.del_ directories are not listed.
std::vector<CheckpointSummary> list_checkpoints(const std::string& dir);

// Re-serialises JSON text with JsonWriter (indent 0: compact); numbers keep their values
// (integers as integers, doubles in the shortest exact form). Error on malformed JSON.
std::string reformat_json(std::string_view text, int indent);

}  // namespace megatron::ckpt
