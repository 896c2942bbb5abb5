// The world-of-1 stub (STYLE.md habit 8): the trainer calls the same collectives whatever the
// world size, and with one process each of them is the identity. No `if (distributed)` elsewhere.
#include <fmt/format.h>

#include "engine/accelerator/collectives.h"

namespace engine {
namespace {

class SingleProcessCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void all_reduce_sum(std::vector<torch::Tensor>& /*tensors*/) override {}
  void all_reduce_mean(std::vector<torch::Tensor>& /*tensors*/) override {}

  // Returns the caller's tensor itself, not a copy, as Gloo's path returns fresh tensors only
  // because they come off the wire. 0-dim tensors come back as shape [1], like the Gloo path, so
  // callers can torch::cat the result whatever the world size.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    return {tensor.dim() == 0 ? tensor.reshape({1}) : tensor};
  }

  void broadcast(std::vector<torch::Tensor>& /*tensors*/, int root) override {
    // A wrong root is a caller bug that would hang a real world: say so here too.
    if (root != 0) {
      throw std::invalid_argument(fmt::format("broadcast: root {} is not a rank of a world of size 1", root));
    }
  }

  void barrier() override {}
};

}  // namespace

std::unique_ptr<Collectives> make_single_process_collectives() {
  return std::make_unique<SingleProcessCollectives>();
}

}  // namespace engine
