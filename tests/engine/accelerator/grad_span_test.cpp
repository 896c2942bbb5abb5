// Gradients kept in one flat buffer by the optimizer are zeroed and all-reduced as one tensor; any
// other set of gradients still works one tensor at a time.
#include "engine/accelerator/grad_span.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "components/models/convnext_mlp.h"
#include "components/optimizers/adamw.h"
#include "components/optimizers/optimizer.h"
#include "engine/accelerator/accelerator.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/support/threads.h"

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

TEST_CASE("StepGradients: a step's gradients land in adamw's flat buffer without zeroing, the same bits as zero + add") {
  const auto digits = test::mnist_batch(32, 28), more = test::mnist_batch(32, 28, 1, 32);
  // Two identical nets and optimizers, one zeroed the classic way, one through StepGradients; a parameter
  // the loss never uses (it must hold zeros after the step's backward, as after zero_grads); gradients
  // accumulated over two micro-batches from step 2 on.
  torch::manual_seed(1);
  Net a;
  Net b;
  for (size_t i = 0; i < a.params().size(); ++i) b.params()[i].detach().copy_(a.params()[i].detach());
  torch::Tensor unused_a = torch::ones({5}).requires_grad_(), unused_b = torch::ones({5}).requires_grad_();
  auto with_unused = [](const Net& n, const torch::Tensor& u) {
    auto p = n.params();
    p.push_back(u);
    return p;
  };
  const auto pa = with_unused(a, unused_a), pb = with_unused(b, unused_b);
  auto opt_a = make_adamw(AdamWOptions{}, {ParamGroup{"all", pa}});
  auto opt_b = make_adamw(AdamWOptions{}, {ParamGroup{"all", pb}});
  // The unused parameters need a gradient for the first step to build the arena (as zero_grads leaves them).
  unused_a.mutable_grad() = torch::zeros({5});
  unused_b.mutable_grad() = torch::zeros({5});
  StepGradients grads;
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    zero_grads(pa);
    a.loss(digits).backward();
    if (step >= 2) a.loss(more).backward();

    const void* span_before = pb[0].grad().defined() ? pb[0].grad().data_ptr() : nullptr;
    grads.begin(pb);
    if (step >= 1) {  // from the step after the arena was built: the gradients are handed over
      for (const auto& p : pb) CHECK_FALSE(p.grad().defined());
    }
    b.loss(digits).backward();
    grads.end(pb);
    if (step >= 2) b.loss(more).backward();
    if (step >= 1) {
      CHECK(pb[0].grad().data_ptr() == span_before);  // the optimizer's buffer again
      CHECK(single_span({pb[0].grad(), pb[1].grad(), pb[2].grad(), pb[3].grad(), pb[4].grad()}).has_value());
      CHECK(unused_b.grad().abs().sum().item<double>() == 0);
    }
    for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i].grad(), pb[i].grad()));
    opt_a->step();
    opt_b->step();
    for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  }
}

TEST_CASE("StepGradients: the ConvNeXt MLP writes its weight gradients straight into adamw's flat buffer") {
  // A block's fc1/fc2 weight gradients land in the flat buffer itself (claim_gradient_memory), not in
  // new memory that StepGradients::end() copies; the bits are those of zero + add, on the chunked
  // backward (1 thread) and on the products over all rows (2 threads).
  const auto digits = test::mnist_batch(32, 28);
  torch::manual_seed(3);
  const int64_t c = 40;
  const torch::Tensor proj = torch::randn({c, 1, 2, 2}) * 0.5;
  auto features = [&](int64_t shift) {  // [32, 40, 14, 14] channels-last, from the digits
    return torch::conv2d(digits.images, proj, {}, 2).roll(shift, 1).contiguous(torch::MemoryFormat::ChannelsLast);
  };
  const torch::Tensor x = features(0), t = features(7);
  struct Block {
    torch::Tensor w1, b1, w2, b2, gamma;
    std::vector<torch::Tensor> params() const { return {w1, b1, w2, b2, gamma}; }
  };
  auto make = [&] {
    torch::manual_seed(4);
    return Block{(torch::randn({4 * c, c}) * 0.2).requires_grad_(), (torch::randn({4 * c}) * 0.1).requires_grad_(),
                 (torch::randn({c, 4 * c}) * 0.2).requires_grad_(), (torch::randn({c}) * 0.1).requires_grad_(),
                 (torch::rand({c}) + 0.5).requires_grad_()};
  };
  const torch::Tensor probe = torch::randn({32, c, 14, 14});
  const engine::test::IntraOpThreads scoped(1);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    scoped.set(threads);
    Block a = make(), b = make();
    auto opt_a = make_adamw(AdamWOptions{}, {ParamGroup{"all", a.params()}});
    auto opt_b = make_adamw(AdamWOptions{}, {ParamGroup{"all", b.params()}});
    auto loss = [&](const Block& m) {
      return (convnext_mlp_residual(x, t, m.w1, m.b1, m.w2, m.b2, m.gamma, 0.1, true) * probe).sum();
    };
    StepGradients grads;
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      torch::manual_seed(10 + step);  // the same drop-path draws on both sides
      zero_grads(a.params());
      loss(a).backward();
      std::vector<const void*> flat;  // each parameter's place in the flat buffer (from step 1 on)
      for (const auto& p : b.params()) flat.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
      grads.begin(b.params());
      torch::manual_seed(10 + step);
      loss(b).backward();
      if (step >= 1) {
        CHECK(b.w1.grad().data_ptr() == flat[0]);  // written in place, before end() copies anything
        CHECK(b.w2.grad().data_ptr() == flat[2]);
      }
      grads.end(b.params());
      for (size_t i = 0; i < 5; ++i) CHECK(torch::equal(a.params()[i].grad(), b.params()[i].grad()));
      opt_a->step();
      opt_b->step();
      for (size_t i = 0; i < 5; ++i) CHECK(torch::equal(a.params()[i], b.params()[i]));
    }
  }
}
