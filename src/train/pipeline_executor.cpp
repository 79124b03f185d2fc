#include "train/pipeline_executor.h"

#include "core/error.h"

namespace megatron::train {

double run_pipeline(const std::vector<parallel::PipelineAction>& table, model::GPTModel& model, comm::Communicator& pp,
                    const PipelineCallbacks& cb) {
  auto set_of = [&](int64_t chunk, int64_t k) { return k % model.activation_sets(chunk); };
  double loss = 0.0;
  model::MicroBatch mb;
  std::vector<comm::PointToPoint> ops;
  for (const parallel::PipelineAction& a : table) {
    switch (a.op) {
      case parallel::PipelineOp::kForward: {
        const bool needs_batch = model.is_first_virtual(a.chunk) || model.is_last_virtual(a.chunk);
        if (needs_batch) cb.load(a.micro_batch, &mb);
        loss += model.forward_chunk(a.chunk, set_of(a.chunk, a.micro_batch), needs_batch ? &mb : nullptr,
                                    cb.dropout(a.micro_batch), cb.head);
        break;
      }
      case parallel::PipelineOp::kBackward:
        MT_CHECK(cb.head != nullptr) << "backward in a forward-only pipeline";
        model.backward_chunk(a.chunk, set_of(a.chunk, a.micro_batch));
        break;
      case parallel::PipelineOp::kComm: {
        ops.clear();
        for (const parallel::P2PMessage& m : a.messages) {
          const int64_t set = set_of(m.chunk, m.micro_batch);
          Tensor t = m.send ? (m.gradient ? model.input_grad() : model.output(m.chunk, set))
                            : (m.gradient ? model.output_grad_buffer() : model.input_buffer(m.chunk, set));
          ops.push_back({m.send, t, m.peer});
        }
        pp.send_recv(ops);
        break;
      }
    }
  }
  return loss;
}

}  // namespace megatron::train
