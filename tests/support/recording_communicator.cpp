#include "support/recording_communicator.h"

#include "core/error.h"

namespace megatron::test {

namespace {
// Logs "wait <what>" on its first wait() (or destruction).
class Pending final : public comm::PendingCollective {
 public:
  Pending(std::vector<std::string>& log, std::string what) : log_(log), what_(std::move(what)) {}
  ~Pending() override { wait(); }
  void wait() override {
    if (!what_.empty()) log_.push_back("wait " + what_);
    what_.clear();
  }

 private:
  std::vector<std::string>& log_;
  std::string what_;
};
}  // namespace

std::string RecordingCommunicator::where(const Tensor& t) const {
  const char* p = static_cast<const char*>(t.data());
  for (const Tensor& b : bases_) {
    const char* base = static_cast<const char*>(b.data());
    if (p >= base && p < base + b.nbytes()) {
      const int64_t a = (p - base) / dtype_size(t.dtype());
      return "[" + std::to_string(a) + ", " + std::to_string(a + t.numel()) + ")";
    }
  }
  MT_CHECK(false) << "a collective on a buffer outside the recorded bases";
  return "";
}

std::unique_ptr<comm::PendingCollective> RecordingCommunicator::started(const char* op, const Tensor& t) {
  const std::string what = std::string(op) + " " + where(t);
  log.push_back("start " + what);
  return std::make_unique<Pending>(log, what);
}

std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_all_reduce(Tensor& x, comm::ReduceOp) {
  return started("all_reduce", x);
}
std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_reduce_scatter(Tensor& in, Tensor&,
                                                                                    std::span<const int64_t>,
                                                                                    comm::ReduceOp) {
  return started("reduce_scatter", in);
}
std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_all_gather(const Tensor&, Tensor& out,
                                                                                std::span<const int64_t>) {
  return started("all_gather", out);
}

}  // namespace megatron::test
