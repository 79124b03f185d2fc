#include "comm/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

// Checks an MPI call made inside MpiCommunicator; the message names the call and the group.
#define MT_MPI_CHECK(call) check((call), #call)

namespace megatron::comm {
namespace {

// Elements per MPI call where a large count is cut into pieces (int counts).
constexpr int64_t kMaxChunk = int64_t{1} << 30;

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;  // moved as bits; never reduced
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return MPI_UINT8_T;  // moved as bits; never reduced
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kAvg:
      return MPI_SUM;  // of the inputs premultiplied by 1 / size (below)
  }
  return MPI_OP_NULL;
}

// kAvg's pre-multiplication (communicator.h): each of the n values times 1 / ranks, in their
// own type (fp32 tensors, host doubles).
template <class T>
void premultiply(T* p, int64_t n, int64_t ranks) {
  const T f = static_cast<T>(1.0) / static_cast<T>(ranks);
  for (int64_t i = 0; i < n; ++i) p[i] *= f;
}

void require_host(const Tensor& t, const char* op, const std::string& group) {
  if (t.numel() > 0 && t.device() != Device::kCPU) {
    throw_error(op, " on group '", group, "': MPI moves host tensors only (got a device tensor; GPUs use NCCL)");
  }
}

void require_reducible(const Tensor& t, const char* op, const std::string& group) {
  if (!is_float(t.dtype())) {
    throw_error(op, " on group '", group, "': MPI reductions take float tensors, got ", dtype_name(t.dtype()));
  }
}

// The 16-bit reductions (mpi_communicator.h): inout[i] := round(in[i] (op) inout[i]), computed in
// fp32 on the widened values.
template <DType D, ReduceOp Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = D == DType::kBF16 ? bf16_to_float(a[i]) : fp16_to_float(a[i]);
    const float y = D == DType::kBF16 ? bf16_to_float(b[i]) : fp16_to_float(b[i]);
    const float r = Op == ReduceOp::kSum ? x + y : Op == ReduceOp::kMax ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = D == DType::kBF16 ? float_to_bf16(r) : float_to_fp16(r);
  }
}

// kAvg's pre-multiplication of a 16-bit tensor (communicator.h): x := round(x * round(1 / ranks)).
void premultiply16(Tensor& t, int64_t ranks) {
  const float f = round_to(t.dtype(), 1.0f / static_cast<float>(ranks));
  auto* p = static_cast<uint16_t*>(t.data());
  const bool bf16 = t.dtype() == DType::kBF16;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = (bf16 ? bf16_to_float(p[i]) : fp16_to_float(p[i])) * f;
    p[i] = bf16 ? float_to_bf16(x) : float_to_fp16(x);
  }
}

// A tensor's kAvg pre-multiplication in its own dtype.
void premultiply_tensor(Tensor& t, int64_t ranks) {
  if (t.dtype() == DType::kF32) {
    premultiply(t.data_as<float>(), t.numel(), ranks);
  } else {
    premultiply16(t, ranks);
  }
}

// A pointer MPI may receive for a tensor that can be empty (and then undefined).
void* ptr(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data(); }

int int_count(int64_t n, const char* op) {
  if (n > INT_MAX) throw_error(op, ": ", n, " elements exceed MPI's int counts");
  return static_cast<int>(n);
}

}  // namespace

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;  // someone else owns MPI (a test harness): do not finalize it
  int provided = 0;
  // FUNNELED: only the main thread calls MPI (the watchdog thread never does).
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    throw_error("MPI_Init_thread failed (is this process started by mpirun?)");
  }
  finalize_ = true;
}

MpiRuntime::~MpiRuntime() {
  if (!finalize_ || std::uncaught_exceptions() > 0) return;
  MPI_Finalize();
}

std::unique_ptr<Communicator> MpiRuntime::world() const {
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) throw_error("MPI_Comm_dup(MPI_COMM_WORLD) failed");
  return std::make_unique<MpiCommunicator>(dup, "world");
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  int r = 0, s = 0;
  MT_MPI_CHECK(MPI_Comm_rank(comm_, &r));
  MT_MPI_CHECK(MPI_Comm_size(comm_, &s));
  rank_ = r;
  size_ = s;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& row : ops16_) {
    for (MPI_Op& o : row) {
      if (o != MPI_OP_NULL) MPI_Op_free(&o);
    }
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int rc, const char* call) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = std::snprintf(text, sizeof(text), "error %d", rc);
  throw_error("[rank ", world_rank_, "] ", call, " on group '", name_,
              "' failed: ", std::string(text, static_cast<size_t>(len)));
}

