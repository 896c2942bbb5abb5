// Gradients kept in one flat buffer by the optimizer are zeroed and all-reduced as one tensor; any
// other set of gradients still works one tensor at a time.
#include "engine/accelerator/grad_span.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "components/optimizers/adamw.h"
#include "components/optimizers/optimizer.h"
#include "engine/accelerator/accelerator.h"
#include "tests/components/models/mnist_batch.h"

using namespace engine;

namespace {

// A world of 2 whose peer holds the same gradients: all_reduce_sum doubles, and it records what
// it was given.
struct RecordingPeer : Collectives {
  std::vector<size_t> all_reduce_calls;  // tensors per call
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override {
    all_reduce_calls.push_back(tensors.size());
    for (auto& t : tensors) t.mul_(2);
  }
  std::vector<torch::Tensor> all_gather(const torch::Tensor& t) override { return {t, t}; }
  void broadcast(std::vector<torch::Tensor>&, int) override {}
  void barrier() override {}
};

struct Net {  // a conv (channels-last weight) and a linear head, trained on real digits
  torch::Tensor conv_w = (torch::randn({8, 1, 3, 3}) * 0.3).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_();
  torch::Tensor conv_b = torch::zeros({8}).requires_grad_();
  torch::Tensor fc_w = (torch::randn({10, 8}) * 0.3).requires_grad_();
  torch::Tensor fc_b = torch::zeros({10}).requires_grad_();
  std::vector<torch::Tensor> params() const { return {conv_w, conv_b, fc_w, fc_b}; }
  torch::Tensor loss(const test::MnistBatch& b) const {
    auto h = torch::conv2d(b.images, conv_w, conv_b, 2).relu().mean({2, 3});
    return torch::nn::functional::cross_entropy(torch::addmm(fc_b, h, fc_w.t()), b.labels);
  }
};

}  // namespace

TEST_CASE("single_span covers back-to-back tensors of one buffer in any order, and nothing else") {
  auto buf = torch::arange(20, torch::kFloat);
  auto a = buf.narrow(0, 0, 6).view({2, 3}), b = buf.narrow(0, 6, 4), c = buf.narrow(0, 10, 10).view({2, 5});
  auto span = single_span({c, a, b});
  REQUIRE(span.has_value());
  CHECK(span->numel() == 20);
  CHECK(span->data_ptr() == buf.data_ptr());
  CHECK_FALSE(single_span({a, c}).has_value());               // a gap (b missing)
  CHECK_FALSE(single_span({a, b, torch::zeros({10})}).has_value());  // another buffer
  CHECK_FALSE(single_span({a, a}).has_value());               // overlap
  CHECK(single_span({buf.narrow(0, 0, 10).view({2, 5}).t(), buf.narrow(0, 10, 10)}).has_value());  // any dense strides
  CHECK_FALSE(single_span({buf.slice(0, 0, 20, 2)}).has_value());  // strided, not dense
}

TEST_CASE("with adamw's flat gradients, the DDP gradient sync is one all-reduce and zeroing is one fill") {
  const auto digits = test::mnist_batch(32, 28);
  torch::manual_seed(0);
  Net n;
  auto opt = make_adamw(AdamWOptions{}, {ParamGroup{"all", n.params()}});
  WorldInfo world;
  world.world_size = 2;
  auto peer = std::make_unique<RecordingPeer>();
  RecordingPeer* rec = peer.get();
  Accelerator acc(AcceleratorOptions{}, world, std::move(peer), torch::kCPU, 1);

  for (int step = 0; step < 3; ++step) {
    zero_grads(n.params());
    torch::Tensor loss = n.loss(digits);
    acc.backward(loss, n.params());
    if (step > 0) {
      // Mean over the 2 "ranks" of equal gradients = the local gradient.
      Net ref;
      auto rp = ref.params(), np = n.params();
      for (size_t i = 0; i < np.size(); ++i) rp[i].detach().copy_(np[i].detach());
      ref.loss(digits).backward();
      for (size_t i = 0; i < np.size(); ++i) CHECK(torch::allclose(np[i].grad(), rp[i].grad(), 1e-6, 1e-7));
    }
    opt->step();
  }
  // Step 1 ran before the optimizer had built its arena: one tensor per parameter. Then one.
  REQUIRE(rec->all_reduce_calls.size() == 3);
  CHECK(rec->all_reduce_calls[0] == 4);
  CHECK(rec->all_reduce_calls[1] == 1);
  CHECK(rec->all_reduce_calls[2] == 1);
  zero_grads(n.params());
  for (auto& p : n.params()) CHECK(p.grad().abs().sum().item<double>() == 0);
}
