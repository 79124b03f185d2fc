// GPTModel::reduce_layernorm_grads: the LayerNorms' gradients, and only they, are summed
// over the tensor-parallel group, packed into as few all-reduces as the gathered-rows workspace
// holds; with --qk-layernorm the query/key norms' gradients are summed too, with or without
// sequence parallelism (each rank normalises only its heads). A group of two ranks that holds the same values on both
// is simulated by a communicator whose all-reduce doubles its buffer (and logs its size): every LayerNorm gradient must
// come out doubled exactly once, every other one untouched, in the expected number of collectives, including the path
// where a single tensor fills the workspace.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/gpt_model.h"
#include "support/micro_batches.h"

namespace megatron::model {
namespace {

class DoublingCommunicator final : public comm::Communicator {
 public:
  explicit DoublingCommunicator(backend::Backend& backend) : backend_(backend) {}
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 2; }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor& x, comm::ReduceOp) override {
    sizes.push_back(x.numel());
    backend_.scale(x, 2.0f);
  }
  void all_reduce_host(std::span<double>, comm::ReduceOp) override { unexpected("all_reduce_host"); }
  void reduce_scatter(Tensor&, Tensor&, std::span<const int64_t>, comm::ReduceOp) override {
    unexpected("reduce_scatter");
  }
  void all_gather(const Tensor&, Tensor&, std::span<const int64_t>) override { unexpected("all_gather"); }
  void broadcast(Tensor&, int64_t) override { unexpected("broadcast"); }
  void send(const Tensor&, int64_t) override { unexpected("send"); }
  void recv(Tensor&, int64_t) override { unexpected("recv"); }
  void send_recv(std::span<const comm::PointToPoint>) override { unexpected("send_recv"); }
  void barrier() override {}
  std::unique_ptr<comm::Communicator> split(int64_t, int64_t, const std::string&) override { return nullptr; }

  std::vector<int64_t> sizes;  // numel of each all-reduce, in order

 private:
  static void unexpected(const char* op) { FAIL() << op << " in reduce_layernorm_grads"; }
  backend::Backend& backend_;
  std::string name_ = "tp";
};

// The shared tiny GPT (hidden 8: each LayerNorm tensor 8 floats) at sequence length `seq`.
GPTConfig tiny_config(int64_t seq) {
  GPTConfig c = test::tiny_gpt_config();
  c.seq_length = seq;
  c.max_position_embeddings = seq;
  return c;
}

struct Case {
  DType dtype;  // activations (the workspace's dtype); gradients are fp32
  int64_t seq, micro_batch;
  std::vector<int64_t> expected_sizes;  // 10 LayerNorm tensors of 8 floats
};

TEST(GPTModelSequenceParallel, LayerNormGradientsAreSummedOnceInPacks) {
  const Case cases[] = {
      {DType::kF32, 8, 2, {80}},                             // 16 rows x 8: all ten in one pack
      {DType::kF32, 2, 1, {16, 16, 16, 16, 16}},             // 2 rows: two tensors per pack
      {DType::kBF16, 4, 1, {16, 16, 16, 16, 16}},            // 4 rows of bf16: 16 floats
      {DType::kBF16, 2, 1, {8, 8, 8, 8, 8, 8, 8, 8, 8, 8}},  // one tensor fills it: in place
  };
  auto cpu = backend::make_cpu_backend();
  for (const Case& k : cases) {
    const std::string what = std::string(dtype_name(k.dtype)) + " seq " + std::to_string(k.seq);
    DoublingCommunicator tp(*cpu);
    TensorParallelOptions opts;
    opts.group = &tp;
    opts.sequence_parallel = true;
    GPTModel model(tiny_config(k.seq), *cpu, k.dtype, k.micro_batch, opts);
    ParameterSet& ps = model.parameters();
    float* g = ps.grads().data_as<float>();
    for (int64_t i = 0; i < ps.grads().numel(); ++i) g[i] = 0.25f + 0.001f * static_cast<float>(i);
    model.reduce_layernorm_grads();
    EXPECT_EQ(tp.sizes, k.expected_sizes) << what;
    int64_t layernorms = 0;
    for (const Parameter& p : ps.params()) {
      const bool layernorm = p.name.find("layernorm") != std::string::npos;
      layernorms += layernorm;
      const float* v = p.grad.data_as<const float>();
      for (int64_t e = 0; e < p.grad.numel(); ++e) {
        const float before = 0.25f + 0.001f * static_cast<float>(p.offset + e);
        ASSERT_EQ(v[e], layernorm ? 2.0f * before : before) << what << ": " << p.name << "[" << e << "]";
      }
    }
    EXPECT_EQ(layernorms, 10) << what;
  }
}

TEST(GPTModelSequenceParallel, QkNormGradientsAreSummedWithAndWithoutSequenceParallelism) {
  auto cpu = backend::make_cpu_backend();
  for (const bool sp : {false, true}) {
    GPTConfig c = tiny_config(8);
    c.qk_layernorm = true;
    DoublingCommunicator tp(*cpu);
    TensorParallelOptions opts;
    opts.group = &tp;
    opts.sequence_parallel = sp;
    GPTModel model(c, *cpu, DType::kF32, 2, opts);
    ParameterSet& ps = model.parameters();
    float* g = ps.grads().data_as<float>();
    for (int64_t i = 0; i < ps.grads().numel(); ++i) g[i] = 0.25f + 0.001f * static_cast<float>(i);
    model.reduce_layernorm_grads();
    // 2 layers x {q, k} x {weight, bias} of kv_channels 4; under sp the 10 LayerNorm tensors of 8
    // too. Either way one pack: ws.h2 (without sp) and ws.full hold 16 rows x 8 floats.
    EXPECT_EQ(tp.sizes, std::vector<int64_t>{sp ? 112 : 32}) << "sp " << sp;
    int64_t qk_norms = 0;
    for (const Parameter& p : ps.params()) {
      const bool qk =
          p.name.find("q_layernorm") != std::string::npos || p.name.find("k_layernorm") != std::string::npos;
      const bool summed = qk || (sp && p.name.find("layernorm") != std::string::npos);
      qk_norms += qk;
      const float* v = p.grad.data_as<const float>();
      for (int64_t e = 0; e < p.grad.numel(); ++e) {
        const float before = 0.25f + 0.001f * static_cast<float>(p.offset + e);
        ASSERT_EQ(v[e], summed ? 2.0f * before : before) << "sp " << sp << ": " << p.name << "[" << e << "]";
      }
    }
    EXPECT_EQ(qk_norms, 8);
  }
}

// One tensor-parallel rank has nothing to sum, with or without query/key norms.
TEST(GPTModelSequenceParallel, OneRankSumsNothing) {
  auto cpu = backend::make_cpu_backend();
  GPTConfig c = tiny_config(8);
  c.qk_layernorm = true;
  GPTModel model(c, *cpu, DType::kF32, 2);
  for (const Parameter& p : model.parameters().params()) EXPECT_FALSE(p.sum_grad_over_tp) << p.name;
}

}  // namespace
}  // namespace megatron::model
