// SelfCommunicator's send_recv: a one-rank group sends to itself; sends pair with receives in
// posting order (what a one-stage pipeline would do), and a peer other than 0 is a bug.
#include "comm/self_communicator.h"

#include <gtest/gtest.h>

#include <vector>

namespace megatron::comm {
namespace {

TEST(SelfCommunicator, SendRecvToItselfPairsInPostingOrder) {
  auto backend = backend::make_cpu_backend();
  SelfCommunicator self(*backend, "pp");
  Tensor a = Tensor::cpu({3}), b = Tensor::cpu({3}), ra = Tensor::cpu({3}), rb = Tensor::cpu({3});
  for (int64_t i = 0; i < 3; ++i) {
    a.data_as<float>()[i] = static_cast<float>(i + 1);
    b.data_as<float>()[i] = static_cast<float>(10 * (i + 1));
  }
  const std::vector<PointToPoint> ops = {{true, a, 0}, {false, ra, 0}, {true, b, 0}, {false, rb, 0}};
  self.send_recv(ops);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ra.data_as<float>()[i], static_cast<float>(i + 1));
    EXPECT_EQ(rb.data_as<float>()[i], static_cast<float>(10 * (i + 1)));
  }
  self.send_recv({});  // nothing to do
}

TEST(SelfCommunicatorDeathTest, SendRecvWithAnotherRankIsABug) {
  auto backend = backend::make_cpu_backend();
  SelfCommunicator self(*backend, "pp");
  Tensor a = Tensor::cpu({1});
  const std::vector<PointToPoint> ops = {{true, a, 1}};
  EXPECT_DEATH(self.send_recv(ops), "send_recv with rank 1");
}

}  // namespace
}  // namespace megatron::comm
