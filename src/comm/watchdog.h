// No silent hangs (docs/design.md, "Launching"): a thread that notices a collective which has not
// completed within --distributed-timeout-minutes, prints on stderr which rank waits in which
// operation on which group, and ends the process with exit status 1. Under mpirun (or the
// --nproc-per-node launcher) a rank that exits non-zero makes the launcher stop every other
// rank, so the whole job ends, non-zero, instead of waiting forever.
//
//   [rank 0] watchdog: all_reduce #57 on group 'dp' (2 ranks) has not completed after 600 s:
//   another rank of the group is behind (stuck or dead); aborting
//
// The waiting rank cannot see which peer is behind (that would need a channel beside the
// stuck one); the launcher names a peer that died, and every live rank names where it waits.
// NCCL collectives return once enqueued: with NCCL the watchdog sees the host-side waits
// (scalar reductions, barriers), where a stuck GPU collective surfaces.
//
// WatchedCommunicator wraps any Communicator so that every call is watched; its splits are
// watched too. The watchdog must outlive the communicators that use it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace megatron::comm {

// The longest --distributed-timeout-minutes: ten years. Any finite value up to it is a timeout
// in milliseconds that the watchdog adds to, and compares with, clock readings without overflow.
constexpr double kMaxTimeoutMinutes = 10 * 366 * 24 * 60;

// --distributed-timeout-minutes `minutes` as the watchdog's timeout; Error naming `flag` unless
// it is in (0, kMaxTimeoutMinutes] (fractions of a minute allowed, at least 1 ms).
std::chrono::milliseconds timeout_from_minutes(double minutes, const char* flag = "--distributed-timeout-minutes");

class Watchdog {
 public:
  // `timeout` must be positive. `on_timeout` gets the message; the default prints it on
  // stderr and calls _exit(1) (exiting without MPI_Finalize makes mpirun end the job).
  Watchdog(int64_t world_rank, std::chrono::milliseconds timeout,
           std::function<void(const std::string&)> on_timeout = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Marks one collective in flight from construction to destruction.
  // Time added to the timeout from now on (0: none); a report names it.
  void set_grace(std::chrono::milliseconds grace);

  class Scope {
   public:
    Scope(Watchdog& w, const char* op, const Communicator& group);
    ~Scope();

   private:
    Watchdog& w_;
  };

 private:
  void run();
  int64_t world_rank_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds grace_{0};
  std::function<void(const std::string&)> on_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool busy_ = false;
  std::chrono::steady_clock::time_point since_;
  std::string what_;      // "all_reduce #57 on group 'dp' (2 ranks)"
  int64_t sequence_ = 0;  // collectives started so far
  std::thread thread_;
};

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(std::unique_ptr<Communicator> inner, Watchdog& watchdog);

  int64_t rank() const override { return inner_->rank(); }
  int64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  void all_reduce(Tensor& x, ReduceOp op) override;
  void all_reduce_host(std::span<double> values, ReduceOp op) override;
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override;
  void broadcast(Tensor& x, int64_t root) override;
  void send(const Tensor& x, int64_t peer) override;
  void recv(Tensor& x, int64_t peer) override;
  void barrier() override;
  void set_watchdog_grace(std::chrono::milliseconds grace) override { watchdog_.set_grace(grace); }
  void send_recv(std::span<const PointToPoint> ops) override;
  void connect_peers(std::span<const int64_t> peers) override;
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override;
  // Watched while they start (MPI: the whole collective; NCCL: the enqueue).
  std::unique_ptr<PendingCollective> start_all_reduce(Tensor& x, ReduceOp op) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                                          ReduceOp op) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                      std::span<const int64_t> counts) override;
  // Watched while it is posted and again while its wait() blocks (MPI: Waitall on the peers).
  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override;
  // Watched while it sets up (a split of the group and window registrations: collective).
  CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) override;
  void use_copy_engine(bool on) override { inner_->use_copy_engine(on); }

 private:
  std::unique_ptr<Communicator> inner_;
  Watchdog& watchdog_;
};

}  // namespace megatron::comm
