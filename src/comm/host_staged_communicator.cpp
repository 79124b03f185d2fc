#include "comm/host_staged_communicator.h"

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace megatron::comm {
namespace {

// dst := src, two host tensors of equal numel and float dtypes (16-bit -> fp32 exactly,
// fp32 -> 16-bit rounded to nearest even, as every backend's copy()).
void convert_on_host(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(src.nbytes()));
    return;
  }
  MT_CHECK(is_float(src.dtype()) && is_float(dst.dtype())) << "staging " << src.describe() << " -> " << dst.describe();
  auto widen = [&](int64_t i) -> float {
    switch (src.dtype()) {
      case DType::kBF16: return bf16_to_float(src.data_as<uint16_t>()[i]);
      case DType::kF16: return fp16_to_float(src.data_as<uint16_t>()[i]);
      default: return src.data_as<float>()[i];
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const float v = widen(i);
    switch (dst.dtype()) {
      case DType::kBF16: dst.data_as<uint16_t>()[i] = float_to_bf16(v); break;
      case DType::kF16: dst.data_as<uint16_t>()[i] = float_to_fp16(v); break;
      default: dst.data_as<float>()[i] = v; break;
    }
  }
}

// The dtype a reduction runs in on the host: fp32 for every float dtype.
DType reduction_dtype(const Tensor& x, const char* op, const std::string& group) {
  if (!is_float(x.dtype())) {
    throw_error(op, " on group '", group, "': reductions take float tensors, got ", dtype_name(x.dtype()));
  }
  return DType::kF32;
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> inner, backend::Backend& backend)
    : inner_(std::move(inner)), backend_(backend) {
  MT_CHECK(inner_ != nullptr) << "HostStagedCommunicator without an inner communicator";
}

Tensor HostStagedCommunicator::to_host(const Tensor& x, DType dtype) {
  if (x.device() == Device::kCPU && x.dtype() == dtype) return x;
  Tensor raw = x;
  if (x.device() != Device::kCPU) {
    raw = Tensor::cpu({x.numel()}, x.dtype());
    backend_.copy(x, raw);  // after the work queued on the device; blocks until the bytes are here
  }
  if (raw.dtype() == dtype) return raw;
  Tensor out = Tensor::cpu({x.numel()}, dtype);
  convert_on_host(raw, out);
  return out;
}

void HostStagedCommunicator::from_host(const Tensor& host, Tensor& x) {
  if (host.data() == x.data() && host.dtype() == x.dtype()) return;
  if (x.device() == Device::kCPU) {
    Tensor flat = x.view({x.numel()});
    convert_on_host(host, flat);
    return;
  }
  Tensor raw = host;
  if (host.dtype() != x.dtype()) {
    raw = Tensor::cpu({x.numel()}, x.dtype());
    convert_on_host(host, raw);
  }
  backend_.copy(raw, x);
}

void HostStagedCommunicator::all_reduce(Tensor& x, ReduceOp op) {
  if (x.numel() == 0) return;
  Tensor h = to_host(x, reduction_dtype(x, "all_reduce", name()));
  inner_->all_reduce(h, op);
  from_host(h, x);
}

void HostStagedCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) {
  check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
  MT_CHECK(out.dtype() == in.dtype()) << "reduce_scatter: dtypes differ";
  if (in.numel() == 0) return;
  const DType t = reduction_dtype(in, "reduce_scatter", name());
  if (in.device() == Device::kCPU && out.device() == Device::kCPU && in.dtype() == t) {
    inner_->reduce_scatter(in, out, counts, op);
    return;
  }
  // h_out is a buffer of its own, so the inner call is never in place (and `out` may be a
  // piece of `in`: its values are read before any is written).
  Tensor h_in = to_host(in, t);
  Tensor h_out = Tensor::cpu({out.numel()}, t);
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
  Tensor h_in = in.numel() == 0 ? Tensor::cpu({0}, in.dtype()) : to_host(in, in.dtype());
  Tensor h_out = Tensor::cpu({out.numel()}, out.dtype());
  inner_->all_gather(h_in, h_out, counts);
  from_host(h_out, out);
}

void HostStagedCommunicator::broadcast(Tensor& x, int64_t root) {
  if (x.numel() == 0) return;
  Tensor h = to_host(x, x.dtype());
  inner_->broadcast(h, root);
  if (rank() != root) from_host(h, x);
}

void HostStagedCommunicator::send(const Tensor& x, int64_t peer) {
  if (x.numel() == 0) return;
  inner_->send(to_host(x, x.dtype()), peer);
}

void HostStagedCommunicator::recv(Tensor& x, int64_t peer) {
  if (x.numel() == 0) return;
  if (x.device() == Device::kCPU) {
    inner_->recv(x, peer);
    return;
  }
  Tensor h = Tensor::cpu({x.numel()}, x.dtype());
  inner_->recv(h, peer);
  from_host(h, x);
}

void HostStagedCommunicator::send_recv(std::span<const PointToPoint> ops) {
  std::vector<PointToPoint> staged;
  staged.reserve(ops.size());
  for (const PointToPoint& op : ops) {
    PointToPoint s = op;
    if (op.tensor.numel() > 0 && op.tensor.device() != Device::kCPU) {
      s.tensor = op.send ? to_host(op.tensor, op.tensor.dtype()) : Tensor::cpu({op.tensor.numel()}, op.tensor.dtype());
    }
    staged.push_back(std::move(s));
  }
  inner_->send_recv(staged);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].send || staged[i].tensor.data() == ops[i].tensor.data()) continue;
    Tensor dst = ops[i].tensor;
    from_host(staged[i].tensor, dst);
  }
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int64_t color, int64_t key, const std::string& name) {
  std::unique_ptr<Communicator> sub = inner_->split(color, key, name);
  if (sub == nullptr) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(sub), backend_);
}

}  // namespace megatron::comm
