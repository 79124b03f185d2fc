// A communicator whose started collectives do nothing until wait(): at the start the buffers
// the collective writes are filled with 0xFF bytes (NaN in every float dtype) and the input is
// kept aside; at wait() the test fails if the caller wrote to them in the meantime, then the
// input is put back and the real (blocking) collective of `inner` runs. A caller that reads a
// result before waiting gets NaN, one that writes a buffer in flight is reported: with MPI
// (whose started collectives finish at once) neither would show. Blocking calls go straight to
// `inner`. Host tensors only (the CPU backend).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "comm/communicator.h"

namespace megatron::test {

class DeferredCommunicator final : public comm::Communicator {
 public:
  explicit DeferredCommunicator(comm::Communicator& inner) : inner_(inner) {}
  int64_t rank() const override { return inner_.rank(); }
  int64_t size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  void all_reduce(Tensor& x, comm::ReduceOp op) override { inner_.all_reduce(x, op); }
  void all_reduce_host(std::span<double> v, comm::ReduceOp op) override { inner_.all_reduce_host(v, op); }
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, comm::ReduceOp op) override {
    inner_.reduce_scatter(in, out, counts, op);
  }
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    inner_.all_gather(in, out, counts);
  }
  void broadcast(Tensor& x, int64_t root) override { inner_.broadcast(x, root); }
  void send(const Tensor& x, int64_t peer) override { inner_.send(x, peer); }
  void recv(Tensor& x, int64_t peer) override { inner_.recv(x, peer); }
  void send_recv(std::span<const comm::PointToPoint> ops) override { inner_.send_recv(ops); }
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<comm::Communicator> split(int64_t color, int64_t key, const std::string& name) override {
    return inner_.split(color, key, name);
  }
  std::unique_ptr<comm::PendingCollective> start_all_reduce(Tensor& x, comm::ReduceOp op) override;
  std::unique_ptr<comm::PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out,
                                                                std::span<const int64_t> counts,
                                                                comm::ReduceOp op) override;
  std::unique_ptr<comm::PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                            std::span<const int64_t> counts) override;
  // How many started collectives were waited for (the test checks the deferral happened).
  int64_t deferred() const { return deferred_; }

 private:
  comm::Communicator& inner_;
  int64_t deferred_ = 0;
};

}  // namespace megatron::test
