// Communicator: the collectives that parallel training needs, over one group of ranks, on
// Tensors (docs/design.md, "Parallelism is data layout plus collectives": written once).
// Implementations: SelfCommunicator (one rank, self_communicator.h), MpiCommunicator (host
// tensors, Open MPI, mpi_communicator.h), always used through HostStagedCommunicator (device
// tensors staged through host memory, host_staged_communicator.h), and
// NcclCommunicator (GPUs, nccl_communicator.h).
// Groups are objects passed explicitly (parallel/process_groups.h); there is no global group.
//
// Contract for every call:
//  - It is collective over the group (send/recv: over the pair) and blocking: when it
//    returns, the result is in place (NCCL: enqueued on the backend's stream, so that the
//    next op on that stream sees it; host scalars are synchronised).
//  - Every rank of the group calls the same collectives in the same order with the same
//    counts and dtypes (SPMD); anything else is a bug that hangs or aborts.
//  - Tensors are contiguous and live where the implementation expects them (MPI: host memory,
//    NCCL: the GPU of the backend, host-staged: either). Reductions (sum/max/min/avg) work on fp32,
//    bf16 and fp16 everywhere, in the tensor's dtype on the wire (16-bit: each partial sum
//    rounded to it; mpi_communicator.h); gathers, broadcasts and send/recv
//    move any dtype.
//  - Counts are int64_t; a count is a number of elements of the tensor's dtype.
//  - Failures of the underlying library throw megatron::Error naming the operation, the group
//    and the rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace megatron::comm {

// kAvg: every rank's input multiplied by 1 / size() (the factor and each product rounded to
// the input's dtype), then summed: NCCL's ncclAvg on floats (a pre-multiplied sum), so a
// data-parallel gradient is averaged inside the collective instead of by a scaling pass over
// it first. With a power-of-two size the products are exact: the bits of the plain sum scaled.
enum class ReduceOp { kSum, kMax, kMin, kAvg };
const char* to_string(ReduceOp op);

// A collective started by Communicator::start_*. wait() makes its result visible to the
// caller's next op (NCCL: the compute stream waits for it on the device; the host does not
// block). wait() is idempotent; destroying an unwaited handle waits. A handle must not
// outlive its communicator.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

// A handle whose collective has already completed (the blocking defaults of start_*, and
// callers with nothing to start).
class FinishedCollective final : public PendingCollective {
 public:
  void wait() override {}
};

// One message of Communicator::send_recv: send `tensor` to, or receive it from, group rank
// `peer` (a view: the caller keeps the storage alive until send_recv returns).
struct PointToPoint {
  bool send = false;
  Tensor tensor;
  int64_t peer = 0;
};

// What Communicator::enable_copy_engine did: on, or off and why (one line, the same on every
// rank of the group).
struct CopyEngineResult {
  bool on = false;
  std::string why_off;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // The group's name for messages ("world", "dp", "tp", ...).
  virtual const std::string& name() const = 0;

