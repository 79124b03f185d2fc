#include "comm/watchdog.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <exception>

#include "core/error.h"

namespace megatron::comm {

std::chrono::milliseconds timeout_from_minutes(double minutes, const char* flag) {
  if (!(minutes > 0.0 && minutes <= kMaxTimeoutMinutes)) {
    throw_error("[", flag, "] must be in (0, ", kMaxTimeoutMinutes, "] minutes (ten years), got ", minutes);
  }
  const auto ms = static_cast<int64_t>(std::ceil(minutes * 60000.0));  // <= 5.3e12: exact, no overflow
  return std::chrono::milliseconds(ms);
}

Watchdog::Watchdog(int64_t world_rank, std::chrono::milliseconds timeout,
                   std::function<void(const std::string&)> on_timeout)
    : world_rank_(world_rank), timeout_(timeout), on_timeout_(std::move(on_timeout)) {
  MT_CHECK(timeout_.count() > 0) << "watchdog timeout " << timeout_.count() << " ms";
  if (!on_timeout_) {
    on_timeout_ = [](const std::string& message) {
      // One write(2) of the whole line: every rank of a group times out at once on a shared
      // stderr, and fprintf's pieces interleaved mid-line there (4 H100 ranks, 2026-11-28).
      const std::string line = message + "\n";
      std::fflush(nullptr);
      [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
      ::_exit(1);
    };
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::set_grace(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> lock(mu_);
  grace_ = grace;
}

Watchdog::Scope::Scope(Watchdog& w, const char* op, const Communicator& group) : w_(w) {
  std::lock_guard<std::mutex> lock(w_.mu_);
  ++w_.sequence_;
  w_.busy_ = true;
  w_.since_ = std::chrono::steady_clock::now();
  w_.what_ = str_cat(op, " #", w_.sequence_, " on group '", group.name(), "' (", group.size(), " ranks)");
}

Watchdog::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(w_.mu_);
  w_.busy_ = false;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  // Wakes at least every 100 ms (or 1/10 of the timeout) to look at the collective in flight.
  const auto tick =
      std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), timeout_ / 10 + std::chrono::milliseconds(1));
  while (!stop_) {
    cv_.wait_for(lock, tick);
    if (stop_ || !busy_) continue;
    const auto waited = std::chrono::steady_clock::now() - since_;
    // In milliseconds and without a sum, so that no timeout or grace overflows the comparison
    // (the clock's nanoseconds hold 292 years; milliseconds::max() does not fit in them).
    const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited);
    if (waited_ms < timeout_ || waited_ms - timeout_ < grace_) continue;
    const double seconds = std::chrono::duration<double>(waited).count();
    const std::string granted = grace_.count() > 0
                                    ? str_cat(", plus ", grace_.count() / 1000, " s granted to a checkpoint save")
                                    : std::string();
    const std::string message =
        str_cat("[rank ", world_rank_, "] watchdog: ", what_, " has not completed after ",
                static_cast<double>(std::llround(seconds * 10)) / 10, " s (--distributed-timeout-minutes", granted,
                "): another rank of the group is behind (stuck or dead); aborting");
    busy_ = false;  // report once
    lock.unlock();
    on_timeout_(message);
    lock.lock();
  }
}

WatchedCommunicator::WatchedCommunicator(std::unique_ptr<Communicator> inner, Watchdog& watchdog)
    : inner_(std::move(inner)), watchdog_(watchdog) {
  MT_CHECK(inner_ != nullptr) << "watching no communicator";
}

