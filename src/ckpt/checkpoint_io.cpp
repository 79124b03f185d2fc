#include "ckpt/checkpoint_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "core/host_name.h"
#include "core/json_writer.h"

namespace megatron::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTmpPrefix = ".tmp_";  // .tmp_iter_0000100.<pid>: a save in progress
constexpr std::string_view kOldPrefix = ".old_";  // .old_iter_0000100.<pid>: the moved-aside copy of a re-save
constexpr std::string_view kDelPrefix = ".del_";  // .del_iter_0000100.<pid>: being deleted (keep_last)

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string join(const std::string& dir, std::string_view name) { return (fs::path(dir) / name).string(); }

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw_error(path, ": cannot remove: ", ec.message());
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The bytes of a small regular file (the tracker, metadata.json); a FIFO in its place is
// refused, not waited on (open_regular_file).
std::string read_text_file(const std::string& path) {
  int64_t size = 0;
  const int fd = open_regular_file(path, &size);
  constexpr int64_t kLimit = int64_t{64} << 20;  // far above any tracker or metadata.json
  std::string text;
  std::string error;
  if (size > kLimit) {
    error = str_cat(path, ": ", size, " bytes, more than a checkpoint's text file holds");
  } else {
    text.resize(static_cast<size_t>(size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = str_cat(path, ": read failed", n < 0 ? ": " + errno_string(errno) : std::string(" (the file shrank)"));
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!error.empty()) throw Error(error);
  return text;
}

// The suffix after "<prefix>" of a leftover entry name: ".old_iter_0000100.123" -> "iter_0000100".
std::string leftover_target(std::string_view name, std::string_view prefix) {
  std::string_view rest = name.substr(prefix.size());
  const size_t dot = rest.rfind('.');
  return std::string(dot == std::string_view::npos ? rest : rest.substr(0, dot));
}

// Removes what killed saves left behind (see the header comment).
void clean_leftovers(const std::string& save_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(save_dir, ec))
    names.push_back(e.path().filename().string());
  if (ec) throw_error(save_dir, ": cannot list: ", ec.message());
  const std::string tracker_tmp = std::string(kTrackerFileName) + ".tmp-";
  bool changed = false;
  for (const std::string& name : names) {
    const std::string path = join(save_dir, name);
    if (starts_with(name, kTmpPrefix) || starts_with(name, kDelPrefix) || starts_with(name, tracker_tmp)) {
      remove_tree(path);
      changed = true;
    } else if (starts_with(name, kOldPrefix)) {
      const std::string target = join(save_dir, leftover_target(name, kOldPrefix));
      if (!path_exists(target)) {
        rename_file(path, target);  // a re-save died between its two renames: put the copy back
      } else {
        remove_tree(path);
      }
      changed = true;
    }
  }
  if (changed) fsync_directory(save_dir);
}

// Moves `tmp` to `final_dir`, replacing an existing `final_dir` without a moment where
// neither exists under a name the loader reads.
void install_directory(const std::string& save_dir, const std::string& tmp, const std::string& final_dir,
                       const std::string& final_name) {
  if (!path_exists(final_dir)) {
    rename_file(tmp, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_directory(save_dir);
    remove_tree(tmp);  // now holds the old copy
    return;
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != ENOTSUP && err != EOPNOTSUPP) {
    throw_error(final_dir, ": cannot exchange with ", tmp, ": ", errno_string(err));
  }
  const std::string old = join(save_dir, str_cat(kOldPrefix, final_name, ".", ::getpid()));
  rename_file(final_dir, old);
  rename_file(tmp, final_dir);
  fsync_directory(save_dir);
  remove_tree(old);
}

void validate_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    throw_error("checkpoint: invalid file name '", name, "' (a plain file name is expected)");
  }
}

int64_t directory_bytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) {
      const auto n = it->file_size(ec2);
      if (!ec2) total += static_cast<int64_t>(n);
    }
  }
  return total;
}

void check_json(const std::string& path, const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS) {
    throw_error(path, ": not valid JSON: ", simdjson::error_message(err));
  }
}