  // x := op over the group of x (in place).
  virtual void all_reduce(Tensor& x, ReduceOp op) = 0;
  // The same on host doubles (a loss to average, a squared-norm part, an inf flag). Always
  // synchronises with the device.
  virtual void all_reduce_host(std::span<double> values, ReduceOp op) = 0;
  // Reduce-scatter with per-rank counts: `in` [sum(counts)] is the concatenation of size()
  // pieces, piece r of counts[r] elements; `out` [counts[rank]] receives op over the group of
  // this rank's piece. `out` may be this rank's piece of `in` (in place, NCCL's convention);
  // afterwards the rest of `in` is unspecified.
  virtual void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) = 0;
  // All-gather with per-rank counts: `out` [sum(counts)] := concatenation over r of rank r's
  // `in` [counts[r]]. `in` may be this rank's piece of `out` (in place).
  virtual void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) = 0;
  // x := root's x on every rank.
  virtual void broadcast(Tensor& x, int64_t root) = 0;
  // Point to point within the group (peer is a group rank); the receiver knows the shape.
  virtual void send(const Tensor& x, int64_t peer) = 0;
  virtual void recv(Tensor& x, int64_t peer) = 0;
  virtual void barrier() = 0;
  // Extra time a watchdog (comm/watchdog.h) grants every watched operation from now on, on
  // top of --distributed-timeout-minutes, for phases whose waits are long by design (ranks
  // waiting while one rank writes a checkpoint); 0 takes it back. No-op where nothing is
  // watched.
  virtual void set_watchdog_grace(std::chrono::milliseconds) {}

  // ---- Pipeline point-to-point (parallel/pipeline_executor.h) ----
  // Posts every send and receive of `ops` at once and returns when all have completed (MPI:
  // Isend/Irecv + Waitall; NCCL: one group, enqueued on the stream; one rank: a send to
  // itself is copied into its receives in order). Neighbouring pipeline stages that both send
  // and receive in one step cannot deadlock, as paired blocking send/recv can. Collective over
  // the peers named, not the group; between two ranks messages match in posting order, and
  // the receiver knows the shapes and dtypes.
  virtual void send_recv(std::span<const PointToPoint> ops) = 0;
  // send_recv started, not waited for (--overlap-p2p-communication): until the handle's wait()
  // the caller must neither read a receive's tensor nor write a send's. Exchanges started on
  // one group are matched and completed in the order they were started, also among blocking
  // ones. MPI: Isend/Irecv now, Waitall in wait(); NCCL: one group on the communicator's own
  // stream after the compute stream's work so far, the compute stream waiting for it in
  // wait(). The default (one rank) runs send_recv at once and returns a finished handle.
  virtual std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops);
  // Opens the point-to-point connections with `peers` (both directions) before the first
  // send_recv (parallel::connect_pipeline_neighbours). Collective over the peers named: every
  // rank calls it once, and if a names b, b names a. Why (NCCL): a pair's connection is made
  // at its first message in each direction, inside ncclGroupEnd, and blocks that rank's host
  // until the peer reaches its own first message the other way. A pipeline whose first messages are not in matching
  // groups on both sides deadlocks there: PP4 with 2 micro-batches, where stage 0's group
  // [send F1 to 1, receive B0 from 1] waits in the connection for stage 1's first send to 0,
  // which comes after stage 1 has received F1 (NVIDIA/nccl#783, #2130). One exchange in
  // which every rank talks to all its peers at once makes every later group start free of it.
  // The default (MPI, one rank) does nothing: MPI connects without that rendezvous.
  virtual void connect_peers(std::span<const int64_t> peers) { (void)peers; }
  // ---- end of pipeline point-to-point ----

  // MPI_Comm_split: the ranks that pass the same `color` form one new group, ordered by
  // (key, old rank). Collective over this group; `name` names the new group. A rank passing
  // a negative color joins no group and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) = 0;

  // Asynchronous collectives (--overlap-grad-reduce, --overlap-param-gather): the blocking
  // call's collective and result, started but not waited for. Until the handle's wait() the
  // caller must not touch the tensors. Collectives of one group complete in the order they
  // were called, blocking or not, on every rank. NCCL runs a started collective on the
  // communicator's own stream, after everything already enqueued on the compute stream, so
  // that compute goes on beside it. The defaults (MPI, one rank) run the blocking call at once
  // and return a finished handle: the same results without overlap.
  virtual std::unique_ptr<PendingCollective> start_all_reduce(Tensor& x, ReduceOp op);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out,
                                                                  std::span<const int64_t> counts, ReduceOp op);
  virtual std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                              std::span<const int64_t> counts);

  // Copy-engine collectives (MEGATRON_DP_COPY_ENGINE, parallel/data_parallel_setup.h): from now on
  // the reduce-scatters and all-gathers of this group whose tensors lie inside `buffers` move
  // their data with the GPUs' copy engines instead of kernels on the SMs, so that the GEMMs
  // beside them keep every SM. A reduce-scatter of pieces of at most S elements becomes an
  // all-to-all of S elements per rank into a receive buffer of `max_reduce_scatter` elements
  // (>= size() * S for every later one) and a sum of the size() received pieces in group rank
  // order: the same values as the reduce-scatter up to the order of the additions (0: only the
  // all-gathers move to the copy engines). Called again, it says whether these buffers lie in
  // the ones already enabled. Collective, and every rank of the group ends alike: where any rank
  // cannot (not NCCL >= 2.28, ranks on several hosts, buffers not from
  // comm::use_symmetric_memory's allocator, an NCCL call of the set-up failing), every rank
  // undoes what it set up and returns off with the reason of the lowest group rank that failed
  // (naming its world rank; at most 320 characters), and the group keeps its SM collectives.
  virtual CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) {
    (void)buffers;
    (void)max_reduce_scatter;
    return {false, "this group's collectives have no copy engines (they need NCCL 2.28+ on CUDA ranks)"};
  }
  // After enable_copy_engine: whether the collectives started or run from now on may use the
  // copy engines (true, the default) or keep the SM kernels (false: the reduce-scatters that
  // end the backward, which the copy engines, slowed by the compute beside them, finish later).
  // Every rank switches at the same point of its calls. No-op before or without it.
  virtual void use_copy_engine(bool on) { (void)on; }
};

// Equal pieces: counts[r] = out.numel() (reduce_scatter) or in.numel() (all_gather) for every r.
void reduce_scatter(Communicator& comm, Tensor& in, Tensor& out, ReduceOp op);
void all_gather(Communicator& comm, const Tensor& in, Tensor& out);
// One host scalar reduced over the group.
double all_reduce_scalar(Communicator& comm, double value, ReduceOp op);
// Every rank's `mine` (the same length on every rank), row r being group rank r's:
// size() * mine.size() values. One host all-reduce (each rank fills its own row of zeros; a sum
// of zeros and one value is exact).
std::vector<double> all_gather_host(Communicator& comm, std::span<const double> mine);
// Group rank `root`'s `values` on every rank (the same length everywhere; the others' are
// ignored). One host all-reduce, as all_gather_host.
std::vector<double> broadcast_host(Communicator& comm, std::span<const double> values, int64_t root = 0);
// Every rank's `mine` (its first `max_chars` bytes, no NUL bytes), by group rank: a host name,
// a device name. One all_gather_host of max_chars doubles per rank.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, size_t max_chars = 64);

// Where piece r of a buffer split by `counts` starts: sum(counts[0..r)).
int64_t piece_offset(std::span<const int64_t> counts, int64_t r);
// Checks the argument shapes every implementation relies on; `op` names the caller for the
// message (a mismatch is a bug in the caller: MT_CHECK).
void check_pieces(const char* op, const Communicator& comm, int64_t whole, int64_t part,
                  std::span<const int64_t> counts);

}  // namespace megatron::comm
