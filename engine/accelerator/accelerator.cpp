#include "engine/accelerator/accelerator.h"

#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>
#include <torch/utils.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <utility>

#include "components/optimizers/shardable_step.h"
#include "engine/accelerator/bf16_emulation.h"
#include "engine/accelerator/gemm_rates.h"
#include "engine/accelerator/grad_span.h"
#include "engine/accelerator/shared_memory_collectives.h"
#include "engine/core/blas_kernels.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/env.h"
#include "engine/core/errors.h"

namespace engine {

AcceleratorOptions AcceleratorOptions::read(Options& o) {
  AcceleratorOptions a;
  a.mixed_precision = o.choice("mixed_precision", a.mixed_precision, {"no", "bf16", "fp16"},
                               "autocast dtype: bf16 (CPU or GPU), fp16 (GPU only, with dynamic loss scaling)");
  a.device = o.choice("device", a.device, {"auto", "cpu", "cuda"}, "auto = cuda when available, else cpu");
  a.threads = o.integer("threads", a.threads, "intra-op threads per process; 0 = the cores divided among local processes", 0, 1024);
  a.processes = o.integer("processes", a.processes,
                          "processes `engine run` starts on this machine when not already in a job: a local DDP job whose "
                          "ranks split data.batch_size, so results do not depend on it; 0 = auto (one per core on CPU, one "
                          "per GPU), as many as divide batch_size; ENGINE_PROCESSES overrides it",
                          0, 4096);
  a.sync_batchnorm = o.flag("sync_batchnorm", a.sync_batchnorm,
                             "in a job of several processes, BatchNorm layers normalise over every rank's samples (SyncBatchNorm: "
                             "N ranks train what one process trains on the whole batch); false = each rank's own samples, "
                             "PyTorch DDP's default, two all-reduces fewer per layer and step");
  a.timeout_s = o.number("timeout_s", a.timeout_s, "seconds a collective may wait for the other ranks before the job fails", 1, 86400);
  return a;
}

std::unique_ptr<Accelerator> Accelerator::create(const AcceleratorOptions& opts) { return create(opts, detect_world()); }

std::unique_ptr<Accelerator> Accelerator::create(const AcceleratorOptions& opts, const WorldInfo& world) {
  // engine's main() has done this already; a program that embeds the engine (examples/) gets it here,
  // before its first training step multiplies a matrix.
  select_blas_kernels();
  check_onednn_convs();  // before the first convolution (onednn_convs.h)
  const bool cuda = torch::cuda::is_available();
  if (opts.device == "cuda" && !cuda)
    throw UserError("accelerator.device = \"cuda\" but no CUDA device is available (this LibTorch build: " +
                    std::string(torch::cuda::is_available() ? "CUDA" : "CPU-only") + "); use device = \"auto\" or \"cpu\"");
  const bool use_cuda = opts.device == "cuda" || (opts.device == "auto" && cuda);
  if (opts.mixed_precision == "fp16" && !use_cuda)
    throw UserError("accelerator.mixed_precision = \"fp16\" needs a CUDA device and none is in use; "
                    "use \"bf16\" on CPU (Accelerate would silently train in fp32 here)");
  torch::Device device = use_cuda ? torch::Device(torch::kCUDA, world.local_rank) : torch::Device(torch::kCPU);
  if (opts.mixed_precision == "bf16" && !use_cuda) install_bf16_emulation();  // no-op where bf16 kernels are native

  // ENGINE_PIN_RANKS=1: the ranks of a job `engine launch` started on this machine (they share its
  // affinity) each take their own slice of the cores, before any thread pool starts. Opt-in, as
  // Accelerate's --enable_cpu_affinity: on 2 cores it measured neutral (bench/RESULTS.md,
  // "ranks pinned"). Never under torchrun or Slurm, whose tasks may already carry their own binding.
  int pinned = 0;
  if (!use_cuda && world.local_world_size > 1 && !world.rendezvous_file.empty() && env_is_one("ENGINE_PIN_RANKS"))
    pinned = pin_to_core_slice(world.local_rank, world.local_world_size);

  int64_t threads = opts.threads;
  if (threads == 0) {
    if (const char* env = std::getenv("ENGINE_THREADS")) threads = std::atoll(env);
    if (threads <= 0) threads = std::max<int64_t>(1, usable_cores() / std::max(1, world.local_world_size));
  }
  torch::set_num_threads(static_cast<int>(threads));
  set_blas_threads(static_cast<int>(threads));  // OpenBLAS keeps its own pool (cpu_threads.h)

  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.timeout_s * 1000));
  auto coll = !world.distributed() ? make_single_process_collectives()
              : use_cuda           ? make_nccl_collectives(world, timeout)
                                   : with_shared_memory_all_reduce(make_gloo_collectives(world, timeout), world, timeout);
  auto acc = std::make_unique<Accelerator>(opts, world, std::move(coll), device, threads);
  acc->pinned_cores_ = pinned;
  return acc;
}

