// The packed GEMM kernels (packed_gemm.h) against a float64 product of the same operands, on the
// ConvNeXt MLP shapes and on sizes that exercise every remainder: rows not a multiple of any row
// group, panels narrower than 64 and than 16 columns, strided rows.
#include "components/models/packed_gemm.h"
#include "tests/support/threads.h"

#include <doctest/doctest.h>

#include <cmath>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

// Largest |got - want| over the largest |want|.
double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

struct Case {
  int64_t m, k, n;
};

}  // namespace

TEST_CASE("packed GEMM: rows x W^T + bias and rows x W equal a float64 product, every remainder") {
  if (!engine::packed_gemm_available()) {
    MESSAGE("no AVX2 with FMA here (or ENGINE_PACKED_GEMM=0): the MLPs use OpenBLAS, nothing to check");
    return;
  }
  torch::manual_seed(3);
  const Case cases[] = {{6400, 40, 160}, {1600, 320, 80}, {64, 320, 1280}, {1, 1, 1},   {7, 5, 3},
                        {13, 17, 15},    {97, 33, 17},    {103, 64, 48},   {50, 9, 65}, {191, 130, 129}};
  for (const Case& cs : cases) {
    CAPTURE(cs.m);
    CAPTURE(cs.k);
    CAPTURE(cs.n);
    // A as every other row of a wider matrix: lda != k, as a view of activation rows may be.
    torch::Tensor wide = torch::randn({cs.m, cs.k + 3});
    torch::Tensor a = wide.narrow(1, 1, cs.k);
    torch::Tensor w = torch::randn({cs.n, cs.k}), bias = torch::randn({cs.n});
    const torch::Tensor want = torch::addmm(bias.to(torch::kDouble), a.to(torch::kDouble), w.to(torch::kDouble).t());

    const engine::PackedB wt = engine::PackedB::transposed(w.data_ptr<float>(), cs.n, cs.k, cs.k);
    CHECK(wt.k() == cs.k);
    CHECK(wt.n() == cs.n);
    // The output inside a wider buffer: ldc != n, and the columns beside it must stay untouched.
    torch::Tensor out_wide = torch::full({cs.m, cs.n + 5}, 7.0f);
    engine::gemm_packed(cs.m, a.data_ptr<float>(), a.stride(0), wt, bias.data_ptr<float>(),
                        out_wide.data_ptr<float>(), out_wide.stride(0));
    CHECK(rel_err(out_wide.narrow(1, 0, cs.n), want) < 1e-5);
    CHECK(torch::equal(out_wide.narrow(1, cs.n, 5), torch::full({cs.m, 5}, 7.0f)));

    // The input gradient's form: g [m, n] times W [n, k], no bias.
    torch::Tensor g = torch::randn({cs.m, cs.n});
    const engine::PackedB wp = engine::PackedB::in_place(w.data_ptr<float>(), cs.n, cs.k, cs.k);
    torch::Tensor gx = torch::empty({cs.m, cs.k});
    engine::gemm_packed(cs.m, g.data_ptr<float>(), g.stride(0), wp, nullptr, gx.data_ptr<float>(), gx.stride(0));
    CHECK(rel_err(gx, torch::mm(g.to(torch::kDouble), w.to(torch::kDouble))) < 1e-5);
    // W as a column range of a wider buffer (row stride k + 4): the same bits.
    torch::Tensor w_wide = torch::full({cs.n, cs.k + 4}, std::nanf(""));
    w_wide.narrow(1, 1, cs.k).copy_(w);
    const engine::PackedB wi = engine::PackedB::in_place(w_wide.data_ptr<float>() + 1, cs.n, cs.k, cs.k + 4);
    torch::Tensor gx_in_place = torch::empty({cs.m, cs.k});
    engine::gemm_packed(cs.m, g.data_ptr<float>(), g.stride(0), wi, nullptr, gx_in_place.data_ptr<float>(),
                        gx_in_place.stride(0));
    CHECK(torch::equal(gx_in_place, gx));  // and no NaN from the columns beside it
  }
}