void write_element(JsonWriter& w, simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT:
      w.begin_object();
      for (simdjson::dom::key_value_pair kv : simdjson::dom::object(e)) {
        w.key(kv.key);
        write_element(w, kv.value);
      }
      w.end_object();
      break;
    case simdjson::dom::element_type::ARRAY:
      w.begin_array();
      for (simdjson::dom::element v : simdjson::dom::array(e)) write_element(w, v);
      w.end_array();
      break;
    case simdjson::dom::element_type::INT64:
      w.value(int64_t(e));
      break;
    case simdjson::dom::element_type::UINT64:
      w.value(uint64_t(e));
      break;
    case simdjson::dom::element_type::DOUBLE:
      w.value(double(e));
      break;
    case simdjson::dom::element_type::STRING:
      w.value(std::string_view(e));
      break;
    case simdjson::dom::element_type::BOOL:
      w.value(bool(e));
      break;
    case simdjson::dom::element_type::NULL_VALUE:
      w.null();
      break;
  }
}

}  // namespace

CheckpointFile CheckpointFile::safetensors(std::string name, std::vector<TensorToWrite> tensors, StringMap metadata) {
  CheckpointFile f;
  f.name = std::move(name);
  f.is_safetensors = true;
  f.tensors = std::move(tensors);
  f.metadata = std::move(metadata);
  return f;
}

CheckpointFile CheckpointFile::text_file(std::string name, std::string text) {
  CheckpointFile f;
  f.name = std::move(name);
  f.text = std::move(text);
  return f;
}

