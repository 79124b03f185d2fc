// Host-side collectives for any tensor: a host communicator (MPI) made usable by ranks whose
// tensors live on a GPU.
// `megatron train --distributed-backend mpi` (or Megatron's `gloo`, the host-side library of
// PyTorch) uses it on GPUs instead of NCCL; CPU ranks always go through it.
//
// Every call stages what the inner communicator cannot take:
//  - a device tensor is copied to host memory (backend.copy: after the work queued on the
//    device), the inner call runs on the copy, and results are copied back;
//  - a reduction of 16-bit floats stays 16-bit on the host and on the wire: the inner
//    communicator's own 16-bit reduction (MPI: a user-defined op, each combination of two
//    values added in fp32 and rounded once; mpi_communicator.h). With two ranks that is NCCL's
//    bf16 sum bit for bit (one rounding of the exact sum); with more, each partial sum is
//    rounded in the inner library's order and results may differ from NCCL's in the last bit.
//  - host tensors go straight through (no copy).
// start_send_recv keeps the inner communicator's overlap (--overlap-p2p-communication); the
// other started collectives complete before start_* returns (the Communicator defaults). Staging allocates host memory
// per call and moves every byte over PCIe and through MPI: it is for correctness checks and machines without NCCL
// (several ranks sharing one GPU: NCCL refuses two ranks on one device), not for speed.
#pragma once

#include <memory>
#include <string>

#include "backend/ops.h"
#include "comm/communicator.h"

namespace megatron::comm {

class HostStagedCommunicator final : public Communicator {
 public:
  // `inner` takes host tensors and fp32/bf16/fp16 reductions; `backend` moves tensors to and from the
  // device (the backend the tensors belong to; any backend for host tensors).
  HostStagedCommunicator(std::unique_ptr<Communicator> inner, backend::Backend& backend);

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
  void barrier() override { inner_->barrier(); }
  void set_watchdog_grace(std::chrono::milliseconds grace) override { inner_->set_watchdog_grace(grace); }
  void send_recv(std::span<const PointToPoint> ops) override;
  void connect_peers(std::span<const int64_t> peers) override { inner_->connect_peers(peers); }
  // Non-blocking as the inner one's (MPI: Isend/Irecv now, Waitall in wait()): device sends are
  // staged before it returns, device receives are copied in by the handle's wait().
  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override;
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override;

 private:
  // A host tensor holding x's values (x itself when it is a host tensor of `dtype`), as `dtype`.
  Tensor to_host(const Tensor& x, DType dtype);
  // x := host (converted to x's dtype); nothing when host is x.
  void from_host(const Tensor& host, Tensor& x);

  std::unique_ptr<Communicator> inner_;
  backend::Backend& backend_;
};

}  // namespace megatron::comm
