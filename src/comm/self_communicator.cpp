#include "comm/self_communicator.h"

#include <vector>

#include "core/error.h"

namespace megatron::comm {

SelfCommunicator::SelfCommunicator(backend::Backend& backend, std::string name)
    : backend_(backend), name_(std::move(name)) {}

void SelfCommunicator::copy_unless_same(const Tensor& src, Tensor& dst) {
  MT_CHECK_EQ(src.numel(), dst.numel());
  if (src.numel() == 0 || src.data() == dst.data()) return;
  backend_.copy(src, dst);
}

void SelfCommunicator::all_reduce(Tensor&, ReduceOp) {}
void SelfCommunicator::all_reduce_host(std::span<double>, ReduceOp) {}

void SelfCommunicator::reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp) {
  check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
  copy_unless_same(in, out);
}

void SelfCommunicator::all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) {
  check_pieces("all_gather", *this, out.numel(), in.numel(), counts);
  copy_unless_same(in, out);
}

void SelfCommunicator::broadcast(Tensor&, int64_t root) { MT_CHECK(root == 0) << "broadcast root " << root; }

void SelfCommunicator::send(const Tensor&, int64_t peer) {
  MT_CHECK(false) << "send to rank " << peer << " in the one-rank group '" << name_ << "'";
}

void SelfCommunicator::recv(Tensor&, int64_t peer) {
  MT_CHECK(false) << "recv from rank " << peer << " in the one-rank group '" << name_ << "'";
}

void SelfCommunicator::send_recv(std::span<const PointToPoint> ops) {
  // Sends to rank 0 (itself) pair with receives in posting order.
  std::vector<const PointToPoint*> sends, recvs;
  for (const PointToPoint& op : ops) {
    MT_CHECK(op.peer == 0) << "send_recv with rank " << op.peer << " in the one-rank group '" << name_ << "'";
    (op.send ? sends : recvs).push_back(&op);
  }
  MT_CHECK_EQ(sends.size(), recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    Tensor dst = recvs[i]->tensor;
    copy_unless_same(sends[i]->tensor, dst);
  }
}

std::unique_ptr<Communicator> SelfCommunicator::split(int64_t color, int64_t, const std::string& name) {
  if (color < 0) return nullptr;
  return std::make_unique<SelfCommunicator>(backend_, name);
}

}  // namespace megatron::comm