void WatchedCommunicator::all_reduce(Tensor& x, ReduceOp op) {
  Watchdog::Scope s(watchdog_, "all_reduce", *inner_);
  inner_->all_reduce(x, op);
}
void WatchedCommunicator::all_reduce_host(std::span<double> values, ReduceOp op) {
  Watchdog::Scope s(watchdog_, "all_reduce_host", *inner_);
  inner_->all_reduce_host(values, op);
}
void WatchedCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) {
  Watchdog::Scope s(watchdog_, "reduce_scatter", *inner_);
  inner_->reduce_scatter(in, out, counts, op);
}
void WatchedCommunicator::all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) {
  Watchdog::Scope s(watchdog_, "all_gather", *inner_);
  inner_->all_gather(in, out, counts);
}
void WatchedCommunicator::broadcast(Tensor& x, int64_t root) {
  Watchdog::Scope s(watchdog_, "broadcast", *inner_);
  inner_->broadcast(x, root);
}
void WatchedCommunicator::send(const Tensor& x, int64_t peer) {
  Watchdog::Scope s(watchdog_, "send", *inner_);
  inner_->send(x, peer);
}
void WatchedCommunicator::recv(Tensor& x, int64_t peer) {
  Watchdog::Scope s(watchdog_, "recv", *inner_);
  inner_->recv(x, peer);
}
void WatchedCommunicator::send_recv(std::span<const PointToPoint> ops) {
  Watchdog::Scope s(watchdog_, "send_recv", *inner_);
  inner_->send_recv(ops);
}
void WatchedCommunicator::connect_peers(std::span<const int64_t> peers) {
  Watchdog::Scope s(watchdog_, "connect_peers", *inner_);
  inner_->connect_peers(peers);
}
void WatchedCommunicator::barrier() {
  Watchdog::Scope s(watchdog_, "barrier", *inner_);
  inner_->barrier();
}
std::unique_ptr<PendingCollective> WatchedCommunicator::start_all_reduce(Tensor& x, ReduceOp op) {
  Watchdog::Scope s(watchdog_, "start_all_reduce", *inner_);
  return inner_->start_all_reduce(x, op);
}
std::unique_ptr<PendingCollective> WatchedCommunicator::start_reduce_scatter(Tensor& in, Tensor& out,
                                                                             std::span<const int64_t> counts,
                                                                             ReduceOp op) {
  Watchdog::Scope s(watchdog_, "start_reduce_scatter", *inner_);
  return inner_->start_reduce_scatter(in, out, counts, op);
}
std::unique_ptr<PendingCollective> WatchedCommunicator::start_all_gather(const Tensor& in, Tensor& out,
                                                                         std::span<const int64_t> counts) {
  Watchdog::Scope s(watchdog_, "start_all_gather", *inner_);
  return inner_->start_all_gather(in, out, counts);
}
CopyEngineResult WatchedCommunicator::enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) {
  Watchdog::Scope s(watchdog_, "enable_copy_engine", *inner_);
  return inner_->enable_copy_engine(buffers, max_reduce_scatter);
}
namespace {
// A started exchange whose wait() the watchdog times like a blocking call.
class WatchedPending final : public PendingCollective {
 public:
  WatchedPending(std::unique_ptr<PendingCollective> inner, Watchdog& watchdog, const Communicator& group)
      : inner_(std::move(inner)), watchdog_(watchdog), group_(group) {}
  // Dropped without wait() in normal flow: still waited for under the watchdog, so that a dead
  // peer is reported instead of hanging in the inner handle's destructor. (While an exception
  // unwinds, the inner handle's destructor decides.)
  ~WatchedPending() override {
    if (inner_ && std::uncaught_exceptions() == 0) wait();
  }
  void wait() override {
    if (!inner_) return;
    Watchdog::Scope s(watchdog_, "send_recv (wait)", group_);
    inner_->wait();
    inner_.reset();
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  Watchdog& watchdog_;
  const Communicator& group_;
};
}  // namespace

std::unique_ptr<PendingCollective> WatchedCommunicator::start_send_recv(std::span<const PointToPoint> ops) {
  std::unique_ptr<PendingCollective> started;
  {
    Watchdog::Scope s(watchdog_, "start_send_recv", *inner_);
    started = inner_->start_send_recv(ops);
  }
  return std::make_unique<WatchedPending>(std::move(started), watchdog_, *inner_);
}

std::unique_ptr<Communicator> WatchedCommunicator::split(int64_t color, int64_t key, const std::string& name) {
  std::unique_ptr<Communicator> sub;
  {
    Watchdog::Scope s(watchdog_, "split", *inner_);
    sub = inner_->split(color, key, name);
  }
  if (sub == nullptr) return nullptr;
  return std::make_unique<WatchedCommunicator>(std::move(sub), watchdog_);
}

}  // namespace megatron::comm
