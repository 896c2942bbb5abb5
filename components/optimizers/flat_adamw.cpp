#include "components/optimizers/flat_adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/grad_mode.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "components/optimizers/optimizer_util.h"
#include "engine/core/env.h"

namespace engine {

namespace {

// ENGINE_FLAT_ADAMW=0: torch's AdamW as is (to measure one against the other, bench/RESULTS.md).
bool flat_adamw_off() {
  static const bool off = switched_off("ENGINE_FLAT_ADAMW");
  return off;
}

bool dense(const torch::Tensor& t) {
  return t.layout() == torch::kStrided && t.is_non_overlapping_and_dense();
}

// `t` already is this view of the arena (same memory, same geometry).
bool is_view(const torch::Tensor& t, const torch::Tensor& view) {
  return t.defined() && t.data_ptr() == view.data_ptr() && t.sizes() == view.sizes() &&
         t.strides() == view.strides() && t.scalar_type() == view.scalar_type();
}

// Moves a tensor's values into its arena view and returns the view (no-op when it already is).
torch::Tensor adopt(const torch::Tensor& t, const torch::Tensor& view) {
  if (is_view(t, view)) return view;
  if (t.defined())
    view.copy_(t.detach());
  else
    view.zero_();
  return view;
}

// The whole AdamW update of one element, in one pass over memory. Separate torch ops make ~9
// passes over 4 buffers (measured: 16 ms for convnext_atto's 3.4M parameters, bandwidth-bound);
// fused, each byte is read and written once. Same formulas as torch's sequence; float rounding
// differs only where torch's kernels contract a*b+c into one FMA and this does not, or vice versa.
struct AdamWCoeffs {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, neg_step_size;
};

// Every rank's gradients, parameters and moments (index: rank), for the split DDP step.
struct PeerView {
  const std::vector<float*>&g, &p, &m, &v;
  int rank;
};

inline void adamw_scalar(float* p, const float* g, float* m, float* v, int64_t n, const AdamWCoeffs& c) {
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i] * c.decay;
    const float mi = m[i] * c.beta1 + c.one_minus_beta1 * g[i];
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + c.neg_step_size * (mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
struct AdamWVec {
  __m256 decay, b1, a1, b2, a2, ib, eps, ss;
};

__attribute__((target("avx2,fma"), always_inline)) inline AdamWVec broadcast(const AdamWCoeffs& c) {
  return {_mm256_set1_ps(c.decay), _mm256_set1_ps(c.beta1),        _mm256_set1_ps(c.one_minus_beta1),
          _mm256_set1_ps(c.beta2), _mm256_set1_ps(c.one_minus_beta2), _mm256_set1_ps(c.inv_sqrt_bc2),
          _mm256_set1_ps(c.eps),   _mm256_set1_ps(c.neg_step_size)};
}

// The update of 8 elements in registers: p, m, v in, their new values out.
__attribute__((target("avx2,fma"), always_inline)) inline void adamw8(const AdamWVec& k, __m256 g, __m256& p, __m256& m,
                                                                    __m256& v) {
  const __m256 pi = _mm256_mul_ps(p, k.decay);
  m = _mm256_fmadd_ps(k.a1, g, _mm256_mul_ps(m, k.b1));
  v = _mm256_fmadd_ps(_mm256_mul_ps(k.a2, g), g, _mm256_mul_ps(v, k.b2));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), k.ib, k.eps);
  p = _mm256_fmadd_ps(k.ss, _mm256_div_ps(m, denom), pi);
}

// The last n < 8 elements of an array, padded to a vector: the same instructions as every other
// element (so a result never depends on where a range was cut), without reading past the end.
struct Tail8 {
  alignas(32) float lanes[8] = {};
  Tail8(const float* src, int64_t n) { std::copy(src, src + n, lanes); }
  void store(float* dst, int64_t n) const { std::copy(lanes, lanes + n, dst); }
};

__attribute__((target("avx2,fma"))) void adamw_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                                    const AdamWCoeffs& c) {
  const AdamWVec k = broadcast(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    adamw8(k, _mm256_loadu_ps(g + i), pi, mi, vi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
  if (i == n) return;
  Tail8 tp(p + i, n - i), tg(g + i, n - i), tm(m + i, n - i), tv(v + i, n - i);
  __m256 pi = _mm256_load_ps(tp.lanes), mi = _mm256_load_ps(tm.lanes), vi = _mm256_load_ps(tv.lanes);
  adamw8(k, _mm256_load_ps(tg.lanes), pi, mi, vi);
  _mm256_store_ps(tp.lanes, pi);
  _mm256_store_ps(tm.lanes, mi);
  _mm256_store_ps(tv.lanes, vi);
  tp.store(p + i, n - i);
  tm.store(m + i, n - i);
  tv.store(v + i, n - i);
}

// The split DDP step of 2 ranks (ShardableStep): gradient = (g0 + g1) * scale, as the shared-memory
// all-reduce computes it; p, m, v read from this rank's buffers; p written to both ranks', m and v
// to this rank's.
__attribute__((target("avx2,fma"))) void adamw_avx2_two_ranks(const PeerView& x, int64_t b, int64_t e,
                                                              const AdamWCoeffs& c) {
  const AdamWVec k = broadcast(c);
  const __m256 scale = _mm256_set1_ps(0.5f);
  float *p = x.p[x.rank], *m = x.m[x.rank], *v = x.v[x.rank], *other = x.p[1 - x.rank];
  const float *g0 = x.g[0], *g1 = x.g[1];
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    adamw8(k, _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(g0 + i), _mm256_loadu_ps(g1 + i)), scale), pi, mi, vi);
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(other + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  if (i == e) return;
  const int64_t n = e - i;
  Tail8 tp(p + i, n), tm(m + i, n), tv(v + i, n), t0(g0 + i, n), t1(g1 + i, n);
  __m256 pi = _mm256_load_ps(tp.lanes), mi = _mm256_load_ps(tm.lanes), vi = _mm256_load_ps(tv.lanes);
  adamw8(k, _mm256_mul_ps(_mm256_add_ps(_mm256_load_ps(t0.lanes), _mm256_load_ps(t1.lanes)), scale), pi, mi, vi);
  _mm256_store_ps(tp.lanes, pi);
  _mm256_store_ps(tm.lanes, mi);
  _mm256_store_ps(tv.lanes, vi);
  tp.store(p + i, n);
  tp.store(other + i, n);
  tm.store(m + i, n);
  tv.store(v + i, n);
}
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#endif

void adamw_fused(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                 const AdamWCoeffs& c) {
  float* pd = p.data_ptr<float>();
  const float* gd = g.data_ptr<float>();
  float* md = m.data_ptr<float>();
  float* vd = v.data_ptr<float>();
  auto kernel = &adamw_scalar;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) kernel = &adamw_avx2;
#endif
  // Elements are independent: any split over threads gives the same result.
  at::parallel_for(0, p.numel(), 1 << 16,
                   [&](int64_t b, int64_t e) { kernel(pd + b, gd + b, md + b, vd + b, e - b, c); });
}

