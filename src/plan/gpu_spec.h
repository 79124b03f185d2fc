// The GPUs `megatron plan` knows: the numbers the throughput and memory models scale by.
//
// Every figure is a vendor datasheet value (dense, no sparsity) unless marked otherwise:
//   peak_tflops        dense 16-bit tensor-core peak (bf16; V100 has no bf16: its fp16 peak)
//   hbm_bytes_per_s    HBM bandwidth
//   memory_bytes       HBM capacity as nvidia-smi's memory.total reports it (H100 80GB HBM3
//                      81559 MiB, H200 143771 MiB, A100 40960 / 81920 MiB, V100 16160 / 32510 MiB);
//                      headroom for the CUDA context etc. is reserved separately (memory_model.h)
//   nvlink_bytes_per_s NVLink bandwidth per GPU, one direction (datasheets quote both
//                      directions together: H100 900 GB/s -> 450; A100 600 -> 300; V100 300 -> 150)
//   ib_bytes_per_s     default inter-node bandwidth per GPU, one direction: the NICs of the
//                      reference DGX system divided by its GPUs (DGX H100: 8x ConnectX-7 NDR
//                      400 Gb/s -> 50 GB/s; DGX A100 / Selene: 8x HDR 200 Gb/s -> 25 GB/s;
//                      DGX-1 V100: 4x EDR 100 Gb/s for 8 GPUs -> 6.25 GB/s). --inter-node-bandwidth
//                      overrides it for other clusters.
//   gemm_efficiency    the best achieved dense GEMM fraction of peak (cuBLAS, bf16/fp16), the
//                      ceiling of the GEMM efficiency curve: H100 794.5/989 = 0.803, A100
//                      271.2/312 = 0.869 (Bekman's MAMF table, docs/performance-references.md,
//                      "GEMM"; "H200 is the same" as H100); V100: 0.80, an assumption (no
//                      measurement in our sources).
//   int32_tops         32-bit integer operations per second / 1e12: SMs x 64 INT32 lanes x boost
//                      clock (H100 SXM 132 SMs at 1.98 GHz -> 16.7, H200 the same; A100 108 at
//                      1.41 -> 9.75; V100 80 at 1.53 -> 7.83), the rate that random-number
//                      generation inside a kernel (dropout in flash attention) scales with.
//   sms                multiprocessors: how many of a kernel's tiles run at once (flash
//                      attention's wave quantisation, throughput_model.h).
//   fp8_tflops         dense FP8 tensor-core peak (E4M3/E5M2 inputs, fp32 accumulation; 0: no FP8
//                      tensor cores). NVIDIA's H100 datasheet: H100 SXM FP8 Tensor Core 3,958
//                      TFLOP/s with sparsity, 1,979 dense, twice its bf16 989; H200 SXM the same
//                      figures (H200 datasheet). A100 and V100 have none.
// Sources: NVIDIA H100, H200, A100 and V100 datasheets as tabulated in
// docs/performance-references.md, "Peaks (dense, no sparsity)";
// DGX H100 / DGX A100 / DGX-1 system datasheets for the NIC counts.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace megatron::plan {

struct GpuSpec {
  const char* name;  // the --gpu spelling
  double peak_tflops;
  double hbm_bytes_per_s;
  double memory_bytes;
  double nvlink_bytes_per_s;
  double ib_bytes_per_s;
  double gemm_efficiency;
  double int32_tops;
  bool bf16;              // has bf16 tensor cores
  int sms;                // streaming multiprocessors (the SXM parts' datasheet counts)
  double fp8_tflops = 0;  // dense FP8 tensor-core peak; 0: none
};

const std::vector<GpuSpec>& gpu_specs();
// The spec named `name` (h100-80gb, h200-141gb, a100-40gb, a100-80gb, v100-16gb, v100-32gb);
// throws megatron::Error "[--gpu] unknown GPU 'x' (choose from ...)" otherwise.
const GpuSpec& find_gpu(const std::string& name);
std::string gpu_names();
// The spec name of a CUDA device name as the driver reports it ("NVIDIA H100 80GB HBM3" ->
// h100-80gb, "NVIDIA A100-SXM4-40GB" -> a100-40gb, "NVIDIA H200" -> h200-141gb, "Tesla
// V100-SXM2-32GB" -> v100-32gb); nullopt for GPUs the planner has no figures for: GH200, the NVL
// and PCIe cards (other clocks and power than the SXM parts), MIG slices.
std::optional<std::string> gpu_for_device_name(const std::string& device_name);

}  // namespace megatron::plan
