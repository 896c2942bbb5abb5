#include "components/models/row_gemm.h"

#include <torch/torch.h>

#include "components/models/packed_gemm.h"

namespace engine {

torch::Tensor as_matrix(const torch::Tensor& w) { return w.view({w.size(0), w.size(1)}); }

bool packed_rows(const torch::Tensor& rows) {
  return packed_gemm_available() && packed_gemm_pays(rows.size(0)) && rows.stride(1) == 1;
}

torch::Tensor linear_rows(const torch::Tensor& rows, const torch::Tensor& w, const torch::Tensor& b) {
  const torch::Tensor wm = as_matrix(w);
  if (!packed_rows(rows)) return b.defined() ? torch::addmm(b, rows, wm.t()) : torch::mm(rows, wm.t());
  const PackedB packed = PackedB::transposed(wm.data_ptr<float>(), wm.size(0), wm.size(1), wm.stride(0));
  torch::Tensor out = torch::empty({rows.size(0), wm.size(0)}, rows.options());
  gemm_packed(rows.size(0), rows.data_ptr<float>(), rows.stride(0), packed, b.defined() ? b.data_ptr<float>() : nullptr,
              out.data_ptr<float>(), out.stride(0));
  return out;
}

torch::Tensor weight_grad(const torch::Tensor& g, const torch::Tensor& x, c10::IntArrayRef shape,
                          const torch::Tensor& into) {
  const bool own = into.defined() && into.sizes() == shape && into.is_contiguous();
  if (!packed_gemm_available() || g.stride(1) != 1 || x.stride(1) != 1) {
    if (!own) return torch::mm(g.t(), x).view(shape);
    torch::Tensor m = into.view({g.size(1), x.size(1)});
    torch::mm_out(m, g.t(), x);
    return into;
  }
  torch::Tensor out = own ? into : torch::empty(shape, g.options());
  gemm_at_b(g.size(0), g.data_ptr<float>(), g.stride(0), g.size(1), x.data_ptr<float>(), x.stride(0), x.size(1),
            out.data_ptr<float>(), x.size(1));
  return out;
}

torch::Tensor rows_times(const torch::Tensor& rows, const torch::Tensor& w) {
  const torch::Tensor wm = as_matrix(w);
  if (!packed_rows(rows)) return torch::mm(rows, wm);
  const PackedB packed = PackedB::in_place(wm.data_ptr<float>(), wm.size(0), wm.size(1), wm.stride(0));
  torch::Tensor out = torch::empty({rows.size(0), wm.size(1)}, rows.options());
  gemm_packed(rows.size(0), rows.data_ptr<float>(), rows.stride(0), packed, nullptr, out.data_ptr<float>(),
              out.stride(0));
  return out;
}

}  // namespace engine
