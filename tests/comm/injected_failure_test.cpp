// MEGATRON_TEST_NCCL_FAIL's forms: <call>, <call>:<n>, <call>@<rank>, both; every other value a
// one-line error naming the variable; and which calls on which rank it picks.
#include "comm/injected_failure.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/error_of.h"
#include "support/scoped_env.h"

namespace megatron::comm {
namespace {

using test::env_of;

std::optional<InjectedFailure> parse(const std::string& value) {
  return injected_failure_from(env_of({{"MEGATRON_TEST_NCCL_FAIL", value}}));
}

TEST(InjectedFailure, ParsesCallCountAndRank) {
  EXPECT_FALSE(injected_failure_from(env_of({})).has_value());
  EXPECT_FALSE(parse("").has_value());
  const auto all = parse("ncclMemAlloc");
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->call, "ncclMemAlloc");
  EXPECT_EQ(all->nth, 0);
  EXPECT_EQ(all->rank, -1);
  const auto third = parse("ncclCommWindowRegister:3");
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->call, "ncclCommWindowRegister");
  EXPECT_EQ(third->nth, 3);
  EXPECT_EQ(third->rank, -1);
  const auto both = parse("ncclCommSplit:1@12");
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->call, "ncclCommSplit");
  EXPECT_EQ(both->nth, 1);
  EXPECT_EQ(both->rank, 12);
  const auto rank0 = parse("ncclMemAlloc@0");
  ASSERT_TRUE(rank0.has_value());
  EXPECT_EQ(rank0->nth, 0);
  EXPECT_EQ(rank0->rank, 0);
}

TEST(InjectedFailure, AnythingElseIsOneLineErrorNamingTheVariable) {
  for (const char* bad : {"ncclAllReduce", "ncclmemalloc", "ncclMemAlloc:0", "ncclMemAlloc:", "ncclMemAlloc:x",
                          "ncclMemAlloc@", "ncclMemAlloc@-1", "ncclMemAlloc:2@1x", "1", "@0"}) {
    const std::string e = test::error_of([&] { parse(bad); });
    EXPECT_NE(e.find("[MEGATRON_TEST_NCCL_FAIL]"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(InjectedFailure, PicksTheNamedCallTheNthOneAndTheRank) {
  {
    test::ScopedEnv v("MEGATRON_TEST_NCCL_FAIL", "ncclCommWindowRegister:2");
    EXPECT_FALSE(injected_failure("ncclCommWindowRegister", 1));
    EXPECT_TRUE(injected_failure("ncclCommWindowRegister", 2));
    EXPECT_FALSE(injected_failure("ncclCommWindowRegister", 3));
    EXPECT_FALSE(injected_failure("ncclMemAlloc", 2));
  }
  {
    test::ScopedEnv v("MEGATRON_TEST_NCCL_FAIL", "ncclMemAlloc@1");
    test::ScopedEnv r("RANK", "1"), w("WORLD_SIZE", "2");
    EXPECT_TRUE(injected_failure("ncclMemAlloc", 1));
    EXPECT_TRUE(injected_failure("ncclMemAlloc", 7));
    test::ScopedEnv r0("RANK", "0");
    EXPECT_FALSE(injected_failure("ncclMemAlloc", 1)) << "rank 0 is not rank 1";
  }
  EXPECT_FALSE(injected_failure("ncclMemAlloc", 1)) << "the variable is unset again";
}

}  // namespace
}  // namespace megatron::comm