Accelerator::Accelerator(const AcceleratorOptions& options, WorldInfo world, std::unique_ptr<Collectives> collectives,
                         torch::Device device, int64_t threads)
    : opts_(options),
      world_(world),
      coll_(std::move(collectives)),
      device_(device),
      threads_(threads),
      scaler_(LossScalerOptions{}, options.mixed_precision == "fp16") {}

std::string Accelerator::describe() const {
  std::string s = device_.is_cuda() ? "cuda" : "cpu";
  s += ", " + std::to_string(world_.world_size) + (world_.world_size == 1 ? " process" : " processes");
  s += " x " + std::to_string(threads_) + (threads_ == 1 ? " thread" : " threads");
  if (pinned_cores_ > 0) s += pinned_cores_ == 1 ? " (each rank on its own core)" : " (each rank on its own " + std::to_string(pinned_cores_) + " cores)";
  s += ", mixed precision: " + opts_.mixed_precision;
  return s;
}

std::string Accelerator::precision_note() const {
  if (opts_.mixed_precision != "bf16" || device_.is_cuda()) return "";
#if defined(__x86_64__) && defined(__GNUC__)
  // LibTorch 1.13's oneDNN bf16 convolutions and matmuls need AVX-512 (avx512bw); without it they
  // fall back to reference loops. Measured on a 2-core AVX2 AMD EPYC, resnet34 at 1 thread (the
  // digits_png recipe tests): 7 train img/s in bf16 vs 60 in fp32. bf16_emulation.h avoids them.
  const bool onednn_off = check_onednn_convs().turned_off;  // then LibTorch has no fast bf16 kernels
  if (__builtin_cpu_supports("avx512bw") && !onednn_off) {
    // Native bf16 kernels (oneDNN). Whether they beat float32 depends on the CPU: on a Zen 4 they ran
    // at 2x OpenBLAS's float32, on an Emerald Rapids without AMX at half of it. Measured, not assumed.
    const GemmRates r = measure_cpu_gemm_rates();
    if (r.bf16 >= r.float32) return "";
    return fmt::format("mixed_precision = \"bf16\": this CPU multiplies bf16 matrices at {:.0f} GFLOP/s and float32 "
                       "ones at {:.0f} (measured at start, {} thread{}): bf16 trains slower here than mixed_precision "
                       "= \"no\" (0.8x measured on such a CPU, bench/RESULTS.md)",
                       r.bf16, r.float32, threads_, threads_ == 1 ? "" : "s");
  }
  const char* why = onednn_off ? "with oneDNN off" : "on a CPU without AVX-512";
  if (install_bf16_emulation())
    return fmt::format("mixed_precision = \"bf16\" {}: convolutions and matmuls run as fp32 kernels on bf16-rounded "
                       "operands, output rounded to bf16 (native bf16's numbers at fp32 speed, without its memory "
                       "saving); ENGINE_BF16_EMULATION=0 uses LibTorch's own bf16 kernels",
                       why);
  return fmt::format("mixed_precision = \"bf16\" {}: LibTorch runs bf16 convolutions and matmuls in fallback kernels, "
                     "8-10x slower than fp32 (resnet34 measured); mixed_precision = \"no\" trains faster on this machine",
                     why);
#else
  return "";
#endif
}

void Accelerator::prepare(torch::nn::Module& model) {
  model.to(device_);
  std::vector<torch::Tensor> state;
  for (auto& p : model.parameters()) state.push_back(p.data());
  for (auto& b : model.buffers()) state.push_back(b);
  if (world_.distributed()) {
    torch::NoGradGuard no_grad;
    coll_->broadcast(state, 0);
  }
}

