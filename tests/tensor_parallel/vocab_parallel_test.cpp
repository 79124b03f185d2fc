// The vocab-parallel embedding and cross-entropy under mpirun -np 2 (TP 2) against the serial
// CPU ops on the whole vocabulary: every rank builds the same full inputs, keeps its slice,
// runs the parallel pieces and compares with the serial result.
#include "tensor_parallel/vocab_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "comm/mpi_communicator.h"
#include "support/mpi.h"
#include "tensor_parallel/mappings.h"

namespace megatron::tensor_parallel {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed, float scale) {
  Tensor t = Tensor::cpu(std::move(shape), DType::kF32);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(gen);
  return t;
}

// Columns [c0, c0 + cols) of a [rows, C] tensor.
Tensor columns(const Tensor& t, int64_t c0, int64_t cols) {
  const int64_t rows = t.dim(0), C = t.dim(1);
  Tensor out = Tensor::cpu({rows, cols}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data_as<float>() + r * cols, t.data_as<float>() + r * C + c0, static_cast<size_t>(cols) * 4);
  }
  return out;
}

TEST(VocabParallel, RangesAndLocalIds) {
  const VocabRange r1 = vocab_range(50432, 1, 2);
  EXPECT_EQ(r1.start, 25216);
  EXPECT_EQ(r1.size, 25216);
  EXPECT_EQ(localize_ids({0, 25215, 25216, 50431}, r1), (std::vector<int32_t>{-1, -1, 0, 25215}));
  EXPECT_EQ(localize_ids({0, 25215, 25216}, vocab_range(50432, 0, 2)), (std::vector<int32_t>{0, 25215, -1}));
}

// Loss and lse: the slices' log-sum-exps combined (each term in double, rounded to fp32, the
// fp32 terms summed over the ranks) against the serial fp32 row (sum in double): a few fp32
// ulps of lse (~8) and of the loss, hence 2e-6 relative. dlogits: each
// element exp(l - lse) - onehot with lse differing by those ulps: 1e-6 absolute (values <= 1).
TEST(VocabParallel, CrossEntropyMatchesTheSerialOp) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  auto backend = backend::make_cpu_backend();
  const int64_t n = 24, V = 40;
  const Tensor logits = random_tensor({n, V}, 7, 3.0f);
  Tensor labels = Tensor::cpu({n}, DType::kI32);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 13 + 5) % V);
  std::memcpy(labels.data(), ids.data(), static_cast<size_t>(n) * 4);
  Tensor ref_losses = Tensor::cpu({n}, DType::kF32), ref_lse = Tensor::cpu({n}, DType::kF32);
  backend->cross_entropy_forward(logits, labels, ref_losses, ref_lse);
  const Tensor dlosses = random_tensor({n}, 11, 1.0f);
  Tensor ref_dlogits = Tensor::cpu({n, V}, DType::kF32);
  backend->cross_entropy_backward(logits, labels, ref_lse, dlosses, ref_dlogits);

  const VocabRange range = vocab_range(V, tp->rank(), tp->size());
  const Tensor local = columns(logits, range.start, range.size);
  const std::vector<int32_t> local_ids = localize_ids(ids, range);
  Tensor local_labels = Tensor::cpu({n}, DType::kI32);
  std::memcpy(local_labels.data(), local_ids.data(), static_cast<size_t>(n) * 4);
  Tensor scratch = Tensor::cpu({n}, DType::kF32), lse = Tensor::cpu({n}, DType::kF32);
  Tensor losses = Tensor::cpu({n}, DType::kF32);
  vocab_parallel_cross_entropy(*backend, *tp, local, local_labels, scratch, losses, lse);
  for (int64_t i = 0; i < n; ++i) {
    const double want = ref_losses.data_as<float>()[i];
    EXPECT_NEAR(losses.data_as<float>()[i], want, 2e-6 * std::abs(want)) << "row " << i;
    EXPECT_NEAR(lse.data_as<float>()[i], ref_lse.data_as<float>()[i], 2e-6 * std::abs(ref_lse.data_as<float>()[i]));
  }
  Tensor dlocal = Tensor::cpu({n, range.size}, DType::kF32);
  backend->cross_entropy_backward(local, local_labels, lse, dlosses, dlocal);
  const Tensor want = columns(ref_dlogits, range.start, range.size);
  double sum = 0;
  for (int64_t i = 0; i < dlocal.numel(); ++i) {
    EXPECT_NEAR(dlocal.data_as<float>()[i], want.data_as<float>()[i], 1e-6) << "element " << i;
    sum += std::abs(want.data_as<float>()[i]);
  }
  EXPECT_GT(sum, 0.1);
}

