// The group of one rank: every collective is the identity (a copy where input and output are
// different buffers). A single-process run gets ProcessGroups made of these, so that the
// training code has one path for every data-parallel size.
#pragma once

#include <string>

#include "backend/ops.h"
#include "comm/communicator.h"

namespace megatron::comm {

class SelfCommunicator final : public Communicator {
 public:
  // `backend` copies between distinct input and output tensors (they may be on the device).
  SelfCommunicator(backend::Backend& backend, std::string name);

  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor& x, ReduceOp op) override;
  void all_reduce_host(std::span<double> values, ReduceOp op) override;
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override;
  void broadcast(Tensor& x, int64_t root) override;
  void send(const Tensor& x, int64_t peer) override;
  void recv(Tensor& x, int64_t peer) override;
  void barrier() override {}
  void send_recv(std::span<const PointToPoint> ops) override;
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override;

 private:
  void copy_unless_same(const Tensor& src, Tensor& dst);
  backend::Backend& backend_;
  std::string name_;
};

}  // namespace megatron::comm
