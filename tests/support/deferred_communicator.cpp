#include "support/deferred_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"

// The lambdas keep copies of the Tensor handles (shared storage): callers may pass views that
// go out of scope before wait(), as the NCCL implementation allows.
namespace megatron::test {
namespace {

std::vector<char> bytes_of(const Tensor& t) {
  MT_CHECK(t.device() == Device::kCPU) << "DeferredCommunicator: host tensors only, got " << t.describe();
  const char* p = static_cast<const char*>(t.data());
  return std::vector<char>(p, p + t.nbytes());
}

void poison(Tensor& t) { std::memset(t.data(), 0xFF, static_cast<size_t>(t.nbytes())); }

bool still_poisoned(const Tensor& t) {
  const unsigned char* p = static_cast<const unsigned char*>(t.data());
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    if (p[i] != 0xFF) return false;
  }
  return true;
}

class Deferred final : public comm::PendingCollective {
 public:
  Deferred(std::function<void()> run, int64_t* counter) : run_(std::move(run)), counter_(counter) {}
  ~Deferred() override { EXPECT_FALSE(run_) << "a started collective was dropped without wait()"; }
  void wait() override {
    if (!run_) return;
    run_();
    run_ = nullptr;
    ++*counter_;
  }

 private:
  std::function<void()> run_;
  int64_t* counter_;
};

}  // namespace

std::unique_ptr<comm::PendingCollective> DeferredCommunicator::start_all_reduce(Tensor& x, comm::ReduceOp op) {
  std::vector<char> input = bytes_of(x);
  poison(x);
  return std::make_unique<Deferred>(
      [this, x, op, input = std::move(input)]() mutable {
        EXPECT_TRUE(still_poisoned(x)) << "all_reduce buffer written while in flight: " << x.describe();
        std::memcpy(x.data(), input.data(), input.size());
        inner_.all_reduce(x, op);
      },
      &deferred_);
}

std::unique_ptr<comm::PendingCollective> DeferredCommunicator::start_reduce_scatter(Tensor& in, Tensor& out,
                                                                                    std::span<const int64_t> counts,
                                                                                    comm::ReduceOp op) {
  std::vector<char> input = bytes_of(in);
  std::vector<int64_t> c(counts.begin(), counts.end());
  poison(in);
  poison(out);
  return std::make_unique<Deferred>(
      [this, in, out, op, input = std::move(input), c = std::move(c)]() mutable {
        EXPECT_TRUE(still_poisoned(in) && still_poisoned(out))
            << "reduce_scatter buffers written while in flight: " << in.describe();
        std::memcpy(in.data(), input.data(), input.size());
        inner_.reduce_scatter(in, out, c, op);
      },
      &deferred_);
}

std::unique_ptr<comm::PendingCollective> DeferredCommunicator::start_all_gather(const Tensor& in, Tensor& out,
                                                                                std::span<const int64_t> counts) {
  std::vector<char> input = bytes_of(in);
  std::vector<int64_t> c(counts.begin(), counts.end());
  poison(out);
  return std::make_unique<Deferred>(
      [this, in, out, input = std::move(input), c = std::move(c)]() mutable {
        EXPECT_TRUE(bytes_of(in) == input) << "all_gather input written while in flight: " << in.describe();
        EXPECT_TRUE(still_poisoned(out)) << "all_gather output written while in flight: " << out.describe();
        inner_.all_gather(in, out, c);
      },
      &deferred_);
}

}  // namespace megatron::test
