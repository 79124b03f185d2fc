// --log-progress (Megatron's append_to_progress_log): rank 0 appends one tab-separated line to
// <--save>/progress.txt when a job starts and at every checkpoint, so that the throughput of a
// run that spans many jobs (restarts, preemptions) can be read in one place:
//   2026-11-25 10:00:00\tJob ID: 4242\t# GPUs: 8\tStarting job
//   2026-11-25 11:00:00\tJob ID: 4242\t# GPUs: 8\tSaved checkpoint\tIteration: 1000\t
//     Job throughput: 402.1 TFLOP/s/GPU\tCumulative throughput: 398.7 TFLOP/s/GPU\t
//     Floating-point operations: 1.23e+19\tTokens (in billions): 2.05
// ("Saving async checkpoint" with --async-save, whose writes are still going on). The job ID is
// $SLURM_JOB_ID (empty elsewhere). Job throughput: the model FLOPs since this job started over
// its wall time (from the earliest rank's start) and the GPUs; cumulative: the same since the
// first "Starting job" of the run of jobs with this many GPUs, from the FLOPs of the last
// checkpoint saved before it (a different GPU count starts a new run, as in Megatron). The FLOPs
// so far are the consumed samples times the log line's per-sample FLOPs, so a resumed job
// continues the count.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace megatron::obs {

// "YYYY-mm-dd HH:MM:SS\tJob ID: <id>\t# GPUs: <gpus>\t<text>\n" (local time).
std::string progress_line(std::chrono::system_clock::time_point when, const std::string& job_id, int64_t gpus,
                          const std::string& text);

// Where the cumulative throughput of `gpus` GPUs starts, read from progress.txt's contents: the
// time of the first "Starting job" after the last line with another GPU count, and the FLOPs of
// the last checkpoint saved before it (0 if none). nullopt when there is no such line.
struct ProgressStart {
  std::chrono::system_clock::time_point time;
  double flops = 0.0;
};
std::optional<ProgressStart> cumulative_start(const std::string& contents, int64_t gpus);

// "Saved checkpoint\tIteration: ...\tTokens (in billions): ..." (or "Saving async checkpoint").
std::string checkpoint_progress_text(bool async, int64_t iteration, double job_tflops_per_gpu,
                                     double cumulative_tflops_per_gpu, double flops_so_far, double tokens_so_far);

// Appends `line` to `path`, creating the file and its directory. Throws megatron::Error naming
// --log-progress and the path.
void append_progress_line(const std::string& path, const std::string& line);

}  // namespace megatron::obs