TEST_CASE("weight-gradient GEMM: G^T X equals a float64 product, every remainder, and overwrites C") {
  if (!engine::packed_gemm_available()) return;
  torch::manual_seed(5);
  const Case cases[] = {{6400, 40, 160}, {64, 320, 1280}, {1, 1, 1}, {300, 7, 5}, {257, 33, 17}, {513, 65, 130}};
  for (const Case& cs : cases) {
    CAPTURE(cs.m);
    CAPTURE(cs.k);
    CAPTURE(cs.n);
    // G [m, n] and X [m, k] as strided column ranges of wider row buffers.
    torch::Tensor g = torch::randn({cs.m, cs.n + 2}).narrow(1, 2, cs.n);
    torch::Tensor x = torch::randn({cs.m, cs.k + 1}).narrow(1, 0, cs.k);
    torch::Tensor c = torch::full({cs.n, cs.k + 4}, 5.0f);  // garbage in C must not survive
    engine::gemm_at_b(cs.m, g.data_ptr<float>(), g.stride(0), cs.n, x.data_ptr<float>(), x.stride(0), cs.k,
                      c.data_ptr<float>(), c.stride(0));
    CHECK(rel_err(c.narrow(1, 0, cs.k), torch::mm(g.to(torch::kDouble).t(), x.to(torch::kDouble))) < 1e-5);
    CHECK(torch::equal(c.narrow(1, cs.k, 4), torch::full({cs.n, 4}, 5.0f)));
  }
}

TEST_CASE("packed GEMM: the same result at 1 and 2 threads (rows split, each row's sum unchanged)") {
  if (!engine::packed_gemm_available()) return;
  torch::manual_seed(4);
  torch::Tensor a = torch::randn({1000, 80}), w = torch::randn({320, 80}), bias = torch::randn({320});
  const engine::PackedB wt = engine::PackedB::transposed(w.data_ptr<float>(), 320, 80, 80);
  const engine::test::IntraOpThreads threads(1);
  torch::Tensor one = torch::empty({1000, 320}), two = torch::empty({1000, 320});
  engine::gemm_packed(1000, a.data_ptr<float>(), 80, wt, bias.data_ptr<float>(), one.data_ptr<float>(), 320);
  threads.set(2);
  engine::gemm_packed(1000, a.data_ptr<float>(), 80, wt, bias.data_ptr<float>(), two.data_ptr<float>(), 320);
  CHECK(torch::equal(one, two));
  // The weight gradient: threads split C's rows, each element sums the same rows in the same order.
  torch::Tensor g = torch::randn({1000, 320}), gw_one = torch::empty({320, 80}), gw_two = torch::empty({320, 80});
  threads.set(1);
  engine::gemm_at_b(1000, g.data_ptr<float>(), 320, 320, a.data_ptr<float>(), 80, 80, gw_one.data_ptr<float>(), 80);
  threads.set(2);
  engine::gemm_at_b(1000, g.data_ptr<float>(), 320, 320, a.data_ptr<float>(), 80, 80, gw_two.data_ptr<float>(), 80);
  CHECK(torch::equal(gw_one, gw_two));
}