AutocastGuard Accelerator::autocast() const {
  const bool on = opts_.mixed_precision != "no";
  const auto dtype = opts_.mixed_precision == "fp16" ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
  return AutocastGuard(on, device_.type(), dtype);
}

bool Accelerator::backward(const torch::Tensor& loss, const std::vector<torch::Tensor>& params) {
  backward_local(loss);
  return sync_gradients(params);
}

void Accelerator::backward_local(const torch::Tensor& loss) { scaler_.scale_loss(loss).backward(); }

void Accelerator::broadcast_buffers(torch::nn::Module& model) {
  if (!world_.distributed()) return;
  std::vector<torch::Tensor> buffers;
  for (auto& b : model.buffers()) buffers.push_back(b);
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  coll_->broadcast(buffers, 0);
}

namespace {
// Adds the wall time of a scope to a counter.
struct Timed {
  double& total;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};
}  // namespace

double Accelerator::take_comm_seconds() { return std::exchange(comm_seconds_, 0.0); }

bool Accelerator::sync_gradients(const std::vector<torch::Tensor>& params) {
  if (world_.distributed()) {
    Timed timed{comm_seconds_};
    std::vector<torch::Tensor> grads;
    grads.reserve(params.size());
    for (const auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // every rank reduces the same list
      grads.push_back(p.grad());
    }
    // Gradients in one flat buffer (FlatAdamW's arena, from its first step on): one all-reduce of
    // that buffer, in place, the 1/world scaling fused where the transport can (shared memory).
    // Else one tensor each (bucketed by the transport).
    if (auto span = single_span(grads)) {
      std::vector<torch::Tensor> one{*span};
      coll_->all_reduce_mean(one);
    } else {
      coll_->all_reduce_mean(grads);
    }
  }
  if (!scaler_.enabled()) return true;
  const bool finite = scaler_.unscale_and_check(params);
  scaler_.update(!finite);
  return finite;
}

bool Accelerator::step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, double clip_norm) {
  static const bool split_off = switched_off("ENGINE_SPLIT_STEP");
  auto* split = dynamic_cast<ShardableStep*>(&optimizer);
  if (world_.distributed() && split && !split_off && !scaler_.enabled() && clip_norm <= 0) {
    std::vector<torch::Tensor> buffers;
    if (!split->begin_shared_step(buffers)) buffers.clear();  // every rank still calls update_shared
    double update_seconds = 0;
    bool done = false;
    {
      Timed timed{comm_seconds_};
      done = coll_->update_shared(buffers, [&](const std::vector<int64_t>& edges, const Collectives::PeerBuffers& peers) {
        Timed update{update_seconds};
        split->step_shared(edges, peers, world_.rank);
      });
    }
    comm_seconds_ -= update_seconds;  // communication: the waits, not the update (its sums included)
    if (done) return true;
    // A step that is not split follows: this rank's moments are made whole now, while every peer
    // still waits for the all-reduce below (past it, a peer updates the share read here).
    split->gather_shares();
  }
  const bool stepped = sync_gradients(params);
  if (stepped) {
    if (clip_norm > 0) torch::nn::utils::clip_grad_norm_(params, clip_norm);
    optimizer.step();
  }
  return stepped;
}

void Accelerator::all_reduce_sum(torch::Tensor& t) {
  if (!world_.distributed()) return;
  Timed timed{comm_seconds_};
  std::vector<torch::Tensor> v{t};
  coll_->all_reduce_sum(v);  // in place: v[0] is t
}

std::vector<double> Accelerator::reduce_sum(const std::vector<double>& values) {
  if (!world_.distributed() || values.empty()) return values;
  Timed timed{comm_seconds_};
  std::vector<torch::Tensor> t{torch::tensor(values, torch::kDouble)};
  coll_->all_reduce_sum(t);
  auto acc = t[0].accessor<double, 1>();
  std::vector<double> out(values.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = acc[i];
  return out;
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& local) {
  if (!world_.distributed()) return local;
  return torch::cat(coll_->all_gather(local.cpu().contiguous()), 0);
}

void Accelerator::barrier() {
  if (world_.distributed()) coll_->barrier();
}

}  // namespace engine
