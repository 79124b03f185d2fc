// --log-energy and --codecarbon-dir through the training loop, with a fake energy counter that
// spends 1e6 J between any two readings: the monitor reads it once at the start and once per
// log line (and at the end), so each log interval of 2 iterations counts 1e6 J, i.e. 5e5 J per
// iteration on one GPU; the total over the run's 3 laps is 3 MJ; emissions.csv holds 3e6 J
// = 0.8333 kWh and, at 400 g/kWh, 0.3333 kg; TensorBoard gets Megatron's two tags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "cli/args.h"
#include "cli/train_args.h"
#include "support/paths.h"
#include "support/walk_corpus.h"
#include "train/trainer.h"

namespace megatron::train {
namespace {

class SteppingCounter final : public backend::EnergyCounter {
 public:
  std::optional<int64_t> millijoules() override {
    mj_ += 1'000'000'000;
    return mj_;
  }

 private:
  int64_t mj_ = 0;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TrainerEnergy, LogLineTotalCsvAndTensorBoard) {
  const std::string dir = test::scratch_dir("trainer_energy");
  std::filesystem::remove_all(dir + "/cc");
  std::filesystem::remove_all(dir + "/tb");
  const std::vector<std::string> flags = {"--num-layers",
                                          "1",
                                          "--hidden-size",
                                          "16",
                                          "--num-attention-heads",
                                          "2",
                                          "--seq-length",
                                          "8",
                                          "--micro-batch-size",
                                          "2",
                                          "--global-batch-size",
                                          "4",
                                          "--train-iters",
                                          "4",
                                          "--lr",
                                          "1e-3",
                                          "--log-interval",
                                          "2",
                                          "--eval-iters",
                                          "0",
                                          "--data-path",
                                          test::write_walk_corpus(dir),
                                          "--data-cache-path",
                                          dir + "/cache",
                                          "--vocab-file",
                                          test::gpt2_vocab_file(),
                                          "--merge-file",
                                          test::gpt2_merge_file(),
                                          "--log-energy",
                                          "--codecarbon-dir",
                                          dir + "/cc",
                                          "--carbon-intensity-g-per-kwh",
                                          "400",
                                          "--tensorboard-dir",
                                          dir + "/tb"};
  cli::Args args("train");
  cli::declare_train_flags(args);
  ASSERT_TRUE(args.parse(flags));
  TrainConfig c = cli::parse_train_config(args);
  c.model.vocab_size = 40;
  c.model.padded_vocab_size = model::padded_vocab_size(40, 8, 1);
  auto backend = backend::make_cpu_backend();
  std::ostringstream out;
  {
    Trainer trainer(c, *backend, out);
    trainer.set_energy_counter(std::make_unique<SteppingCounter>());
    trainer.run();
  }
  const std::string log = out.str();
  const std::regex field(
      R"(elapsed time per iteration \(ms\): ([0-9.]+) \| energy per GPU \(J/iter/GPU\): ([0-9.]+) \| power per GPU \(W/GPU\): ([0-9.]+) \|)");
  int lines = 0;
  for (std::sregex_iterator m(log.begin(), log.end(), field), end; m != end; ++m, ++lines) {
    EXPECT_EQ((*m)[2].str(), "500000.0");
    // power = energy / seconds per iteration (the printed ms are rounded to 0.1).
    const double ms = std::stod((*m)[1]), watts = std::stod((*m)[3]);
    EXPECT_GE(watts, 0.999 * 5e5 / ((ms + 0.05) / 1000.0)) << log;
    if (ms > 0.05) EXPECT_LE(watts, 1.001 * 5e5 / ((ms - 0.05) / 1000.0)) << log;
  }
  EXPECT_EQ(lines, 2) << log;
  EXPECT_NE(log.find("Total training energy (GPU): 3.000 MJ\n"), std::string::npos) << log;

  const std::string csv = read_all(dir + "/cc/emissions.csv");
  std::smatch row;
  ASSERT_TRUE(std::regex_search(
      csv, row,
      std::regex(R"(\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,megatron,[0-9a-f-]{36},([0-9.e-]+),([0-9.e-]+),[0-9.e-]+,)"
                 R"([0-9.e+-]+,([0-9.e-]+),([0-9.e-]+),1,1.0\n$)")))
      << csv;
  EXPECT_NEAR(std::stod(row[3]), 3e6 / 3.6e6, 1e-12);        // gpu_energy, kWh
  EXPECT_NEAR(std::stod(row[4]), 3e6 / 3.6e6, 1e-12);        // energy_consumed
  EXPECT_NEAR(std::stod(row[2]), 3e6 / 3.6e6 * 0.4, 1e-12);  // kg CO2eq
  EXPECT_GT(std::stod(row[1]), 0.0);

  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/tb")) events += read_all(e.path().string());
  EXPECT_NE(events.find("iter-energy/gpu"), std::string::npos);
  EXPECT_NE(events.find("power/gpu"), std::string::npos);
}

}  // namespace
}  // namespace megatron::train