TEST_CASE("packed GEMM sum: the sum of A_t B_t over terms (packed and in-place B) equals a float64 sum") {
  if (!engine::packed_gemm_available()) return;
  torch::manual_seed(5);
  // Three terms, as three taps of a convolution: each A a run of one wide row buffer (rows lda
  // apart), B of different k; one B read in place. 70 columns: a full panel and a 6-wide one.
  const int64_t m = 29, n = 70, lda = 200;
  const int64_t ks[] = {40, 17, 64};
  torch::Tensor rows = torch::randn({m, lda}), bias = torch::randn({n});
  std::vector<torch::Tensor> ws;
  std::vector<engine::PackedB> bs;
  torch::Tensor want = bias.to(torch::kDouble).expand({m, n}).clone();
  int64_t offset = 0;
  for (int t = 0; t < 3; ++t) {
    torch::Tensor a = rows.narrow(1, offset, ks[t]);
    if (t == 1) {  // B [k, n] itself, read where it is
      ws.push_back(torch::randn({ks[t], n}));
      bs.push_back(engine::PackedB::in_place(ws.back().data_ptr<float>(), ks[t], n, n));
      want += torch::mm(a.to(torch::kDouble), ws.back().to(torch::kDouble));
    } else {  // W [n, k], B = W^T
      ws.push_back(torch::randn({n, ks[t]}));
      bs.push_back(engine::PackedB::transposed(ws.back().data_ptr<float>(), n, ks[t], ks[t]));
      want += torch::mm(a.to(torch::kDouble), ws.back().to(torch::kDouble).t());
    }
    offset += ks[t] + 5;
  }
  const float* base = rows.data_ptr<float>();
  const engine::GemmTerm terms[] = {{base, &bs[0]}, {base + 45, &bs[1]}, {base + 67, &bs[2]}};
  torch::Tensor c = torch::full({m, n + 3}, 7.0f);  // ldc > n: the 3 columns beyond stay
  engine::gemm_packed_sum_serial(m, terms, 3, lda, bias.data_ptr<float>(), c.data_ptr<float>(), n + 3);
  CHECK(rel_err(c.narrow(1, 0, n), want) < 1e-5);
  CHECK(torch::equal(c.narrow(1, n, 3), torch::full({m, 3}, 7.0f)));
  // One term is gemm_packed_serial, bit for bit.
  torch::Tensor one = torch::empty({m, n}), serial = torch::empty({m, n});
  engine::gemm_packed_sum_serial(m, terms, 1, lda, nullptr, one.data_ptr<float>(), n);
  engine::gemm_packed_serial(m, base, lda, bs[0], nullptr, serial.data_ptr<float>(), n);
  CHECK(torch::equal(one, serial));
  // The epilogue: + residual (laid out as C, ldc apart), then ReLU, as the element is stored: the bits
  // of the plain sum followed by the two separate ops. Every panel, and each of its two halves of rows.
  torch::Tensor residual = torch::randn({m, n + 3}), plain = torch::empty({m, n + 3}), fused = torch::empty({m, n + 3});
  engine::gemm_packed_sum_serial(m, terms, 3, lda, bias.data_ptr<float>(), plain.data_ptr<float>(), n + 3);
  for (int64_t r0 : {int64_t{0}, int64_t{13}}) {
    const engine::GemmTerm rows_from[] = {{base + r0 * lda, &bs[0]}, {base + r0 * lda + 45, &bs[1]},
                                          {base + r0 * lda + 67, &bs[2]}};
    engine::gemm_packed_sum_panels_serial(r0 == 0 ? 13 : m - 13, rows_from, 3, lda, bias.data_ptr<float>(),
                                          fused.data_ptr<float>() + r0 * (n + 3), n + 3, 0, bs[0].panels(),
                                          engine::GemmEpilogue{residual.data_ptr<float>() + r0 * (n + 3), true});
  }
  torch::Tensor sum = plain.narrow(1, 0, n) + residual.narrow(1, 0, n);
  CHECK(torch::equal(fused.narrow(1, 0, n), sum.relu()));
  CHECK((sum < 0).any().item<bool>());  // the ReLU had something to do
  engine::gemm_packed_sum_serial(m, terms, 3, lda, bias.data_ptr<float>(), fused.data_ptr<float>(), n + 3);
  engine::gemm_packed_sum_panels_serial(m, terms, 3, lda, bias.data_ptr<float>(), fused.data_ptr<float>(), n + 3, 0,
                                        bs[0].panels(), engine::GemmEpilogue{nullptr, true});
  CHECK(torch::equal(fused.narrow(1, 0, n), plain.narrow(1, 0, n).relu()));
  // No term, or B of other widths: refused.
  CHECK_THROWS_AS(engine::gemm_packed_sum_serial(m, terms, 0, lda, nullptr, one.data_ptr<float>(), n), c10::Error);
  torch::Tensor narrow_w = torch::randn({n - 1, 8});
  const engine::PackedB narrow_b = engine::PackedB::transposed(narrow_w.data_ptr<float>(), n - 1, 8, 8);
  const engine::GemmTerm mixed[] = {{base, &bs[0]}, {base, &narrow_b}};
  CHECK_THROWS_AS(engine::gemm_packed_sum_serial(m, mixed, 2, lda, nullptr, one.data_ptr<float>(), n), c10::Error);
}

