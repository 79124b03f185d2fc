#include "comm/host_staged_communicator.h"

#include <exception>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace megatron::comm {
namespace {

void require_float(const Tensor& x, const char* op, const Communicator& group) {
  if (!is_float(x.dtype())) {
    throw_error(op, " on group '", group.name(), "' (rank ", group.rank(), "): reductions take float tensors, got ",
                dtype_name(x.dtype()));
  }
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> inner, backend::Backend& backend)
    : inner_(std::move(inner)), backend_(backend) {
  MT_CHECK(inner_ != nullptr) << "HostStagedCommunicator without an inner communicator";
}

// One backend copy each way: a device tensor changes dtype on the device, on its way to or
// from the host (the CUDA backend converts there through a temporary device buffer: ~1000x
// faster than a host loop); a host one is converted on the host.
Tensor HostStagedCommunicator::to_host(const Tensor& x, DType dtype) {
  if (x.device() == Device::kCPU && x.dtype() == dtype) return x;
  Tensor out = Tensor::cpu({x.numel()}, dtype);
  backend_.copy(x, out);  // after the work queued on the device; blocks until the values are here
  return out;
}

void HostStagedCommunicator::from_host(const Tensor& host, Tensor& x) {
  if (host.data() == x.data() && host.dtype() == x.dtype()) return;
  backend_.copy(host, x);  // host -> device: complete when it returns
}

void HostStagedCommunicator::all_reduce(Tensor& x, ReduceOp op) {
  if (x.numel() == 0) return;
  require_float(x, "all_reduce", *this);
  Tensor h = to_host(x, x.dtype());
  inner_->all_reduce(h, op);
  from_host(h, x);
}

void HostStagedCommunicator::all_reduce_host(std::span<double> values, ReduceOp op) {
  backend_.synchronize();  // the contract: host scalars are exchanged after the device work
  inner_->all_reduce_host(values, op);
}

void HostStagedCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) {
  check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
  MT_CHECK(out.dtype() == in.dtype()) << "reduce_scatter: dtypes differ";
  if (in.numel() == 0) return;
  require_float(in, "reduce_scatter", *this);
  if (in.device() == Device::kCPU && out.device() == Device::kCPU) {
    inner_->reduce_scatter(in, out, counts, op);
    return;
  }
  // h_out is a buffer of its own, so the inner call is never in place (and `out` may be a
  // piece of `in`: its values are read before any is written).
  Tensor h_in = to_host(in, in.dtype());
  Tensor h_out = Tensor::cpu({out.numel()}, out.dtype());
  inner_->reduce_scatter(h_in, h_out, counts, op);
  from_host(h_out, out);
}

void HostStagedCommunicator::all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) {
  if (in.device() == Device::kCPU && out.device() == Device::kCPU) {
    inner_->all_gather(in, out, counts);
    return;
  }
  check_pieces("all_gather", *this, out.numel(), in.numel(), counts);
  MT_CHECK(out.dtype() == in.dtype()) << "all_gather: dtypes differ";
  if (out.numel() == 0) return;
  // `in` may be this rank's piece of `out`: it is read before h_out (a buffer of its own) is
  // copied back.
  Tensor h_in = to_host(in, in.dtype());
  Tensor h_out = Tensor::cpu({out.numel()}, out.dtype());
  inner_->all_gather(h_in, h_out, counts);
  from_host(h_out, out);
}

void HostStagedCommunicator::broadcast(Tensor& x, int64_t root) {
  if (x.device() == Device::kCPU || x.numel() == 0) {
    inner_->broadcast(x, root);
    return;
  }
  // Only the root's values travel: the others receive into a fresh buffer.
  Tensor h = rank() == root ? to_host(x, x.dtype()) : Tensor::cpu({x.numel()}, x.dtype());
  inner_->broadcast(h, root);
  if (rank() != root) from_host(h, x);
}

void HostStagedCommunicator::send(const Tensor& x, int64_t peer) { inner_->send(to_host(x, x.dtype()), peer); }

void HostStagedCommunicator::recv(Tensor& x, int64_t peer) {
  if (x.device() == Device::kCPU || x.numel() == 0) {
    inner_->recv(x, peer);
    return;
  }
  Tensor h = Tensor::cpu({x.numel()}, x.dtype());
  inner_->recv(h, peer);
  from_host(h, x);
}

namespace {
// A started exchange over staged buffers: wait() completes the inner exchange, then copies each
// received host buffer into its device tensor. It owns the staged tensors until then.
class PendingStagedSendRecv final : public PendingCollective {
 public:
  PendingStagedSendRecv(std::unique_ptr<PendingCollective> inner, std::vector<PointToPoint> staged,
                        std::vector<PointToPoint> original, backend::Backend& backend)
      : inner_(std::move(inner)), staged_(std::move(staged)), original_(std::move(original)), backend_(backend) {}
  ~PendingStagedSendRecv() override {
    if (std::uncaught_exceptions() > 0) return;  // the job is ending (as PendingSendRecv)
    try {
      wait();
    } catch (...) {
      // A destructor does not throw; the failed exchange ends the job at the next call.
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    inner_->wait();
    for (size_t i = 0; i < original_.size(); ++i) {
      if (original_[i].send || staged_[i].tensor.data() == original_[i].tensor.data()) continue;
      backend_.copy(staged_[i].tensor, original_[i].tensor);
    }
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  std::vector<PointToPoint> staged_, original_;
  backend::Backend& backend_;
  bool done_ = false;
};
}  // namespace

std::unique_ptr<PendingCollective> HostStagedCommunicator::start_send_recv(std::span<const PointToPoint> ops) {
  // Device sends are read into host buffers here, after the work queued so far; device
  // receives land in host buffers and reach their tensors in wait().
  std::vector<PointToPoint> staged, original(ops.begin(), ops.end());
  staged.reserve(ops.size());
  for (const PointToPoint& op : ops) {
    PointToPoint s = op;
    if (op.tensor.numel() > 0 && op.tensor.device() != Device::kCPU) {
      s.tensor = op.send ? to_host(op.tensor, op.tensor.dtype()) : Tensor::cpu({op.tensor.numel()}, op.tensor.dtype());
    }
    staged.push_back(std::move(s));
  }
  std::unique_ptr<PendingCollective> inner = inner_->start_send_recv(staged);
  return std::make_unique<PendingStagedSendRecv>(std::move(inner), std::move(staged), std::move(original), backend_);
}

void HostStagedCommunicator::send_recv(std::span<const PointToPoint> ops) { start_send_recv(ops)->wait(); }

std::unique_ptr<Communicator> HostStagedCommunicator::split(int64_t color, int64_t key, const std::string& name) {
  std::unique_ptr<Communicator> sub = inner_->split(color, key, name);
  if (sub == nullptr) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(sub), backend_);
}

}  // namespace megatron::comm