std::string iteration_dir_name(int64_t iteration) {
  MT_CHECK(iteration >= 0) << "iteration " << iteration;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::optional<int64_t> parse_iteration_dir_name(std::string_view name) {
  if (!starts_with(name, "iter_") || name.size() < 5 + 7 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (iteration_dir_name(v) != name) return std::nullopt;  // the canonical spelling only
  return v;
}

void write_checkpoint_files(const std::string& dir, const std::vector<CheckpointFile>& files) {
  for (const CheckpointFile& f : files) {
    const std::string path = join(dir, f.name);
    if (f.is_safetensors) {
      write_safetensors(path, f.tensors, f.metadata);
    } else {
      AtomicFile out(path);
      out.write(f.text);
      out.commit();
    }
  }
  fsync_directory(dir);
}

std::string temporary_checkpoint_dir(const std::string& save_dir, int64_t iteration, int64_t pid) {
  return join(save_dir, str_cat(kTmpPrefix, iteration_dir_name(iteration), ".", pid));
}

std::string begin_checkpoint_dir(const std::string& save_dir, int64_t iteration) {
  if (iteration <= 0) throw_error(save_dir, ": cannot save iteration ", iteration, " (iterations start at 1)");
  make_directories(save_dir);
  clean_leftovers(save_dir);
  const std::string tmp = temporary_checkpoint_dir(save_dir, iteration, ::getpid());
  make_directories(tmp);
  return tmp;
}

void abandon_checkpoint_dir(const std::string& tmp) noexcept {
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

void commit_checkpoint_dir(const std::string& save_dir, int64_t iteration, const std::string& tmp, int64_t keep_last) {
  if (keep_last < 0) throw_error(save_dir, ": keep_last must be >= 0, got ", keep_last);
  const std::string dir_name = iteration_dir_name(iteration);
  const std::string final_dir = join(save_dir, dir_name);
  fsync_directory(tmp);
  fsync_directory(save_dir);  // the temporary directory's entry, before it is renamed
  install_directory(save_dir, tmp, final_dir, dir_name);
  fsync_directory(save_dir);

  {
    AtomicFile tracker(join(save_dir, kTrackerFileName));
    tracker.write(std::to_string(iteration));
    tracker.commit();
  }
  fsync_directory(save_dir);

  if (keep_last > 0) {
    std::vector<int64_t> present;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(save_dir, ec)) {
      if (!e.is_directory(ec)) continue;
      if (std::optional<int64_t> it = parse_iteration_dir_name(e.path().filename().string())) present.push_back(*it);
    }
    std::sort(present.rbegin(), present.rend());
    for (size_t i = static_cast<size_t>(keep_last); i < present.size(); ++i) {
      if (present[i] == iteration) continue;
      const std::string name = iteration_dir_name(present[i]);
      const std::string doomed = join(save_dir, str_cat(kDelPrefix, name, ".", ::getpid()));
      rename_file(join(save_dir, name), doomed);
      remove_tree(doomed);
    }
  }
}

void save_checkpoint_dir(const std::string& save_dir, int64_t iteration, const std::vector<CheckpointFile>& files,
                         int64_t keep_last) {
  if (keep_last < 0) throw_error(save_dir, ": keep_last must be >= 0, got ", keep_last);
  std::set<std::string> names;
  for (const CheckpointFile& f : files) {
    validate_file_name(f.name);
    if (!names.insert(f.name).second) throw_error("checkpoint: file '", f.name, "' given twice");
  }
  const std::string tmp = begin_checkpoint_dir(save_dir, iteration);
  try {
    write_checkpoint_files(tmp, files);
    commit_checkpoint_dir(save_dir, iteration, tmp, keep_last);
  } catch (const Error&) {
    abandon_checkpoint_dir(tmp);  // a full disk, say: leave no temporary directory behind
    throw;
  }
}

SaveDirectoryLock::SaveDirectoryLock(const std::string& dir) : path_(join(dir, kSaveLockFileName)) {
  make_directories(dir);
  // The holder removes the file when it is done; a run that opened it just before may then
  // hold a lock on a removed file, so the lock counts only if the name still leads to the
  // locked file (else: open the new one and try again).
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) throw_error("[--save] ", path_, ": cannot open the lock file: ", errno_string(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder;
      char buf[256];
      const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
      if (n > 0) holder.assign(buf, static_cast<size_t>(n));
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      for (char& c : holder) {
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = ' ';
      }
      ::close(fd_);
      fd_ = -1;
      if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
        // File systems without flock (Lustre mounted without -o flock, some NFS set-ups): a
        // run must still be possible there.
        unlocked_reason_ = str_cat(path_, ": the file system refuses locks (", errno_string(err), ")");
        return;
      }
      if (err != EWOULDBLOCK) throw_error("[--save] ", path_, ": cannot lock: ", errno_string(err));
      throw_error("[--save] ", dir, " is in use by another run (", holder.empty() ? "holder unknown" : holder,
                  "; lock ", path_, "): two runs cannot save into one directory, give this one its own --save");
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      break;
    }
    ::close(fd_);
    fd_ = -1;
    if (attempt == 100) throw_error("[--save] ", path_, ": the lock file keeps being replaced");
  }
  char when[32] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string holder = str_cat("host ", host_name("?"), ", pid ", ::getpid(), ", since ", when, "\n");
  // Best effort (a full disk must not stop a run that holds the lock): the lock, not the
  // text, protects the directory.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, holder.data(), holder.size(), 0);
  }
}

SaveDirectoryLock::~SaveDirectoryLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: no other run holds a lock on this name yet
  ::close(fd_);             // drops the flock
}

std::optional<TrackerInfo> read_tracker(const std::string& dir) {
  TrackerInfo info;
  info.path = join(dir, kTrackerFileName);
  if (!path_exists(info.path)) return std::nullopt;
  const std::string raw = read_text_file(info.path);
  // Python's str.strip(): ASCII whitespace.
  const char* ws = " \t\n\r\v\f";
  const size_t b = raw.find_first_not_of(ws);
  const std::string text = b == std::string::npos ? "" : raw.substr(b, raw.find_last_not_of(ws) - b + 1);
  if (text == "release") {
    info.release = true;
    return info;
  }
  std::string shown = text.substr(0, 40);
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  const auto invalid = [&]() {
    throw_error(info.path, ": invalid tracker content '", shown, text.size() > 40 ? "..." : "",
                "' (expected an iteration number > 0 or 'release')");
  };
  size_t i = text.size() > 0 && text[0] == '+' ? 1 : 0;
  if (i == text.size()) invalid();
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') invalid();
    if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) invalid();
    v = v * 10 + (c - '0');
  }
  if (v <= 0) invalid();
  info.iteration = v;
  return info;
}

