#pragma once
// The accelerator: the one seam between the training loop and devices/processes (STYLE.md habit 8).
// The loop calls prepare, autocast, backward, reduce_sum, gather_for_metrics and is_main; it never
// looks at ranks, devices or precisions itself. World size 1 is the same code with the
// single-process collectives.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/accelerator/autocast.h"
#include "engine/accelerator/collectives.h"
#include "engine/accelerator/loss_scaler.h"
#include "engine/accelerator/world.h"
#include "engine/recipe/options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace engine {

struct AcceleratorOptions {
  std::string mixed_precision = "no";  // no | bf16 | fp16
  std::string device = "auto";         // auto | cpu | cuda
  int64_t threads = 0;                 // intra-op threads per process; 0 = this process's share of the cores
  int64_t processes = 1;               // `engine run` outside a job: local DDP processes; 0 = auto (layout.h)
  double timeout_s = 60;               // bound on every collective: a dead or stuck rank fails the job
  bool sync_batchnorm = true;          // BatchNorm statistics over the global batch in a DDP job
  static AcceleratorOptions read(Options& o);
};

class Accelerator {
 public:
  /// Reads the world from the environment (engine launch, torchrun, Slurm), checks the options
  /// against the machine (fp16 without CUDA is a UserError, not a silent fp32 run), sets the
  /// thread count and joins the process group.
  static std::unique_ptr<Accelerator> create(const AcceleratorOptions& options);
  /// The same for an explicit world; WorldInfo{} is one process that joins no job, whatever the
  /// environment says (engine predict, load_learner).
  static std::unique_ptr<Accelerator> create(const AcceleratorOptions& options, const WorldInfo& world);
  Accelerator(const AcceleratorOptions& options, WorldInfo world, std::unique_ptr<Collectives> collectives,
              torch::Device device, int64_t threads);

  const WorldInfo& world() const { return world_; }
  bool is_main() const { return world_.rank == 0; }
  torch::Device device() const { return device_; }
  int64_t threads() const { return threads_; }
  const std::string& mixed_precision() const { return opts_.mixed_precision; }
  /// "cpu, 2 processes x 1 thread (each rank on its own core), mixed precision: no"
  std::string describe() const;
  /// What the user should know about the precision on this machine, or "": bf16 on a CPU without
  /// AVX-512 runs LibTorch's slow fallback kernels (printed at the start of a run).
  std::string precision_note() const;

  /// Moves the model to the device and overwrites every rank's parameters and buffers with rank
  /// 0's: identical initial weights everywhere.
  void prepare(torch::nn::Module& model);
  /// Autocast region for forward + loss (no-op without mixed precision).
  AutocastGuard autocast() const;
  /// Backward of the (scaled) loss, then gradients averaged across ranks, then (fp16) unscaled
  /// and checked. Returns false when the optimizer step must be skipped (non-finite gradients);
  /// the decision is the same on every rank because it is taken on the averaged gradients.
  bool backward(const torch::Tensor& loss, const std::vector<torch::Tensor>& params);
  /// Gradient accumulation: the (scaled) backward of one micro-batch, no communication. The
  /// last micro-batch of an optimizer step calls backward(loss, params), which syncs them all.
  void backward_local(const torch::Tensor& loss);
  /// Gradients averaged across ranks, then (fp16) unscaled and checked: backward() after its
  /// local part. `params` are the trainable ones only: a frozen parameter gets no gradient.
  bool sync_gradients(const std::vector<torch::Tensor>& params);
  /// The optimizer step of a training step, after its backward_local calls: gradients averaged
  /// across ranks (fp16: unscaled and checked), clipped to a total norm of `clip_norm` when > 0,
  /// then optimizer.step(). In a single-node DDP job whose optimizer can split its step
  /// (components/optimizers/shardable_step.h: FlatAdamW), without clipping or fp16, the average and
  /// the update are one pass split over the ranks: the same parameters and moments to the bit, each
  /// rank updating 1/world of them (ENGINE_SPLIT_STEP=0: every rank steps all of them); the
  /// gradients are then left unaveraged. Returns false when the step was skipped (non-finite fp16
  /// gradients).
  bool step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, double clip_norm);
  /// Overwrites every rank's buffers (BatchNorm running statistics) with rank 0's, as PyTorch
  /// DDP's broadcast_buffers does. In training mode BatchNorm normalises with batch statistics,
  /// so the running statistics only matter for evaluation and saving, where this is called.
  void broadcast_buffers(torch::nn::Module& model);
  /// In-place sum over ranks of a tensor a model computes in training (SyncBatchNorm's statistics),
  /// counted as communication time. The identity with one process.
  void all_reduce_sum(torch::Tensor& t);
  bool sync_batchnorm() const { return opts_.sync_batchnorm && world_.distributed(); }
  /// Element-wise sums over ranks (metric counts, loss sums). Exact: never averages of averages.
  std::vector<double> reduce_sum(const std::vector<double>& values);
  /// Every rank's rows, concatenated in rank order. With the contiguous, unpadded eval shards of
  /// engine/data/sampler.h that is dataset order with every sample exactly once.
  torch::Tensor gather_for_metrics(const torch::Tensor& local);
  void barrier();
  LossScaler& scaler() { return scaler_; }
  /// Wall seconds this rank spent in the training collectives (gradient all-reduce, reduce_sum; in a
  /// split step (step()) its barriers, not its update) since the last call, waits for a slower rank
  /// included; resets the count. 0 with one process.
  double take_comm_seconds();

 private:
  AcceleratorOptions opts_;
  WorldInfo world_;
  std::unique_ptr<Collectives> coll_;
  torch::Device device_;
  int64_t threads_;
  int pinned_cores_ = 0;  // cores in this rank's slice when create() pinned it (cpu_threads.h), else 0
  LossScaler scaler_;
  double comm_seconds_ = 0;
};

}  // namespace engine
