// A Communicator that times every collective of the group it wraps as regions of a RegionTimer
// (backend/region_timer.h): in a ProfilingBackend's op table (`megatron bench --profile-ops`),
// so that communication is a row of the profile instead of hiding in "outside ops", or for the
// straggler detector (obs/straggler_detector.h). Regions are named by operation and group:
//   "all_gather [tp]"            a blocking collective: its time on the compute stream (NCCL:
//                                the kernel; host-side MPI: the host time it blocks)
//   "start all_reduce [dp]"      starting one (NCCL: the enqueue on its own stream, ~0)
//   "wait all_reduce [dp]"       waiting for a started one: how long the compute stream stalls
//                                (the part of the collective that compute did not hide)
//   "send_recv [pp]", "all_reduce_host [dp]", ...
// Results are those of the wrapped communicator; groups split from it are wrapped too.
#pragma once

#include <memory>
#include <string>

#include "backend/region_timer.h"
#include "comm/communicator.h"

namespace megatron::comm {

class ProfiledCommunicator final : public Communicator {
 public:
  ProfiledCommunicator(std::unique_ptr<Communicator> inner, backend::RegionTimer& profiler);

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
  void set_watchdog_grace(std::chrono::milliseconds grace) override { inner_->set_watchdog_grace(grace); }
  void send_recv(std::span<const PointToPoint> ops) override;
  void connect_peers(std::span<const int64_t> peers) override { inner_->connect_peers(peers); }
  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override;
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override;
  std::unique_ptr<PendingCollective> start_all_reduce(Tensor& x, ReduceOp op) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                                          ReduceOp op) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                      std::span<const int64_t> counts) override;
  CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) override {
    return inner_->enable_copy_engine(buffers, max_reduce_scatter);
  }
  void use_copy_engine(bool on) override { inner_->use_copy_engine(on); }

 private:
  // "op [group]"
  std::string row(const char* op) const;
  // The started collective's handle, its wait() timed as "wait <op> [group]".
  std::unique_ptr<PendingCollective> timed_wait(std::unique_ptr<PendingCollective> pending, const char* op);

  std::unique_ptr<Communicator> inner_;
  backend::RegionTimer& profiler_;
};

}  // namespace megatron::comm