MPI_Op MpiCommunicator::op16(DType dtype, ReduceOp op) {
  const int d = dtype == DType::kBF16 ? 0 : 1;
  const int o = op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;  // kSum and kAvg: a sum
  MPI_Op& slot = ops16_[d][o];
  if (slot != MPI_OP_NULL) return slot;
  static constexpr MPI_User_function* kFunctions[2][3] = {
      {reduce16<DType::kBF16, ReduceOp::kSum>, reduce16<DType::kBF16, ReduceOp::kMax>,
       reduce16<DType::kBF16, ReduceOp::kMin>},
      {reduce16<DType::kF16, ReduceOp::kSum>, reduce16<DType::kF16, ReduceOp::kMax>,
       reduce16<DType::kF16, ReduceOp::kMin>}};
  MT_MPI_CHECK(MPI_Op_create(kFunctions[d][o], /*commute=*/1, &slot));
  return slot;
}

MPI_Datatype MpiCommunicator::reduce_type(const Tensor& t) const {
  return t.dtype() == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T;
}

MPI_Op MpiCommunicator::reduce_op(const Tensor& t, ReduceOp op) {
  return t.dtype() == DType::kF32 ? mpi_op(op) : op16(t.dtype(), op);
}

void MpiCommunicator::all_reduce(Tensor& x, ReduceOp op) {
  if (x.numel() == 0) return;
  require_host(x, "all_reduce", name_);
  require_reducible(x, "all_reduce", name_);
  if (op == ReduceOp::kAvg) premultiply_tensor(x, size());
  char* p = static_cast<char*>(x.data());
  const int64_t esize = dtype_size(x.dtype());
  const MPI_Datatype type = reduce_type(x);
  const MPI_Op mop = reduce_op(x, op);
  for (int64_t off = 0; off < x.numel(); off += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, x.numel() - off));
    MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * esize, n, type, mop, comm_));
  }
}

void MpiCommunicator::all_reduce_host(std::span<double> values, ReduceOp op) {
  if (values.empty()) return;
  if (op == ReduceOp::kAvg) premultiply(values.data(), static_cast<int64_t>(values.size()), size());
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(),
                             int_count(static_cast<int64_t>(values.size()), "all_reduce_host"), MPI_DOUBLE, mpi_op(op),
                             comm_));
}

void MpiCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) {
  check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
  require_host(in, "reduce_scatter", name_);
  require_host(out, "reduce_scatter", name_);
  require_reducible(in, "reduce_scatter", name_);
  MT_CHECK(out.dtype() == in.dtype()) << "reduce_scatter: dtypes differ";
  std::vector<int> c(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) c[i] = int_count(counts[i], "reduce_scatter");
  if (in.numel() == 0) return;
  const int64_t my_offset = piece_offset(counts, rank_);
  const int64_t esize = dtype_size(in.dtype());
  const bool in_place = out.numel() > 0 && out.data() == static_cast<char*>(in.data()) + my_offset * esize;
  const MPI_Datatype type = reduce_type(in);
  const MPI_Op mop = reduce_op(in, op);
  // kAvg: in place the caller's `in` is premultiplied (its other pieces are unspecified after
  // the call anyway); out of place a premultiplied copy is sent and `in` stays as it was.
  Tensor send = in;
  if (op == ReduceOp::kAvg) {
    if (!in_place) {
      send = Tensor::cpu({in.numel()}, in.dtype());
      std::memcpy(send.data(), in.data(), static_cast<size_t>(in.nbytes()));
    }
    premultiply_tensor(send, size());
  }
  if (in_place) {
    // MPI puts the in-place result at the start of the buffer; move it to this rank's piece.
    MT_MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, in.data(), c.data(), type, mop, comm_));
    if (my_offset != 0 && out.numel() > 0) {
      std::memmove(out.data(), in.data(), static_cast<size_t>(out.nbytes()));
    }
  } else {
    MT_MPI_CHECK(MPI_Reduce_scatter(send.data(), ptr(out), c.data(), type, mop, comm_));
  }
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) {
  check_pieces("all_gather", *this, out.numel(), in.numel(), counts);
  require_host(in, "all_gather", name_);
  require_host(out, "all_gather", name_);
  MT_CHECK(out.dtype() == in.dtype()) << "all_gather: dtypes differ";
  if (out.numel() == 0) return;
  std::vector<int> c(counts.size()), displs(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    c[i] = int_count(counts[i], "all_gather");
    displs[i] = int_count(off, "all_gather");
    off += counts[i];
  }
  const MPI_Datatype t = mpi_type(out.dtype());
  const char* mine = static_cast<const char*>(out.data()) + piece_offset(counts, rank_) * dtype_size(out.dtype());
  const bool in_place = in.numel() == 0 || in.data() == mine;
  if (in_place) {
    MT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data(), c.data(), displs.data(), t, comm_));
  } else {
    MT_MPI_CHECK(
        MPI_Allgatherv(in.data(), c[static_cast<size_t>(rank_)], t, out.data(), c.data(), displs.data(), t, comm_));
  }
}