// Elements [b, e) of the split DDP step on any number of ranks: the mean gradient into a scratch
// block (summed in rank order, then scaled: the all-reduce's bits), the update on this rank's
// buffers, and the new parameters copied into every other rank's.
void adamw_peers_blocks(const PeerView& x, int64_t b, int64_t e, const AdamWCoeffs& c) {
  const int ranks = static_cast<int>(x.g.size());
  const float scale = static_cast<float>(1.0 / ranks);
  constexpr int64_t kBlock = 2048;
  std::vector<float> mean(kBlock);
  for (int64_t i0 = b; i0 < e; i0 += kBlock) {
    const int64_t n = std::min(kBlock, e - i0);
    for (int64_t i = 0; i < n; ++i) {
      float sum = x.g[0][i0 + i] + x.g[1][i0 + i];
      for (int q = 2; q < ranks; ++q) sum += x.g[q][i0 + i];
      mean[i] = sum * scale;
    }
    float *p = x.p[x.rank] + i0, *m = x.m[x.rank] + i0, *v = x.v[x.rank] + i0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_avx2())
      adamw_avx2(p, mean.data(), m, v, n, c);
    else
#endif
      adamw_scalar(p, mean.data(), m, v, n, c);
    for (int q = 0; q < ranks; ++q)
      if (q != x.rank) std::copy(p, p + n, x.p[q] + i0);
  }
}

void adamw_peers(const PeerView& x, int64_t b, int64_t e, const AdamWCoeffs& c) {
  at::parallel_for(b, e, 1 << 16, [&](int64_t lo, int64_t hi) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (x.g.size() == 2 && has_avx2()) return adamw_avx2_two_ranks(x, lo, hi, c);
#endif
    adamw_peers_blocks(x, lo, hi, c);
  });
}

}  // namespace

FlatAdamW::FlatAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                     torch::optim::AdamWOptions defaults)
    : AdamW(std::move(groups), std::move(defaults)) {}

