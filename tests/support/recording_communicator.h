// A group of two ranks that moves no data and logs, in order, what is started
// and waited for: "start <op> [a, b)" and "wait <op> [a, b)", with [a, b) the element offsets
// of the collective's buffer inside whichever of `bases` (flat buffers: a ParameterSet's grads
// or values) holds it. Blocking collectives log "blocking <op>". For the overlap tests of
// train/grad_buffer and train/pipeline_executor (as the data-parallel or the pipeline group).
// Other entries may be appended to `log` by the test itself (hook calls, computes) to check
// the interleaving.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace megatron::test {

class RecordingCommunicator final : public comm::Communicator {
 public:
  explicit RecordingCommunicator(std::vector<Tensor> bases) : bases_(std::move(bases)) {}
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 2; }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor&, comm::ReduceOp) override { log.push_back("blocking all_reduce"); }
  void all_reduce_host(std::span<double>, comm::ReduceOp) override {}
  void reduce_scatter(Tensor&, Tensor&, std::span<const int64_t>, comm::ReduceOp) override {
    log.push_back("blocking reduce_scatter");
  }
  void all_gather(const Tensor&, Tensor&, std::span<const int64_t>) override { log.push_back("blocking all_gather"); }
  void broadcast(Tensor&, int64_t) override {}
  void send(const Tensor&, int64_t) override {}
  void recv(Tensor&, int64_t) override {}
  // Pipeline exchanges (with `p2p_name` set): logged as "blocking <ops>", "start <ops>" and
  // "wait <ops>", <ops> the messages in order as "send <name>" / "recv <name>"; receives are
  // filled with zeros when posted.
  void send_recv(std::span<const comm::PointToPoint> ops) override;
  std::unique_ptr<comm::PendingCollective> start_send_recv(std::span<const comm::PointToPoint> ops) override;
  void barrier() override {}
  std::unique_ptr<comm::Communicator> split(int64_t, int64_t, const std::string&) override { return nullptr; }
  std::unique_ptr<comm::PendingCollective> start_all_reduce(Tensor& x, comm::ReduceOp) override;
  std::unique_ptr<comm::PendingCollective> start_reduce_scatter(Tensor& in, Tensor&, std::span<const int64_t>,
                                                                comm::ReduceOp) override;
  std::unique_ptr<comm::PendingCollective> start_all_gather(const Tensor&, Tensor& out,
                                                            std::span<const int64_t>) override;
  // Copy engines: with `copy_engine_available`, enable_copy_engine succeeds and logs
  // "enable_copy_engine <max_reduce_scatter> over <where of each buffer>" (without: off, because
  // "no copy engines here"); use_copy_engine logs "copy engine on" / "copy engine off".
  comm::CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) override;
  void use_copy_engine(bool on) override { log.push_back(on ? "copy engine on" : "copy engine off"); }
  bool copy_engine_available = false;
  // "[a, b)" of `t` in the base that holds it.
  std::string where(const Tensor& t) const;

  std::vector<std::string> log;
  std::vector<comm::ReduceOp> reduce_ops;  // of every started all-reduce / reduce-scatter, in order
  // The test's name for a pipeline buffer (required for send_recv / start_send_recv).
  std::function<std::string(const Tensor&)> p2p_name;
  // Called with each started collective's entry as it is logged: a look at the buffers then.
  std::function<void(const std::string&)> on_start;

 private:
  std::unique_ptr<comm::PendingCollective> started(const char* op, const Tensor& t);
  std::string exchange(std::span<const comm::PointToPoint> ops);
  std::vector<Tensor> bases_;
  std::string name_ = "dp";
};

}  // namespace megatron::test
