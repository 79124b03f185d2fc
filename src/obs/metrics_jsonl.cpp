#include "obs/metrics_jsonl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace megatron::obs {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is not one
// (overlong forms, surrogates and code points above U+10FFFF are rejected).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return n;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {  // not UTF-8: a reader would reject the whole line, so substitute U+FFFD
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out.push_back('"');
}

void append_json_double(std::string& out, double x) {
  if (!std::isfinite(x)) {
    out += "null";
    return;
  }
  char buf[64];
  // Without a precision, to_chars gives the shortest text that parses back to the same double.
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  std::string_view text(buf, static_cast<size_t>(end - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";  // 640 -> 640.0: stays a float
}

std::string metrics_json_object(const MetricFields& fields) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : fields) {
    if (!first) out += ", ";
    first = false;
    append_json_string(out, key);
    out += ": ";
    std::visit(
        [&out](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::nullptr_t>) {
            out += "null";
          } else if constexpr (std::is_same_v<T, bool>) {
            out += v ? "true" : "false";
          } else if constexpr (std::is_same_v<T, int64_t>) {
            out += std::to_string(v);
          } else if constexpr (std::is_same_v<T, double>) {
            append_json_double(out, v);
          } else {
            append_json_string(out, v);
          }
        },
        value.variant());
  }
  out += "}";
  return out;
}

MetricsJsonlWriter::MetricsJsonlWriter(const std::string& path) : path_(path) {
  // As any output file: its directory must exist (a typo there must not grow a new tree).
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    const bool exists = std::filesystem::exists(parent, ec);
    throw_error("[--log-jsonl] ", parent.string(), exists ? " is not a directory" : " does not exist",
                " (the directory of ", path, ")");
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_error("[--log-jsonl] cannot open ", path, ": ", errno_string(errno));
}

MetricsJsonlWriter::~MetricsJsonlWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsJsonlWriter::write(const MetricFields& fields) {
  const std::string line = metrics_json_object(fields) + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {  // one write() in practice; the loop covers signals and short writes
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_error("[--log-jsonl] cannot write ", path_, ": ", errno_string(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace megatron::obs