bool FlatAdamW::arena_matches() const {
  size_t n = 0;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    const auto& params = param_groups()[g].params();
    if (g >= slots_.size() || params.size() != slots_[g].size()) return false;
    for (size_t i = 0; i < params.size(); ++i, ++n) {
      const auto& p = params[i];
      const auto& v = slots_[g][i].param;
      if (n >= layout_.size() || layout_[n] != p.unsafeGetTensorImpl() || p.sizes() != v.sizes() ||
          p.strides() != v.strides() || p.scalar_type() != v.scalar_type() || p.device() != v.device())
        return false;
    }
  }
  return n == layout_.size() && slots_.size() == param_groups().size();
}

void FlatAdamW::build_arena() {
  layout_.clear();
  slots_.clear();
  range_.clear();
  int64_t total = 0;
  const torch::Tensor* first = nullptr;
  for (const auto& group : param_groups())
    for (const auto& p : group.params()) {
      if (!dense(p) ||
          (first && (p.scalar_type() != first->scalar_type() || p.device() != first->device()))) {
        no_arena_ = true;  // mixed dtypes or devices, or an odd layout: torch's per-parameter update
        return;
      }
      if (!first) first = &p;
      total += p.numel();
    }
  if (!first) {
    no_arena_ = true;
    return;
  }
  torch::NoGradGuard no_grad;
  const auto options = first->options().requires_grad(false);
  params_ = torch::empty({total}, options);
  grads_ = torch::zeros({total}, options);
  exp_avg_ = torch::zeros({total}, options);
  exp_avg_sq_ = torch::zeros({total}, options);
  int64_t offset = 0;
  for (auto& group : param_groups()) {
    const int64_t begin = offset;
    slots_.emplace_back();
    for (auto& p : group.params()) {
      // Aliases of the arena's memory, not autograd views of it: torch's zero_grad() detaches
      // gradients in place, which views refuse.
      auto view = [&](const torch::Tensor& arena) {
        return torch::empty({0}, options).set_(arena.storage(), offset, p.sizes(), p.strides());
      };
      Slot s{view(params_), view(grads_), view(exp_avg_), view(exp_avg_sq_)};
      // The parameter now lives in the arena (same values, same strides); its gradient too, once
      // it has one (a frozen parameter keeps none, so the step still skips it as torch does).
      p.set_data(adopt(p, s.param));
      if (p.grad().defined()) p.mutable_grad() = adopt(p.grad(), s.grad);
      auto it = state_.find(optim_detail::state_key(state_, p));
      if (it != state_.end()) {
        auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
        st.exp_avg(adopt(st.exp_avg(), s.exp_avg));
        st.exp_avg_sq(adopt(st.exp_avg_sq(), s.exp_avg_sq));
      }
      slots_.back().push_back(std::move(s));
      layout_.push_back(p.unsafeGetTensorImpl());
      offset += p.numel();
    }
    range_.emplace_back(begin, offset);
  }
}

bool FlatAdamW::make_group_flat(size_t g) {
  auto& group = param_groups()[g];
  if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
  int64_t step = -1;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) return false;  // frozen or unused this step: torch skips it
    auto it = state_.find(optim_detail::state_key(state_, p));
    const int64_t s =
        it == state_.end() ? 0 : static_cast<torch::optim::AdamWParamState&>(*it->second).step();
    if (step >= 0 && s != step) return false;  // parameters at different steps: per parameter
    step = s;
  }
  // Everything in its arena view again (a checkpoint load, a new .grad, a set_data since the
  // last step), and a fresh state where torch would create one: step 0, zero moments.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < group.params().size(); ++i) {
    auto& p = group.params()[i];
    Slot& s = slots_[g][i];
    if (!is_view(p, s.param)) p.set_data(adopt(p, s.param));
    if (!is_view(p.grad(), s.grad)) p.mutable_grad() = adopt(p.grad(), s.grad);
    auto key = optim_detail::state_key(state_, p);
    auto it = state_.find(key);
    if (it == state_.end()) {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(0);
      st->exp_avg(adopt(torch::Tensor(), s.exp_avg));
      st->exp_avg_sq(adopt(torch::Tensor(), s.exp_avg_sq));
      state_[key] = std::move(st);
    } else {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      st.exp_avg(adopt(st.exp_avg(), s.exp_avg));
      st.exp_avg_sq(adopt(st.exp_avg_sq(), s.exp_avg_sq));
    }
  }
  return true;
}

int64_t FlatAdamW::advance_step(size_t g) {
  int64_t step = 0;
  for (const auto& q : param_groups()[g].params()) {
    auto& st = static_cast<torch::optim::AdamWParamState&>(*state_.at(optim_detail::state_key(state_, q)));
    step = st.step() + 1;
    st.step(step);
  }
  return step;
}

