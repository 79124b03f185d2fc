// A second name for a communicator over the same ranks: every call goes to `target`, only name()
// differs. parallel::make_process_groups gives a group kind whose groups are exactly those of a kind
// made before (tp and model-parallel without pipeline parallelism, dp and dp-cp, the one-rank
// groups, ...) one of these instead of a communicator of its own: each NCCL communicator holds
// ~250 MiB of device memory from its creation (plan/nccl_memory.h), and the two would
// otherwise connect the same ranks twice. Calls through both names run in one order on one
// communicator (NCCL: its streams), which every rank issues identically, as for one group.
// `target` must outlive this object. Watchdog messages and --profile-ops rows name the
// target's group (model-parallel's grad-norm all-reduce shows as [tp] at pp 1).
#pragma once

#include <string>

#include "comm/communicator.h"

namespace megatron::comm {

class SharedCommunicator final : public Communicator {
 public:
  SharedCommunicator(Communicator& target, std::string name) : target_(target), name_(std::move(name)) {}

  int64_t rank() const override { return target_.rank(); }
  int64_t size() const override { return target_.size(); }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor& x, ReduceOp op) override { target_.all_reduce(x, op); }
  void all_reduce_host(std::span<double> values, ReduceOp op) override { target_.all_reduce_host(values, op); }
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override {
    target_.reduce_scatter(in, out, counts, op);
  }
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    target_.all_gather(in, out, counts);
  }
  void broadcast(Tensor& x, int64_t root) override { target_.broadcast(x, root); }
  void send(const Tensor& x, int64_t peer) override { target_.send(x, peer); }
  void recv(Tensor& x, int64_t peer) override { target_.recv(x, peer); }
  void barrier() override { target_.barrier(); }
  void set_watchdog_grace(std::chrono::milliseconds grace) override { target_.set_watchdog_grace(grace); }
  void send_recv(std::span<const PointToPoint> ops) override { target_.send_recv(ops); }
  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override {
    return target_.start_send_recv(ops);
  }
  void connect_peers(std::span<const int64_t> peers) override { target_.connect_peers(peers); }
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override {
    return target_.split(color, key, name);
  }
  std::unique_ptr<PendingCollective> start_all_reduce(Tensor& x, ReduceOp op) override {
    return target_.start_all_reduce(x, op);
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                                          ReduceOp op) override {
    return target_.start_reduce_scatter(in, out, counts, op);
  }
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                      std::span<const int64_t> counts) override {
    return target_.start_all_gather(in, out, counts);
  }
  CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) override {
    return target_.enable_copy_engine(buffers, max_reduce_scatter);
  }
  void use_copy_engine(bool on) override { target_.use_copy_engine(on); }

 private:
  Communicator& target_;
  std::string name_;
};

}  // namespace megatron::comm
