#include "support/recording_communicator.h"

#include <cstring>

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
  if (on_start) on_start(log.back());
  return std::make_unique<Pending>(log, what);
}

std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_all_reduce(Tensor& x, comm::ReduceOp op) {
  reduce_ops.push_back(op);
  return started("all_reduce", x);
}
std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_reduce_scatter(Tensor& in, Tensor&,
                                                                                     std::span<const int64_t>,
                                                                                     comm::ReduceOp op) {
  reduce_ops.push_back(op);
  return started("reduce_scatter", in);
}
comm::CopyEngineResult RecordingCommunicator::enable_copy_engine(std::span<const Tensor> buffers,
                                                                 int64_t max_reduce_scatter) {
  if (!copy_engine_available) return {false, "no copy engines here"};
  std::string entry = "enable_copy_engine " + std::to_string(max_reduce_scatter) + " over";
  for (const Tensor& b : buffers) entry += " " + where(b);
  log.push_back(entry);
  return {true, ""};
}
std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_all_gather(const Tensor&, Tensor& out,
                                                                                 std::span<const int64_t>) {
  return started("all_gather", out);
}

std::string RecordingCommunicator::exchange(std::span<const comm::PointToPoint> ops) {
  MT_CHECK(p2p_name) << "pipeline exchange on a recording communicator without p2p_name";
  std::string what;
  for (const comm::PointToPoint& op : ops) {
    if (!what.empty()) what += ' ';
    what += op.send ? "send " : "recv ";
    what += p2p_name(op.tensor);
    if (!op.send) std::memset(op.tensor.data(), 0, static_cast<size_t>(op.tensor.nbytes()));
  }
  return what;
}

void RecordingCommunicator::send_recv(std::span<const comm::PointToPoint> ops) {
  log.push_back("blocking " + exchange(ops));
}

std::unique_ptr<comm::PendingCollective> RecordingCommunicator::start_send_recv(
    std::span<const comm::PointToPoint> ops) {
  const std::string what = exchange(ops);
  log.push_back("start " + what);
  if (on_start) on_start(log.back());
  return std::make_unique<Pending>(log, what);
}

}  // namespace megatron::test
