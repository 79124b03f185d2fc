// CPU ranks over MPI (Open MPI from Debian): the Communicator (comm/communicator.h) for runs started
// by mpirun (or srun with PMIx). Tensors must be host tensors (no CUDA-aware MPI is assumed);
// reductions take fp32, bf16 and fp16 (and fp64 host scalars); gathers, broadcasts and send/recv
// any dtype. A 16-bit reduction moves 16-bit values: MPI has no bf16/fp16 sum, so it runs as a
// user-defined op (MPI_Op_create) whose every combination of two values is widened, added (or
// compared) in fp32 and rounded once to the dtype, as each hop of NCCL's ring: over two ranks
// the exact sum rounded once (NCCL's bits); over more the partial sums are rounded in the order
// of Open MPI's algorithm (last-bit differences from NCCL's order). kAvg premultiplies in the
// dtype: round(x * round(1 / size)).
// Every MPI call is checked: the communicators use MPI_ERRORS_RETURN and a failed call throws
// megatron::Error "[rank R] MPI_Allreduce(...) on group 'dp' failed: <MPI's message>".
// Counts above 2^31-1 elements are split into chunks where MPI allows (all-reduce, broadcast,
// send/recv) and are an Error elsewhere (MPI 3 has int counts).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace megatron::comm {

// A posted receive's size and source: MPI completes a receive of fewer elements than its
// buffer, NCCL waits for the rest (a hang on GPUs), so a short message is an error here too.
struct ExpectedReceive {
  int count = -1;  // elements; -1: the request is a send
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int64_t peer = 0;
};

// MPI_Init_thread on construction, MPI_Finalize on destruction. Owned by the program's entry
// point, created before and destroyed after every MpiCommunicator. When it is destroyed during
// stack unwinding (an exception leaving the run) it does not finalize: MPI_Finalize would wait
// for the other ranks; exiting without it makes mpirun end the whole job instead, so one
// rank's error never leaves the others hanging.
class MpiRuntime {
 public:
  MpiRuntime();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  // A communicator over all ranks (a duplicate of MPI_COMM_WORLD), named "world".
  std::unique_ptr<Communicator> world() const;

 private:
  bool finalize_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor).
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor& x, ReduceOp op) override;
  void all_reduce_host(std::span<double> values, ReduceOp op) override;
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override;
  void broadcast(Tensor& x, int64_t root) override;
  void send(const Tensor& x, int64_t peer) override;
  void recv(Tensor& x, int64_t peer) override;
  void barrier() override;
  void send_recv(std::span<const PointToPoint> ops) override;
  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override;
  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override;

 private:
  void check(int rc, const char* call) const;
  // Posts the Isend/Irecv of every op (in order, cut into int-count chunks); `receives` gets,
  // per request, the elements a receive expects (-1 for a send) and its peer.
  std::vector<MPI_Request> post_send_recv(std::span<const PointToPoint> ops, std::vector<ExpectedReceive>* receives);
  // The user-defined op of a 16-bit reduction (created at first use, freed with the
  // communicator): [bf16, fp16] x [sum, max, min].
  MPI_Op op16(DType dtype, ReduceOp op);
  MPI_Op ops16_[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  // The MPI datatype and op of a reduction of `t` (fp32: MPI's own; 16-bit: op16).
  MPI_Datatype reduce_type(const Tensor& t) const;
  MPI_Op reduce_op(const Tensor& t, ReduceOp op);
  MPI_Comm comm_;
  std::string name_;
  int64_t rank_ = 0;
  int64_t size_ = 1;
  int world_rank_ = 0;
};

}  // namespace megatron::comm