// The embedding: one word row plus one position row plus exact zeros, so bit for bit.
TEST(VocabParallel, EmbeddingMatchesTheSerialOpBitwise) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  auto backend = backend::make_cpu_backend();
  const int64_t b = 2, s = 5, h = 6, V = 16, P = 8;
  const Tensor wte = random_tensor({V, h}, 3, 1.0f), wpe = random_tensor({P, h}, 4, 1.0f);
  std::vector<int32_t> ids(static_cast<size_t>(b * s));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 2) % V);
  Tensor tokens = Tensor::cpu({b, s}, DType::kI32);
  std::memcpy(tokens.data(), ids.data(), ids.size() * 4);
  Tensor ref = Tensor::cpu({s, b, h}, DType::kF32);
  backend->embedding_forward(tokens, Tensor(), wte, wpe, ref);

  const VocabRange range = vocab_range(V, tp->rank(), tp->size());
  Tensor local_wte = Tensor::cpu({range.size, h}, DType::kF32);
  std::memcpy(local_wte.data(), wte.data_as<float>() + range.start * h, static_cast<size_t>(range.size * h) * 4);
  const std::vector<int32_t> local_ids = localize_ids(ids, range);
  Tensor local_tokens = Tensor::cpu({b, s}, DType::kI32);
  std::memcpy(local_tokens.data(), local_ids.data(), local_ids.size() * 4);
  Tensor out = Tensor::cpu({s, b, h}, DType::kF32);
  backend->embedding_forward(local_tokens, Tensor(), local_wte, tp->rank() == 0 ? wpe : Tensor(), out);
  all_reduce_tp(*tp, out);
  EXPECT_EQ(std::memcmp(out.data(), ref.data(), static_cast<size_t>(ref.nbytes())), 0);

  // Backward: this rank's rows of dwte, and the whole dwpe, equal the serial ones bitwise.
  const Tensor dout = random_tensor({s, b, h}, 9, 1.0f);
  Tensor dwte = Tensor::cpu({V, h}, DType::kF32), dwpe = Tensor::cpu({P, h}, DType::kF32);
  std::memset(dwte.data(), 0, static_cast<size_t>(dwte.nbytes()));
  std::memset(dwpe.data(), 0, static_cast<size_t>(dwpe.nbytes()));
  backend->embedding_backward(tokens, Tensor(), dout, dwte, dwpe);
  Tensor ldwte = Tensor::cpu({range.size, h}, DType::kF32), ldwpe = Tensor::cpu({P, h}, DType::kF32);
  std::memset(ldwte.data(), 0, static_cast<size_t>(ldwte.nbytes()));
  std::memset(ldwpe.data(), 0, static_cast<size_t>(ldwpe.nbytes()));
  backend->embedding_backward(local_tokens, Tensor(), dout, ldwte, ldwpe);
  EXPECT_EQ(std::memcmp(ldwte.data(), dwte.data_as<float>() + range.start * h, static_cast<size_t>(ldwte.nbytes())), 0);
  EXPECT_EQ(std::memcmp(ldwpe.data(), dwpe.data(), static_cast<size_t>(ldwpe.nbytes())), 0);
}

}  // namespace
}  // namespace megatron::tensor_parallel