namespace {
AdamWCoeffs coefficients(const torch::optim::AdamWOptions& o, int64_t step) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  return {static_cast<float>(o.weight_decay() != 0 ? 1 - o.lr() * o.weight_decay() : 1.0),
          static_cast<float>(beta1),
          static_cast<float>(1 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1 - beta2),
          static_cast<float>(1 / std::sqrt(1 - std::pow(beta2, step))),
          static_cast<float>(o.eps()),
          static_cast<float>(-o.lr() / (1 - std::pow(beta1, step)))};
}
}  // namespace

void FlatAdamW::step_group_flat(size_t g) {
  auto& group = param_groups()[g];
  const auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
  const auto [begin, end] = range_[g];
  if (end == begin) return;
  torch::Tensor p = params_.narrow(0, begin, end - begin), grad = grads_.narrow(0, begin, end - begin),
                exp_avg = exp_avg_.narrow(0, begin, end - begin),
                exp_avg_sq = exp_avg_sq_.narrow(0, begin, end - begin);
  const int64_t step = advance_step(g);
  if (p.is_cpu() && p.scalar_type() == torch::kFloat) {
    adamw_fused(p, grad, exp_avg, exp_avg_sq, coefficients(o, step));
    return;
  }
  // Other dtypes and devices: torch's AdamW, op for op, on the whole group at once.
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
  p.addcdiv_(exp_avg, denom, -o.lr() / bias_correction1);
}

bool FlatAdamW::flat_ready() {
  if (!arena_matches()) {
    gather_shares();  // the moments of the old layout are copied from its views
    build_arena();
  }
  if (no_arena_) return false;
  for (size_t g = 0; g < param_groups().size(); ++g)
    if (!make_group_flat(g)) return false;  // e.g. a frozen stage
  return true;
}

bool FlatAdamW::begin_shared_step(std::vector<torch::Tensor>& buffers) {
  flat_groups_ = 0;
  if (no_arena_ || flat_adamw_off() || !flat_ready() || !params_.is_cpu() || params_.scalar_type() != torch::kFloat)
    return false;
  buffers = {grads_, params_, exp_avg_, exp_avg_sq_};
  return true;
}

void FlatAdamW::step_shared(const std::vector<int64_t>& edges, const std::vector<std::vector<float*>>& peers, int rank) {
  torch::NoGradGuard no_grad;
  const PeerView view{peers.at(0), peers.at(1), peers.at(2), peers.at(3), rank};
  const int64_t b = edges.at(rank), e = edges.at(rank + 1);
  for (size_t g = 0; g < param_groups().size(); ++g) {
    const int64_t step = advance_step(g);
    const int64_t lo = std::max(b, range_[g].first), hi = std::min(e, range_[g].second);
    if (lo < hi)
      adamw_peers(view, lo, hi, coefficients(static_cast<torch::optim::AdamWOptions&>(param_groups()[g].options()), step));
  }
  split_ = Split{edges, peers.at(2), peers.at(3), rank, exp_avg_.data_ptr<float>()};
  flat_groups_ = static_cast<int64_t>(param_groups().size());
}

void FlatAdamW::gather_shares() {
  if (!split_) return;
  const Split s = std::move(*split_);
  split_.reset();
  // The arena the split steps wrote (a rebuilt one starts whole: it is filled from the old views
  // after this copy).
  if (!exp_avg_.defined() || exp_avg_.data_ptr<float>() != s.own_exp_avg) return;
  for (size_t q = 0; q + 1 < s.edges.size(); ++q) {
    if (static_cast<int>(q) == s.rank) continue;
    const int64_t b = s.edges[q], e = s.edges[q + 1];
    std::copy(s.exp_avg[q] + b, s.exp_avg[q] + e, s.exp_avg[s.rank] + b);
    std::copy(s.exp_avg_sq[q] + b, s.exp_avg_sq[q] + e, s.exp_avg_sq[s.rank] + b);
  }
}

torch::Tensor FlatAdamW::step(LossClosure closure) {
  flat_groups_ = 0;
  gather_shares();  // after split steps (ShardableStep), this rank's moments are whole again
  if (closure || no_arena_ || flat_adamw_off()) return AdamW::step(std::move(closure));
  if (!flat_ready()) return AdamW::step(nullptr);  // torch's update for all
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups().size(); ++g) step_group_flat(g);
  flat_groups_ = static_cast<int64_t>(param_groups().size());
  return {};
}

}  // namespace engine
