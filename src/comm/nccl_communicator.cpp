// NcclCommunicator (see nccl_communicator.h). Compiled only with MT_BUILD_CUDA.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <exception>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace megatron::comm {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

[[noreturn]] void fail(int64_t rank, const std::string& group, const char* call, const std::string& why) {
  throw_error("[rank ", rank, "] ", call, " on group '", group, "' failed: ", why);
}

void check_nccl(ncclResult_t rc, const char* call, int64_t rank, const std::string& group, ncclComm_t comm) {
  if (rc == ncclSuccess) return;
  std::string why = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') why += str_cat(" (", last, ")");
  fail(rank, group, call, why);
}

void check_cuda(cudaError_t rc, const char* call, int64_t rank, const std::string& group) {
  if (rc != cudaSuccess) fail(rank, group, call, cudaGetErrorString(rc));
}

#define MT_NCCL_CHECK(call) check_nccl((call), #call, world_rank_, name_, comm_)
#define MT_NCCL_CUDA_CHECK(call) check_cuda((call), #call, world_rank_, name_)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, std::string name, int64_t world_rank)
      : comm_(comm), stream_(stream), name_(std::move(name)), world_rank_(world_rank) {
    int r = 0, s = 0;
    MT_NCCL_CHECK(ncclCommUserRank(comm_, &r));
    MT_NCCL_CHECK(ncclCommCount(comm_, &s));
    rank_ = r;
    size_ = s;
    MT_NCCL_CUDA_CHECK(cudaMalloc(&scratch_, kScratchDoubles * sizeof(double)));
  }
  ~NcclCommunicator() override {
    cudaFree(scratch_);
    // During unwinding the peers may be stuck in a collective: abort rather than destroy
    // (ncclCommDestroy would wait for them).
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

  void all_reduce(Tensor& x, ReduceOp op) override {
    if (x.numel() == 0) return;
    require_device(x, "all_reduce");
    MT_NCCL_CHECK(ncclAllReduce(x.data(), x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), nccl_op(op),
                                comm_, stream_));
  }

  void all_reduce_host(std::span<double> values, ReduceOp op) override {
    for (size_t off = 0; off < values.size(); off += kScratchDoubles) {
      const size_t n = std::min(values.size() - off, kScratchDoubles);
      MT_NCCL_CUDA_CHECK(cudaMemcpyAsync(scratch_, values.data() + off, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
      MT_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, n, ncclFloat64, nccl_op(op), comm_, stream_));
      MT_NCCL_CUDA_CHECK(cudaMemcpyAsync(values.data() + off, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
      MT_NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }

  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override {
    check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
    MT_CHECK(in.dtype() == out.dtype()) << "reduce_scatter: dtypes differ";
    if (in.numel() == 0) return;
    require_device(in, "reduce_scatter");
    const ncclDataType_t t = nccl_type(in.dtype());
    const int64_t esize = dtype_size(in.dtype());
    if (all_equal(counts)) {
      // In place when out is this rank's piece of in (NCCL's convention).
      MT_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()), t, nccl_op(op), comm_,
                                      stream_));
      return;
    }
    MT_NCCL_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t n = counts[static_cast<size_t>(r)];
      if (n > 0) {
        const char* src = static_cast<const char*>(in.data()) + off * esize;
        void* dst = r == rank_ ? out.data() : const_cast<char*>(src);  // recvbuff is read on the root only
        MT_NCCL_CHECK(ncclReduce(src, dst, static_cast<size_t>(n), t, nccl_op(op), static_cast<int>(r), comm_, stream_));
      }
      off += n;
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    check_pieces("all_gather", *this, out.numel(), in.numel(), counts);
    MT_CHECK(in.dtype() == out.dtype()) << "all_gather: dtypes differ";
    if (out.numel() == 0) return;
    require_device(out, "all_gather");
    const ncclDataType_t t = nccl_type(out.dtype());
    const int64_t esize = dtype_size(out.dtype());
    if (all_equal(counts)) {
      MT_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), t, comm_, stream_));
      return;
    }
    MT_NCCL_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t n = counts[static_cast<size_t>(r)];
      if (n > 0) {
        char* dst = static_cast<char*>(out.data()) + off * esize;
        const void* src = r == rank_ ? in.data() : dst;  // sendbuff is read on the root only
        MT_NCCL_CHECK(ncclBroadcast(src, dst, static_cast<size_t>(n), t, static_cast<int>(r), comm_, stream_));
      }
      off += n;
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void broadcast(Tensor& x, int64_t root) override {
    MT_CHECK(root >= 0 && root < size_) << "broadcast root " << root;
    if (x.numel() == 0) return;
    require_device(x, "broadcast");
    MT_NCCL_CHECK(ncclBroadcast(x.data(), x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()),
                                static_cast<int>(root), comm_, stream_));
  }

  void send(const Tensor& x, int64_t peer) override {
    if (x.numel() == 0) return;
    require_device(x, "send");
    MT_NCCL_CHECK(ncclSend(x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), static_cast<int>(peer), comm_,
                           stream_));
  }

  void recv(Tensor& x, int64_t peer) override {
    if (x.numel() == 0) return;
    require_device(x, "recv");
    MT_NCCL_CHECK(ncclRecv(x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), static_cast<int>(peer), comm_,
                           stream_));
  }

  void send_recv(std::span<const PointToPoint> ops) override {
    // One group: NCCL starts every send and receive together, so pairs cannot deadlock.
    MT_NCCL_CHECK(ncclGroupStart());
    for (const PointToPoint& op : ops) {
      MT_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_) << "send_recv with " << op.peer << " on " << rank_;
      if (op.tensor.numel() == 0) continue;
      require_device(op.tensor, op.send ? "send_recv (send)" : "send_recv (recv)");
      const size_t n = static_cast<size_t>(op.tensor.numel());
      if (op.send) {
        MT_NCCL_CHECK(ncclSend(op.tensor.data(), n, nccl_type(op.tensor.dtype()), static_cast<int>(op.peer), comm_, stream_));
      } else {
        MT_NCCL_CHECK(ncclRecv(op.tensor.data(), n, nccl_type(op.tensor.dtype()),
                               static_cast<int>(op.peer), comm_, stream_));
      }
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void barrier() override {
    double one = 1.0;
    all_reduce_host(std::span<double>(&one, 1), ReduceOp::kSum);
  }

  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override {
    ncclComm_t sub = nullptr;
    MT_NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : static_cast<int>(color), static_cast<int>(key),
                                &sub, nullptr));
    if (sub == nullptr) return nullptr;
    return std::make_unique<NcclCommunicator>(sub, stream_, name, world_rank_);
  }

 private:
  static constexpr size_t kScratchDoubles = 64;
  static bool all_equal(std::span<const int64_t> counts) {
    for (int64_t c : counts) {
      if (c != counts[0]) return false;
    }
    return true;
  }
  void require_device(const Tensor& t, const char* op) const {
    if (t.device() != Device::kCUDA) throw_error(op, " on group '", name_, "': NCCL moves device tensors only");
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  std::string name_;
  int64_t world_rank_;
  int64_t rank_ = 0, size_ = 1;
  double* scratch_ = nullptr;  // [kScratchDoubles] for host-scalar reductions
};

}  // namespace

bool built_with_nccl() { return true; }

NcclUniqueIdBytes make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) throw_error("ncclGetUniqueId failed: ", ncclGetErrorString(rc));
  NcclUniqueIdBytes bytes{};
  static_assert(sizeof(id) == sizeof(bytes));
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

std::unique_ptr<Communicator> make_nccl_world(backend::Backend& backend, int64_t rank, int64_t size,
                                              const NcclUniqueIdBytes& bytes) {
  auto* cuda = dynamic_cast<backend::CudaBackend*>(&backend);
  if (cuda == nullptr) throw_error("NCCL needs the CUDA backend (--device cuda)");
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, static_cast<int>(size), id, static_cast<int>(rank));
  if (rc != ncclSuccess) {
    throw_error("[rank ", rank, "] ncclCommInitRank(world of ", size, ") failed: ", ncclGetErrorString(rc));
  }
  return std::make_unique<NcclCommunicator>(comm, cuda->stream(), "world", rank);
}

}  // namespace megatron::comm
