#include "train/save_schedule.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "support/error_of.h"

namespace megatron::train {
namespace {

using test::error_of;

std::vector<int64_t> saves_up_to(const SaveSchedule& s, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= last; ++i) {
    if (s.due(i)) out.push_back(i);
  }
  return out;
}

TEST(SaveSchedule, APlainIntervalIsMegatronsModulo) {
  const SaveSchedule s = SaveSchedule::parse("250");
  EXPECT_TRUE(s.plain());
  EXPECT_EQ(s, 250);
  EXPECT_EQ(saves_up_to(s, 1000), (std::vector<int64_t>{250, 500, 750, 1000}));
  EXPECT_EQ(s.to_string(), "250");
  EXPECT_EQ(saves_up_to(SaveSchedule(1), 3), (std::vector<int64_t>{1, 2, 3}));
}

// "10:100,18:1000,1500": multiples of 10 in [1, 100], of 18 in (100, 1000], of 1500 after
// (listed by hand).
TEST(SaveSchedule, SegmentsSaveAtTheMultiplesOfTheirInterval) {
  const SaveSchedule s = SaveSchedule::parse("10:100,18:1000,1500");
  EXPECT_FALSE(s.plain());
  ASSERT_EQ(s.segments().size(), 2u);
  EXPECT_EQ(s.segments()[0].every, 10);
  EXPECT_EQ(s.segments()[0].until, 100);
  EXPECT_EQ(s.segments()[1].every, 18);
  EXPECT_EQ(s.segments()[1].until, 1000);
  EXPECT_EQ(s.every_after(), 1500);
  const std::vector<int64_t> got = saves_up_to(s, 4500);
  std::vector<int64_t> want = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  for (int64_t i = 108; i <= 990; i += 18) want.push_back(i);
  for (int64_t i : {1500, 3000, 4500}) want.push_back(i);
  EXPECT_EQ(got, want);
  EXPECT_EQ(want.size(), 10u + 50u + 3u);
  EXPECT_FALSE(s.due(1000));  // 1000 is no multiple of 18
  EXPECT_FALSE(s.due(1008));  // a multiple of 18, but after 1000 the interval is 1500
  EXPECT_EQ(s.interval_at(100), 10);
  EXPECT_EQ(s.interval_at(101), 18);
  EXPECT_EQ(s.interval_at(1001), 1500);
  EXPECT_EQ(s.to_string(), "10:100,18:1000,1500");
  EXPECT_EQ(saves_up_to(SaveSchedule::parse("1:3,5"), 12), (std::vector<int64_t>{1, 2, 3, 5, 10}));
}

TEST(SaveSchedule, BadSchedulesAreOneLineNamingTheFlag) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"", "'' is not a positive integer"}, Case{"0", "'0' is not a positive integer"},
                        Case{"-5", "'-5' is not a positive integer"}, Case{"10x", "'10x' is not a positive integer"},
                        Case{"10:100", "the last entry '10:100' must be a plain interval"},
                        Case{"10,100", "entry '10' is not N:U"}, Case{"10:100,,5", "entry '' is not N:U"},
                        Case{"10:100,5:50,7", "the last iterations must increase, got 100 then 50"},
                        Case{"0:100,7", "interval '0' is not a positive integer"},
                        Case{"10:0,7", "last iteration '0' is not a positive integer"},
                        Case{"10: 100,7", "last iteration ' 100' is not a positive integer"},
                        Case{"99999999999999999999", "is not a positive integer"}}) {
    const std::string e = error_of([&] { SaveSchedule::parse(c.text); });
    EXPECT_EQ(e.rfind("[--save-interval] '", 0), 0u) << c.text << ": " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace megatron::train
