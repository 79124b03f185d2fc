// Megatron-LM's TensorBoard tag names, spelled exactly as Megatron writes them, so that
// dashboards and scripts built for Megatron runs read ours unchanged.
//
// Source: NVIDIA/Megatron-LM megatron/training/training.py, training_log() and
// evaluate_and_print_results(). Megatron writes every training tag twice: "<name>" with
// x-axis = iteration and "<name> vs samples" with x-axis = args.consumed_train_samples.
// Training tags are written every --tensorboard-log-interval iterations (default 1), by
// the last rank; validation tags after each evaluation.
#pragma once

#include <string_view>

namespace megatron::tb_tags {

// --- training_log(), every --tensorboard-log-interval iterations --------------------------
// Learning rate (current Megatron: always; older versions: --log-learning-rate-to-tensorboard, on by default).
inline constexpr std::string_view kLearningRate = "learning-rate";                      // x: iteration
inline constexpr std::string_view kLearningRateVsSamples = "learning-rate vs samples";  // x: consumed samples
// Global batch size = micro batch * DP * micro batches (current Megatron: always; older:
// --log-batch-size-to-tensorboard).
inline constexpr std::string_view kBatchSize = "batch-size";                      // x: iteration
inline constexpr std::string_view kBatchSizeVsSamples = "batch-size vs samples";  // x: consumed samples
// One pair per loss_dict key, tag = key and key + " vs samples"; for GPT the key is "lm loss".
inline constexpr std::string_view kLmLoss = "lm loss";                      // x: iteration
inline constexpr std::string_view kLmLossVsSamples = "lm loss vs samples";  // x: consumed samples
// Loss scale (dynamic with fp16, 1.0 otherwise); --log-loss-scale-to-tensorboard, on by default.
inline constexpr std::string_view kLossScale = "loss-scale";                      // x: iteration
inline constexpr std::string_view kLossScaleVsSamples = "loss-scale vs samples";  // x: consumed samples
// Written only when a grad norm was computed (grad_norm is not None).
inline constexpr std::string_view kGradNorm = "grad-norm";                      // x: iteration
inline constexpr std::string_view kGradNormVsSamples = "grad-norm vs samples";  // x: consumed samples
// Only with --log-num-zeros-in-grad.
inline constexpr std::string_view kNumZeros = "num-zeros";                      // x: iteration
inline constexpr std::string_view kNumZerosVsSamples = "num-zeros vs samples";  // x: consumed samples
// Only with --log-params-norm.
inline constexpr std::string_view kParamsNorm = "params-norm";                      // x: iteration
inline constexpr std::string_view kParamsNormVsSamples = "params-norm vs samples";  // x: consumed samples

// --- training_log(), every --log-interval iterations, only with --log-timers-to-tensorboard
// Seconds per iteration averaged over the log interval (iteration only, no "vs samples").
inline constexpr std::string_view kIterationTime = "iteration-time";  // x: iteration
// TFLOP/s per GPU, additionally needs --log-throughput (iteration only).
inline constexpr std::string_view kThroughput = "throughput";  // x: iteration

// --- evaluate_and_print_results(), after each evaluation; "<key> validation..." per loss key
inline constexpr std::string_view kLmLossValidation = "lm loss validation";                      // x: iteration
inline constexpr std::string_view kLmLossValidationVsSamples = "lm loss validation vs samples";  // x: consumed samples
// exp(min(20, loss)); only with --log-validation-ppl-to-tensorboard.
inline constexpr std::string_view kLmLossValidationPpl = "lm loss validation ppl";  // x: iteration
inline constexpr std::string_view kLmLossValidationPplVsSamples =
    "lm loss validation ppl vs samples";  // x: consumed samples

// Every tag above, for tests and tools (bench/tensorboard_check.py lists the same names).
inline constexpr std::string_view kAll[] = {
    kLearningRate,
    kLearningRateVsSamples,
    kBatchSize,
    kBatchSizeVsSamples,
    kLmLoss,
    kLmLossVsSamples,
    kLossScale,
    kLossScaleVsSamples,
    kGradNorm,
    kGradNormVsSamples,
    kNumZeros,
    kNumZerosVsSamples,
    kParamsNorm,
    kParamsNormVsSamples,
    kIterationTime,
    kThroughput,
    kLmLossValidation,
    kLmLossValidationVsSamples,
    kLmLossValidationPpl,
    kLmLossValidationPplVsSamples,
};

// --- training_log(), every --tensorboard-log-interval iterations, with their flags (not in
// kAll's fixture). --log-memory-to-tensorboard: torch.cuda.memory_stats()'s current reserved
// bytes, allocated bytes and allocation count (ours: no caching allocator, so reserved ==
// allocated; the tracked tensors' bytes and live storages). --log-world-size-to-tensorboard.
inline constexpr std::string_view kMemReservedBytes = "mem-reserved-bytes";       // x: iteration
inline constexpr std::string_view kMemAllocatedBytes = "mem-allocated-bytes";     // x: iteration
inline constexpr std::string_view kMemAllocatedCount = "mem-allocated-count";     // x: iteration
inline constexpr std::string_view kWorldSize = "world-size";                      // x: iteration
inline constexpr std::string_view kWorldSizeVsSamples = "world-size vs samples";  // x: consumed samples

// --log-energy, at each log line (obs/energy_monitor.h): joules per iteration per GPU, and
// watts per GPU.
inline constexpr std::string_view kIterEnergyPerGpu = "iter-energy/gpu";  // x: iteration
inline constexpr std::string_view kPowerPerGpu = "power/gpu";             // x: iteration

// True for the tags whose x-axis (the event's step) is consumed samples rather than iteration.
constexpr bool is_vs_samples(std::string_view tag) { return tag.ends_with(" vs samples"); }

}  // namespace megatron::tb_tags
