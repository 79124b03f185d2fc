// Rotary frequencies (backend/rotary_frequencies.h) against numpy: Debian's python3 computes
// Megatron-Core's inv_freq and Llama 3.1 rescaling in float32 with numpy, operation by
// operation as PyTorch evaluates RotaryEmbedding (a / t on a tensor is reciprocal(t) * a), and
// prints the bits; the C++ values must match them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/rotary_frequencies.h"
#include "support/paths.h"

namespace megatron::backend {
namespace {

// Input lines "rot_dim base factor bits..." (bits: our unscaled inv_freq as hex float32 bits);
// output per line: numpy's inv_freq bits, then "|", then numpy's scaling of OUR inv_freq (so a
// one-ulp powf difference in the first part cannot hide or fake one in the second).
constexpr const char* kReference = R"PY(
import sys
import numpy as np

f32 = np.float32

def inv_freq(r, base):
    exponent = np.arange(0, r, 2, dtype=np.float32) / f32(r)
    # base ** exponent correctly rounded to float32 (computed in float64), then the float32
    # reciprocal: the two roundings of the C++ (powf, 1 / x) with an exact power.
    power = (np.float64(base) ** exponent.astype(np.float64)).astype(np.float32)
    return f32(1.0) / power

def scale(freqs, factor, low=1.0, high=4.0, context=8192.0):
    factor, low, high, context = f32(factor), f32(low), f32(high), f32(context)
    wavelen = (f32(1.0) / freqs) * f32(2 * np.pi)
    llama = np.where(wavelen > context / low, freqs / factor, freqs)
    smooth = ((f32(1.0) / wavelen) * context - low) / (high - low)
    smoothed = (f32(1.0) - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < context / high) & ~(wavelen > context / low)
    return np.where(medium, smoothed, llama).astype(np.float32)

def hexes(a):
    return " ".join("%08x" % v for v in np.asarray(a, dtype=np.float32).view(np.uint32))

for line in sys.stdin:
    parts = line.split()
    r, base, factor = int(parts[0]), float(parts[1]), float(parts[2])
    ours = np.array([int(h, 16) for h in parts[3:]], dtype=np.uint32).view(np.float32)
    print(hexes(inv_freq(r, base)) + " | " + hexes(scale(ours, factor)))
)PY";

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::string hex(float f) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", bits(f));
  return buf;
}

// Distance in ulps of two positive floats.
int64_t ulps(float a, float b) { return std::llabs(static_cast<int64_t>(bits(a)) - static_cast<int64_t>(bits(b))); }

struct Case {
  int64_t rot_dim;
  double base, factor;
};

TEST(RotaryFrequencies, MatchNumpy) {
  const std::vector<Case> cases = {{128, 10000.0, 8.0},  {128, 500000.0, 8.0}, {64, 10000.0, 32.0},
                                   {96, 1000000.0, 8.0}, {2, 10000.0, 8.0},    {80, 500000.0, 16.0}};
  const std::string dir = test::scratch_dir("rotary_frequencies");
  {
    std::ofstream(dir + "/reference.py") << kReference;
    std::ofstream in(dir + "/in.txt");
    for (const Case& c : cases) {
      in << c.rot_dim << " " << c.base << " " << c.factor;
      for (const float f : rotary_inv_freq(c.rot_dim, c.base)) in << " " << hex(f);
      in << "\n";
    }
  }
  const test::CommandResult r =
      test::run_command("/usr/bin/python3 " + dir + "/reference.py < " + dir + "/in.txt", true);
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int64_t exact = 0, total = 0, scaled_changed = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(std::getline(lines, line)) << "numpy printed too few lines: " << r.output;
    std::istringstream words(line);
    const std::vector<float> ours = rotary_inv_freq(c.rot_dim, c.base);
    std::vector<float> scaled = ours;
    apply_rope_scaling(scaled, RopeScaling{static_cast<float>(c.factor)});
    for (size_t i = 0; i < ours.size(); ++i) {
      std::string w;
      words >> w;
      uint32_t u = static_cast<uint32_t>(std::stoul(w, nullptr, 16));
      float ref;
      std::memcpy(&ref, &u, sizeof(ref));
      // glibc's powf is within 0.52 ulp of the exact power (almost always the correctly rounded
      // value); one ulp of the power can become two of its reciprocal (across a binade).
      // PyTorch's powf (Sleef on the CPU, CUDA's on the GPU) is within a few ulps likewise:
      // Megatron's own bits differ by that much between its devices.
      EXPECT_LE(ulps(ours[i], ref), 2) << "inv_freq[" << i << "] of r " << c.rot_dim << " base " << c.base;
      exact += ours[i] == ref;
      ++total;
    }
    std::string bar;
    words >> bar;
    ASSERT_EQ(bar, "|") << line;
    for (size_t i = 0; i < ours.size(); ++i) {
      std::string w;
      words >> w;
      uint32_t u = static_cast<uint32_t>(std::stoul(w, nullptr, 16));
      EXPECT_EQ(bits(scaled[i]), u) << "scaled inv_freq[" << i << "] of r " << c.rot_dim << " base " << c.base
                                    << " factor " << c.factor;
      scaled_changed += scaled[i] != ours[i];
    }
  }
  EXPECT_GE(exact, total * 9 / 10) << "most frequencies are the same bits";
  EXPECT_GT(scaled_changed, 0) << "the cases reach the scaled bands";
}

// Fixed points: inv_freq[0] = 1 (base^0), the Llama 3.1 bands at their ends.
TEST(RotaryFrequencies, EndsAndBands) {
  const std::vector<float> inv = rotary_inv_freq(128, 500000.0);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[63], std::pow(500000.0, -126.0 / 128.0), 1e-12);
  std::vector<float> scaled = inv;
  apply_rope_scaling(scaled, RopeScaling{8.0f});
  // Wavelengths below 8192 / 4 = 2048 keep their frequency; above 8192 are divided by 8.
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2.0 * M_PI / inv[i];
    if (wavelen < 2000.0) {
      EXPECT_EQ(scaled[i], inv[i]) << i;
    }
    if (wavelen > 8300.0) {
      EXPECT_EQ(scaled[i], inv[i] / 8.0f) << i;
    }
    if (wavelen > 2100.0 && wavelen < 8100.0) {
      EXPECT_LT(scaled[i], inv[i]) << i;
      EXPECT_GT(scaled[i], inv[i] / 8.0f) << i;
    }
  }
}

TEST(RotaryFrequencies, RotaryDimAndPositionScale) {
  EXPECT_EQ(rotary_dim(128, 1.0), 128);
  EXPECT_EQ(rotary_dim(128, 0.5), 64);
  EXPECT_EQ(rotary_dim(80, 0.25), 20);
  EXPECT_DEATH(rotary_dim(10, 0.3), "rotary-percent");  // 3 dims: odd
  EXPECT_EQ(rotary_position_scale(0.0), 1.0f);
  EXPECT_EQ(rotary_position_scale(4.0), 0.25f);
  EXPECT_EQ(rotary_position_scale(3.0), static_cast<float>(1.0 / 3.0));
}

}  // namespace
}  // namespace megatron::backend
