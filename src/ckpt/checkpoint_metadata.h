// metadata.json of a checkpoint (ckpt/checkpoint.h lists its members), as the converters
// read and rewrite it: typed reads of "args" and "layout" with one-line errors naming the
// file, and a copy with some members of "args" / "layout" replaced, everything else verbatim
// in its original order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace megatron::ckpt {

class CheckpointMetadata {
 public:
  // `path` names the file in errors; `json` is its text (Error when not a JSON object).
  CheckpointMetadata(std::string path, std::string json);

  const std::string& path() const { return path_; }
  const std::string& json() const { return json_; }

  // args[key]; Error "<path>: args.<key> is not an integer" when absent or of another type.
  int64_t arg_int(const std::string& key) const;
  double arg_double(const std::string& key) const;  // integers are accepted too
  bool arg_bool(const std::string& key) const;
  std::string arg_string(const std::string& key) const;
  std::optional<std::string> optional_arg_string(const std::string& key) const;
  std::optional<bool> optional_arg_bool(const std::string& key) const;
  std::optional<int64_t> optional_arg_int(const std::string& key) const;
  // layout[key], nullopt when absent.
  std::optional<int64_t> layout_int(const std::string& key) const;
  // A top-level integer / string member, nullopt when absent.
  std::optional<int64_t> top_int(const std::string& key) const;
  std::optional<std::string> top_string(const std::string& key) const;

  // The document (indent 2) with args[k] and layout[k] set to the given JSON value texts
  // (replacing members in place, adding missing ones at the end of their object).
  std::string rewritten(const std::map<std::string, std::string>& args,
                        const std::map<std::string, std::string>& layout) const;

 private:
  std::string path_;
  std::string json_;
};

}  // namespace megatron::ckpt
