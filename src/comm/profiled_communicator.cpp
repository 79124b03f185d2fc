#include "comm/profiled_communicator.h"

#include <utility>

#include "core/error.h"

namespace megatron::comm {
namespace {

class TimedPending final : public PendingCollective {
 public:
  TimedPending(std::unique_ptr<PendingCollective> inner, backend::RegionTimer& profiler, std::string row)
      : inner_(std::move(inner)), profiler_(profiler), row_(std::move(row)) {}
  // An unwaited handle waits in its own destructor (the contract), untimed.
  void wait() override {
    if (waited_) return;
    waited_ = true;
    profiler_.time_region(row_, [&] { inner_->wait(); });
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  backend::RegionTimer& profiler_;
  std::string row_;
  bool waited_ = false;
};

}  // namespace

ProfiledCommunicator::ProfiledCommunicator(std::unique_ptr<Communicator> inner, backend::RegionTimer& profiler)
    : inner_(std::move(inner)), profiler_(profiler) {
  MT_CHECK(inner_ != nullptr) << "ProfiledCommunicator without an inner communicator";
}

std::string ProfiledCommunicator::row(const char* op) const { return std::string(op) + " [" + name() + "]"; }

std::unique_ptr<PendingCollective> ProfiledCommunicator::timed_wait(std::unique_ptr<PendingCollective> pending,
                                                                    const char* op) {
  return std::make_unique<TimedPending>(std::move(pending), profiler_, "wait " + row(op));
}

void ProfiledCommunicator::all_reduce(Tensor& x, ReduceOp op) {
  profiler_.time_region(row("all_reduce"), [&] { inner_->all_reduce(x, op); });
}
void ProfiledCommunicator::all_reduce_host(std::span<double> values, ReduceOp op) {
  profiler_.time_region(row("all_reduce_host"), [&] { inner_->all_reduce_host(values, op); });
}
void ProfiledCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) {
  profiler_.time_region(row("reduce_scatter"), [&] { inner_->reduce_scatter(in, out, counts, op); });
}
void ProfiledCommunicator::all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) {
  profiler_.time_region(row("all_gather"), [&] { inner_->all_gather(in, out, counts); });
}
void ProfiledCommunicator::broadcast(Tensor& x, int64_t root) {
  profiler_.time_region(row("broadcast"), [&] { inner_->broadcast(x, root); });
}
void ProfiledCommunicator::send(const Tensor& x, int64_t peer) {
  profiler_.time_region(row("send"), [&] { inner_->send(x, peer); });
}
void ProfiledCommunicator::recv(Tensor& x, int64_t peer) {
  profiler_.time_region(row("recv"), [&] { inner_->recv(x, peer); });
}
void ProfiledCommunicator::barrier() {
  profiler_.time_region(row("barrier"), [&] { inner_->barrier(); });
}
void ProfiledCommunicator::send_recv(std::span<const PointToPoint> ops) {
  profiler_.time_region(row("send_recv"), [&] { inner_->send_recv(ops); });
}

std::unique_ptr<PendingCollective> ProfiledCommunicator::start_send_recv(std::span<const PointToPoint> ops) {
  std::unique_ptr<PendingCollective> pending;
  profiler_.time_region(row("start send_recv"), [&] { pending = inner_->start_send_recv(ops); });
  return timed_wait(std::move(pending), "send_recv");
}
std::unique_ptr<PendingCollective> ProfiledCommunicator::start_all_reduce(Tensor& x, ReduceOp op) {
  std::unique_ptr<PendingCollective> pending;
  profiler_.time_region(row("start all_reduce"), [&] { pending = inner_->start_all_reduce(x, op); });
  return timed_wait(std::move(pending), "all_reduce");
}
std::unique_ptr<PendingCollective> ProfiledCommunicator::start_reduce_scatter(Tensor& in, Tensor& out,
                                                                              std::span<const int64_t> counts,
                                                                              ReduceOp op) {
  std::unique_ptr<PendingCollective> pending;
  profiler_.time_region(row("start reduce_scatter"),
                        [&] { pending = inner_->start_reduce_scatter(in, out, counts, op); });
  return timed_wait(std::move(pending), "reduce_scatter");
}
std::unique_ptr<PendingCollective> ProfiledCommunicator::start_all_gather(const Tensor& in, Tensor& out,
                                                                          std::span<const int64_t> counts) {
  std::unique_ptr<PendingCollective> pending;
  profiler_.time_region(row("start all_gather"), [&] { pending = inner_->start_all_gather(in, out, counts); });
  return timed_wait(std::move(pending), "all_gather");
}

std::unique_ptr<Communicator> ProfiledCommunicator::split(int64_t color, int64_t key, const std::string& name) {
  std::unique_ptr<Communicator> sub = inner_->split(color, key, name);
  if (sub == nullptr) return nullptr;
  return std::make_unique<ProfiledCommunicator>(std::move(sub), profiler_);
}

}  // namespace megatron::comm