void MpiCommunicator::broadcast(Tensor& x, int64_t root) {
  MT_CHECK(root >= 0 && root < size_) << "broadcast root " << root << " in a group of " << size_;
  if (x.numel() == 0) return;
  require_host(x, "broadcast", name_);
  char* p = static_cast<char*>(x.data());
  const int64_t esize = dtype_size(x.dtype());
  for (int64_t off = 0; off < x.numel(); off += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, x.numel() - off));
    MT_MPI_CHECK(MPI_Bcast(p + off * esize, n, mpi_type(x.dtype()), static_cast<int>(root), comm_));
  }
}

namespace {
// Throws (naming the group and peer) if a completed receive got another count than expected.
void check_receive_counts(const std::vector<ExpectedReceive>& receives, const std::vector<MPI_Status>& statuses,
                          const std::string& group, int world_rank) {
  MT_CHECK(receives.size() == statuses.size()) << receives.size() << " receives for " << statuses.size() << " statuses";
  for (size_t i = 0; i < receives.size(); ++i) {
    const ExpectedReceive& r = receives[i];
    if (r.count < 0) continue;
    MPI_Status status = statuses[i];
    int got = 0;
    if (MPI_Get_count(&status, r.type, &got) != MPI_SUCCESS) {
      throw_error("[rank ", world_rank, "] MPI_Get_count failed after a receive from rank ", r.peer, " of group '",
                  group, "'");
    }
    if (got != r.count) {
      throw_error("[rank ", world_rank, "] a receive from rank ", r.peer, " of group '", group, "' got ", got,
                  " elements where ", r.count,
                  " were expected: the two sides disagree on the message's size "
                  "(NCCL would wait for the rest: a hang on GPUs)");
    }
  }
}

}  // namespace

void MpiCommunicator::send(const Tensor& x, int64_t peer) {
  MT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "send to " << peer << " from " << rank_;
  if (x.numel() == 0) return;
  require_host(x, "send", name_);
  const char* p = static_cast<const char*>(x.data());
  const int64_t esize = dtype_size(x.dtype());
  for (int64_t off = 0; off < x.numel(); off += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, x.numel() - off));
    MT_MPI_CHECK(MPI_Send(p + off * esize, n, mpi_type(x.dtype()), static_cast<int>(peer), 0, comm_));
  }
}

void MpiCommunicator::recv(Tensor& x, int64_t peer) {
  MT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "recv from " << peer << " on " << rank_;
  if (x.numel() == 0) return;
  require_host(x, "recv", name_);
  char* p = static_cast<char*>(x.data());
  const int64_t esize = dtype_size(x.dtype());
  for (int64_t off = 0; off < x.numel(); off += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, x.numel() - off));
    std::vector<MPI_Status> status(1);
    MT_MPI_CHECK(MPI_Recv(p + off * esize, n, mpi_type(x.dtype()), static_cast<int>(peer), 0, comm_, status.data()));
    check_receive_counts({{n, mpi_type(x.dtype()), peer}}, status, name_, world_rank_);
  }
}

