// The world-of-1 stub: every collective is the identity, with the same shapes as the Gloo path.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "engine/accelerator/collectives.h"

TEST_CASE("single-process collectives are the identity") {
  auto c = engine::make_single_process_collectives();
  CHECK(c->rank() == 0);
  CHECK(c->size() == 1);
  std::vector<torch::Tensor> ts{torch::arange(6).reshape({2, 3}), torch::tensor(2.5)};
  c->all_reduce_sum(ts);
  CHECK(torch::equal(ts[0], torch::arange(6).reshape({2, 3})));
  c->broadcast(ts, 0);
  CHECK(ts[1].item<double>() == 2.5);
  CHECK_THROWS_AS(c->broadcast(ts, 1), std::invalid_argument);
  auto parts = c->all_gather(torch::ones({3, 2}));
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].sizes() == torch::IntArrayRef({3, 2}));
  CHECK(c->all_gather(torch::tensor(4))[0].sizes() == torch::IntArrayRef({1}));
  c->barrier();
}
