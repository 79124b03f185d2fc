// GPTModel under tensor parallelism (mpirun -np 2): the column-parallel linears' input-gradient
// reductions are started collectives overlapped with the weight-gradient GEMM, and under
// sequence parallelism the gathers of their inputs started collectives overlapped with the
// input-gradient GEMM (GPTModel::column_backward). Through a DeferredCommunicator, which runs each started
// collective only at wait() and poisons its buffers until then, the gradients and loss must be
// the blocking group's bits: a read of the reduced gradient before the wait (NaN) or a write
// into a buffer in flight fails the test. With and without sequence parallelism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/ops.h"
#include "comm/mpi_communicator.h"
#include "model/gpt_model.h"
#include "support/deferred_communicator.h"
#include "support/micro_batches.h"
#include "support/mpi.h"

namespace megatron::model {
namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.init_method_std = 0.3f;
  return c;
}

struct Result {
  float loss = 0.0f;
  std::vector<float> grads;
};

Result forward_backward(const GPTConfig& c, comm::Communicator& tp, bool sp) {
  auto cpu = backend::make_cpu_backend();
  TensorParallelOptions opts;
  opts.group = &tp;
  opts.sequence_parallel = sp;
  GPTModel model(c, *cpu, DType::kF32, 2, opts);
  model.parameters().initialize(*cpu, 11, c.init_method_std, c.num_layers);
  Result r;
  r.loss = model.forward(test::random_micro_batch(2, c.seq_length, c.vocab_size, 7, false), {});
  model.backward(1.0f, 1.0f);
  const Tensor& g = model.parameters().grads();
  r.grads.resize(static_cast<size_t>(g.numel()));
  std::memcpy(r.grads.data(), g.data(), r.grads.size() * sizeof(float));
  return r;
}

TEST(GPTModelTensorParallel, InputGradientReductionsAreReadOnlyAfterTheirWait) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  const GPTConfig c = tiny_config();
  for (bool sp : {false, true}) {
    const Result blocking = forward_backward(c, *world, sp);
    test::DeferredCommunicator deferred(*world);
    const Result late = forward_backward(c, deferred, sp);
    // QKV and FC1 of each layer and the output layer: 5 deferred reductions, and under
    // sequence parallelism deferred gathers of the layers' inputs (the output layer's are still
    // gathered from its forward).
    EXPECT_EQ(deferred.deferred(), (2 * c.num_layers + 1) + (sp ? 2 * c.num_layers : 0)) << "sp " << sp;
    EXPECT_EQ(late.loss, blocking.loss) << "sp " << sp;
    ASSERT_EQ(late.grads.size(), blocking.grads.size());
    for (size_t i = 0; i < late.grads.size(); ++i) {
      ASSERT_FALSE(std::isnan(late.grads[i])) << "sp " << sp << ", gradient " << i;
      ASSERT_EQ(late.grads[i], blocking.grads[i]) << "sp " << sp << ", gradient " << i;
    }
  }
}

}  // namespace
}  // namespace megatron::model