TEST_CASE("packed GEMM: every kernel set this CPU runs gives the same bits, on B packed for any of them") {
  if (!engine::packed_gemm_available()) return;
  using engine::PackedGemmIsa;
  const PackedGemmIsa before = engine::packed_gemm_isa();
  std::vector<PackedGemmIsa> sets{PackedGemmIsa::avx2};
  if (engine::packed_gemm_widest() == PackedGemmIsa::avx512) sets.push_back(PackedGemmIsa::avx512);
  MESSAGE("kernel sets run here: " << sets.size() << " (the widest: " << std::string(engine::packed_gemm_isa_name(sets.back()))
                                    << ")");
  torch::manual_seed(12);
  // Two taps' sums with remainders everywhere: 29 rows, 70 columns (a 64-wide panel and a 6-wide one,
  // strips of 16 and 8 lanes cut inside both), k = 40 and 17; the second B read in place.
  const int64_t m = 29, n = 70, lda = 100;
  torch::Tensor rows = torch::randn({m, lda}), bias = torch::randn({n});
  torch::Tensor w0 = torch::randn({n, 40}), b1 = torch::randn({17, n});
  const torch::Tensor want = bias.to(torch::kDouble) + torch::mm(rows.narrow(1, 0, 40).to(torch::kDouble),
                                                                 w0.to(torch::kDouble).t()) +
                             torch::mm(rows.narrow(1, 50, 17).to(torch::kDouble), b1.to(torch::kDouble));
  // The weight-gradient sum: two terms of 37 and 300 rows, C [21, 70] (rows of 6 / 12, columns past 64).
  torch::Tensor g = torch::randn({337, 21}), x = torch::randn({337, n});
  const torch::Tensor want_at_b = torch::mm(g.to(torch::kDouble).t(), x.to(torch::kDouble));
  const engine::AtBTerm at_b[] = {{g.data_ptr<float>(), x.data_ptr<float>(), 37},
                                  {g.data_ptr<float>() + 37 * 21, x.data_ptr<float>() + 37 * n, 300}};
  torch::Tensor first, first_at_b;
  for (PackedGemmIsa packed_for : {PackedGemmIsa::none, PackedGemmIsa::avx2, PackedGemmIsa::avx512}) {
    if (packed_for > engine::packed_gemm_widest()) continue;
    // The layout of the kernels in use when packed (none: whole-panel strips, as AVX-512's).
    engine::use_packed_gemm_isa(packed_for);
    const engine::PackedB p0 = engine::PackedB::transposed(w0.data_ptr<float>(), n, 40, 40);
    const engine::PackedB p1 = engine::PackedB::in_place(b1.data_ptr<float>(), 17, n, n);
    CHECK(p0.strip() == (packed_for == PackedGemmIsa::avx2 ? 16 : 64));
    for (PackedGemmIsa kernels : sets) {
      const std::string layout = engine::packed_gemm_isa_name(packed_for), set = engine::packed_gemm_isa_name(kernels);
      CAPTURE(layout);
      CAPTURE(set);
      engine::use_packed_gemm_isa(kernels);
      const float* base = rows.data_ptr<float>();
      const engine::GemmTerm terms[] = {{base, &p0}, {base + 50, &p1}};
      torch::Tensor c = torch::full({m, n + 2}, 7.0f);
      engine::gemm_packed_sum_serial(m, terms, 2, lda, bias.data_ptr<float>(), c.data_ptr<float>(), n + 2);
      CHECK(rel_err(c.narrow(1, 0, n), want) < 1e-5);
      CHECK(torch::equal(c.narrow(1, n, 2), torch::full({m, 2}, 7.0f)));
      torch::Tensor cw = torch::full({21, n}, 5.0f);
      engine::gemm_at_b_sum_serial(at_b, 2, 21, 0, 21, n, n, cw.data_ptr<float>(), n);
      CHECK(rel_err(cw, want_at_b) < 1e-5);
      if (!first.defined()) {
        first = c.clone();
        first_at_b = cw.clone();
      }
      CHECK(torch::equal(c, first));
      CHECK(torch::equal(cw, first_at_b));
    }
  }
  engine::use_packed_gemm_isa(before);
  // A set wider than the CPU's is refused.
  if (engine::packed_gemm_widest() != PackedGemmIsa::avx512)
    CHECK_THROWS_AS(engine::use_packed_gemm_isa(PackedGemmIsa::avx512), c10::Error);
}
