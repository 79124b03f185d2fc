// --save-interval as a schedule: "N1:U1,N2:U2,...,N" saves at the multiples of N1 up to
// iteration U1, then at the multiples of N2 up to U2, ..., then at the multiples of N; a plain
// "N" is Megatron's --save-interval N (every iteration that is a multiple of N).
// Worked example: "10:100,18:1000,1500" saves at 10, 20, ..., 100, then 108, 126, ..., 990
// (multiples of 18 in (100, 1000]), then 1500, 3000, ... (multiples of 1500 after 1000).
// Megatron-LM itself takes a plain integer only; the schedule is this program's extension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::train {

class SaveSchedule {
 public:
  struct Segment {
    int64_t every = 0;  // N_k >= 1
    int64_t until = 0;  // U_k: the last iteration of this segment (increasing, >= 1)
  };

  // Every `every` iterations (a plain --save-interval).
  explicit SaveSchedule(int64_t every);
  SaveSchedule(std::vector<Segment> segments, int64_t every_after);

  // Parses the flag's text; throws megatron::Error, one line naming `flag`, for anything but
  // "N" or "N1:U1,...,N" with positive integers and strictly increasing U_k.
  static SaveSchedule parse(const std::string& text, const char* flag = "--save-interval");

  // Whether a checkpoint is due after `iteration` (>= 1) completed iterations.
  bool due(int64_t iteration) const;
  // The interval in force at `iteration`: N_k of the segment holding it, else the last N.
  int64_t interval_at(int64_t iteration) const;

  const std::vector<Segment>& segments() const { return segments_; }
  int64_t every_after() const { return every_after_; }
  bool plain() const { return segments_.empty(); }
  // The flag's text in canonical form ("10:100,18:1000,1500", or "1500").
  std::string to_string() const;

  bool operator==(const SaveSchedule&) const = default;
  // A plain schedule compares with its integer (tests and checks of the plain flag).
  bool operator==(int64_t every) const { return plain() && every_after_ == every; }

 private:
  std::vector<Segment> segments_;
  int64_t every_after_;
};

}  // namespace megatron::train
