#include "train/save_schedule.h"

#include <charconv>

#include "core/error.h"

namespace megatron::train {
namespace {

// A positive decimal integer that fits int64, nothing else (no sign, spaces or suffix).
int64_t positive_integer(const std::string& word, const std::string& text, const char* flag, const char* what) {
  int64_t v = 0;
  const char* end = word.data() + word.size();
  const auto [ptr, ec] = std::from_chars(word.data(), end, v);
  if (word.empty() || word[0] == '+' || word[0] == '-' || ec != std::errc() || ptr != end || v < 1) {
    throw_error("[", flag, "] '", text, "': ", what, " '", word,
                "' is not a positive integer (expected N or N1:U1,N2:U2,...,N)");
  }
  return v;
}

}  // namespace

SaveSchedule::SaveSchedule(int64_t every) : every_after_(every) { MT_CHECK(every >= 1) << every; }

SaveSchedule::SaveSchedule(std::vector<Segment> segments, int64_t every_after)
    : segments_(std::move(segments)), every_after_(every_after) {
  MT_CHECK(every_after >= 1) << every_after;
  for (size_t k = 0; k < segments_.size(); ++k) {
    MT_CHECK(segments_[k].every >= 1 && segments_[k].until >= 1 &&
             (k == 0 || segments_[k].until > segments_[k - 1].until))
        << "segment " << k;
  }
}

SaveSchedule SaveSchedule::parse(const std::string& text, const char* flag) {
  std::vector<std::string> entries;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    entries.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<Segment> segments;
  for (size_t k = 0; k + 1 < entries.size(); ++k) {
    const std::string& e = entries[k];
    const size_t colon = e.find(':');
    if (colon == std::string::npos) {
      throw_error("[", flag, "] '", text, "': entry '", e, "' is not N:U (every entry but the last is N:U)");
    }
    Segment s;
    s.every = positive_integer(e.substr(0, colon), text, flag, "interval");
    s.until = positive_integer(e.substr(colon + 1), text, flag, "last iteration");
    if (!segments.empty() && s.until <= segments.back().until) {
      throw_error("[", flag, "] '", text, "': the last iterations must increase, got ", segments.back().until, " then ",
                  s.until);
    }
    segments.push_back(s);
  }
  const std::string& last = entries.back();
  if (last.find(':') != std::string::npos) {
    throw_error("[", flag, "] '", text, "': the last entry '", last,
                "' must be a plain interval N (the interval after the last N:U)");
  }
  return SaveSchedule(std::move(segments), positive_integer(last, text, flag, "interval"));
}

int64_t SaveSchedule::interval_at(int64_t iteration) const {
  for (const Segment& s : segments_) {
    if (iteration <= s.until) return s.every;
  }
  return every_after_;
}

bool SaveSchedule::due(int64_t iteration) const { return iteration >= 1 && iteration % interval_at(iteration) == 0; }

std::string SaveSchedule::to_string() const {
  std::string out;
  for (const Segment& s : segments_) out += str_cat(s.every, ":", s.until, ",");
  return out + std::to_string(every_after_);
}

}  // namespace megatron::train