std::vector<MPI_Request> MpiCommunicator::post_send_recv(std::span<const PointToPoint> ops,
                                                         std::vector<ExpectedReceive>* receives) {
  std::vector<MPI_Request> requests;
  for (const PointToPoint& op : ops) {
    MT_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_) << "send_recv with " << op.peer << " on " << rank_;
    require_host(op.tensor, op.send ? "send_recv (send)" : "send_recv (recv)", name_);
    char* p = static_cast<char*>(op.tensor.data());
    const int64_t esize = dtype_size(op.tensor.dtype());
    // Chunks of kMaxChunk elements (int counts), posted in order: they match in order.
    for (int64_t off = 0; off < op.tensor.numel(); off += kMaxChunk) {
      const int n = static_cast<int>(std::min(kMaxChunk, op.tensor.numel() - off));
      MPI_Request r = MPI_REQUEST_NULL;
      if (op.send) {
        MT_MPI_CHECK(
            MPI_Isend(p + off * esize, n, mpi_type(op.tensor.dtype()), static_cast<int>(op.peer), 0, comm_, &r));
      } else {
        MT_MPI_CHECK(
            MPI_Irecv(p + off * esize, n, mpi_type(op.tensor.dtype()), static_cast<int>(op.peer), 0, comm_, &r));
      }
      requests.push_back(r);
      receives->push_back({op.send ? -1 : n, mpi_type(op.tensor.dtype()), op.peer});
    }
  }
  return requests;
}

void MpiCommunicator::send_recv(std::span<const PointToPoint> ops) {
  std::vector<ExpectedReceive> receives;
  std::vector<MPI_Request> requests = post_send_recv(ops, &receives);
  if (requests.empty()) return;
  std::vector<MPI_Status> statuses(requests.size());
  MT_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses.data()));
  check_receive_counts(receives, statuses, name_, world_rank_);
}

namespace {
// Posted requests of one start_send_recv; wait() completes them all (Waitall).
class PendingSendRecv final : public PendingCollective {
 public:
  PendingSendRecv(std::vector<MPI_Request> requests, std::vector<ExpectedReceive> receives, std::string group,
                  int world_rank)
      : requests_(std::move(requests)),
        receives_(std::move(receives)),
        group_(std::move(group)),
        world_rank_(world_rank) {}
  ~PendingSendRecv() override {
    // An unwaited handle waits (PendingCollective's contract); during unwinding the job is
    // ending: leave the requests (the process exits and mpirun ends the job).
    if (std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (...) {
      // A destructor does not throw; the failed exchange ends the job at the next MPI call.
    }
  }
  void wait() override {
    if (requests_.empty()) return;
    std::vector<MPI_Status> statuses(requests_.size());
    const int rc = MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses.data());
    requests_.clear();
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = std::snprintf(text, sizeof(text), "error %d", rc);
      throw_error("[rank ", world_rank_, "] MPI_Waitall (start_send_recv) on group '", group_,
                  "' failed: ", std::string(text, static_cast<size_t>(len)));
    }
    check_receive_counts(receives_, statuses, group_, world_rank_);
  }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<ExpectedReceive> receives_;
  std::string group_;
  int world_rank_;
};
}  // namespace

std::unique_ptr<PendingCollective> MpiCommunicator::start_send_recv(std::span<const PointToPoint> ops) {
  std::vector<ExpectedReceive> receives;
  std::vector<MPI_Request> requests = post_send_recv(ops, &receives);
  return std::make_unique<PendingSendRecv>(std::move(requests), std::move(receives), name_, world_rank_);
}

void MpiCommunicator::barrier() { MT_MPI_CHECK(MPI_Barrier(comm_)); }

std::unique_ptr<Communicator> MpiCommunicator::split(int64_t color, int64_t key, const std::string& name) {
  MT_CHECK(color <= INT_MAX && key >= 0 && key <= INT_MAX) << "split(" << color << ", " << key << ")";
  MPI_Comm sub = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : static_cast<int>(color), static_cast<int>(key), &sub));
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(sub, name);
}

}  // namespace megatron::comm