const SafetensorsFile& LoadedCheckpoint::model() const {
  auto it = tensor_files.find(kModelFileName);
  if (it == tensor_files.end()) throw_error(join(directory, kModelFileName), ": no model in this checkpoint");
  return it->second;
}

const SafetensorsFile* LoadedCheckpoint::optimizer() const {
  auto it = tensor_files.find(kOptimizerFileName);
  return it == tensor_files.end() ? nullptr : &it->second;
}

LoadedCheckpoint load_checkpoint_dir(const std::string& load_dir, std::optional<int64_t> iteration) {
  LoadedCheckpoint ckpt;
  ckpt.tracker_path = join(load_dir, kTrackerFileName);
  std::string source;
  if (iteration) {
    if (*iteration <= 0) throw_error(load_dir, ": cannot load iteration ", *iteration, " (iterations start at 1)");
    ckpt.iteration = *iteration;
    source = "requested";
  } else {
    const std::optional<TrackerInfo> tracker = read_tracker(load_dir);
    if (!tracker) return ckpt;
    ckpt.iteration = tracker->iteration;
    ckpt.release = tracker->release;
    source = str_cat("named by ", ckpt.tracker_path);
  }
  ckpt.found = true;
  const std::string dir_name = ckpt.release ? std::string(kReleaseDirName) : iteration_dir_name(ckpt.iteration);
  ckpt.directory = join(load_dir, dir_name);
  if (!is_directory(ckpt.directory)) {
    // A re-save killed between its two renames (no RENAME_EXCHANGE): the complete previous
    // copy is under .old_<name>.<pid>.
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(load_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (starts_with(name, kOldPrefix) && leftover_target(name, kOldPrefix) == dir_name && e.is_directory(ec)) {
        ckpt.directory = e.path().string();
        break;
      }
    }
    if (!is_directory(ckpt.directory)) {
      throw_error(join(load_dir, dir_name), ": checkpoint directory is missing (",
                  ckpt.release ? "release checkpoint" : str_cat("iteration ", ckpt.iteration), " ", source, ")");
    }
  }

  const std::string metadata_path = join(ckpt.directory, kMetadataFileName);
  if (!path_exists(metadata_path)) throw_error(metadata_path, ": missing from the checkpoint");
  ckpt.metadata_json = read_text_file(metadata_path);
  check_json(metadata_path, ckpt.metadata_json);

  const std::string model_path = join(ckpt.directory, kModelFileName);
  if (!path_exists(model_path)) throw_error(model_path, ": missing from the checkpoint");
  std::vector<std::string> tensor_names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(ckpt.directory, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors" && e.is_regular_file(ec)) {
      tensor_names.push_back(name);
    }
  }
  if (ec) throw_error(ckpt.directory, ": cannot list: ", ec.message());
  for (const std::string& name : tensor_names)
    ckpt.tensor_files.emplace(name, SafetensorsFile(join(ckpt.directory, name)));
  return ckpt;
}

std::vector<CheckpointSummary> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointSummary> out;
  std::error_code ec;
  if (!is_directory(dir)) return out;
  std::optional<TrackerInfo> tracker;
  try {
    tracker = read_tracker(dir);
  } catch (const Error&) {
    tracker.reset();  // an unreadable tracker names nothing; the caller may read_tracker() to report it
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string name = e.path().filename().string();
    CheckpointSummary s;
    if (name == kReleaseDirName) {
      s.release = true;
    } else if (std::optional<int64_t> it = parse_iteration_dir_name(name)) {
      s.iteration = *it;
    } else {
      continue;
    }
    s.path = e.path().string();
    s.bytes = directory_bytes(s.path);
    s.latest = tracker && tracker->release == s.release && (s.release || tracker->iteration == s.iteration);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointSummary& a, const CheckpointSummary& b) {
    return a.release != b.release ? a.release : a.iteration < b.iteration;
  });
  return out;
}

std::string reformat_json(std::string_view text, int indent) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text.data(), text.size());
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS) {
    throw_error("not valid JSON: ", simdjson::error_message(err));
  }
  JsonWriter w(indent);
  write_element(w, doc);
  return w.take();
}

}  // namespace megatron::ckpt
