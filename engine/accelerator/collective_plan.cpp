// Agreement checks and bucketing shared by the collective backends (see collective_plan.h).
#include "engine/accelerator/collective_plan.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/core/errors.h"

namespace engine {
namespace {

// What must match per tensor, as int64 so it can travel in one tensor: dtype, layout, device,
// ndim, then the sizes. An undefined tensor is all -1 (and rejected once everyone agrees).
constexpr int kHead = 4;
std::vector<int64_t> describe(const torch::Tensor& t) {
  if (!t.defined()) return {-1, -1, -1, -1};
  std::vector<int64_t> d{static_cast<int64_t>(t.scalar_type()), static_cast<int64_t>(t.layout()),
                         static_cast<int64_t>(t.device().type()), t.dim()};
  for (int64_t s : t.sizes()) d.push_back(s);
  return d;
}

std::string shape_text(const int64_t* d, int64_t ndim) {
  std::string s = "[";
  for (int64_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(d[kHead + i]);
  return s + "]";
}

std::string describe_text(const int64_t* d, bool with_dtype, bool with_device) {
  if (d[0] == -1) return "undefined";
  std::string s = shape_text(d, d[3]);
  if (with_dtype) s += std::string(" ") + c10::toString(static_cast<c10::ScalarType>(d[0]));
  if (with_device) s += " on " + c10::DeviceTypeName(static_cast<c10::DeviceType>(d[2]), true);
  return s;
}

// FNV-1a: a mismatch anywhere in the list changes the 64-bit value (false agreement would need a
// collision between two rank's lists, which the fixed inputs here make practically impossible).
uint64_t fnv1a(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int64_t shapes_fingerprint(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& t : tensors)
    for (int64_t v : describe(t)) h = fnv1a(h, v);
  int64_t hash;
  std::memcpy(&hash, &h, sizeof hash);
  return hash;
}

void check_same_shapes(const char* op, const std::vector<torch::Tensor>& tensors, int root,
                       const GatherRows& gather) {
  int64_t max_ndim = 0;
  for (const auto& t : tensors)
    if (t.defined()) max_ndim = std::max<int64_t>(max_ndim, t.dim());
  const int64_t hash = shapes_fingerprint(tensors);
  torch::Tensor fp =
      gather(torch::tensor(std::vector<int64_t>{static_cast<int64_t>(tensors.size()), hash, max_ndim, root}));
  auto all = fp.accessor<int64_t, 2>();
  const int world = static_cast<int>(fp.size(0));
  bool same = true;
  for (int r = 1; r < world; ++r) {
    for (int c = 0; c < 4; ++c) same = same && all[r][c] == all[0][c];
  }
  if (same) return;  // the common case: one tiny collective and done

  std::string msg;
  if (all[0][3] != -1) {
    for (int r = 1; r < world && msg.empty(); ++r) {
      if (all[r][3] == all[0][3]) continue;
      msg = fmt::format("{}: ranks pass different roots:", op);
      for (int q = 0; q < world; ++q) msg += fmt::format("{} rank {} root {}", q ? "," : "", q, all[q][3]);
    }
  }
  for (int r = 1; r < world && msg.empty(); ++r) {
    if (all[r][0] == all[0][0]) continue;
    msg = fmt::format("{}: ranks pass different numbers of tensors:", op);
    for (int q = 0; q < world; ++q) msg += fmt::format("{} rank {} {}", q ? "," : "", q, all[q][0]);
  }
  if (msg.empty()) {
    // Same count, different contents: fetch every rank's full descriptions to name them. Every
    // rank got the same fingerprints, so every rank takes this branch: the gather cannot hang.
    int64_t width = 0;
    for (int r = 0; r < world; ++r) width = std::max(width, all[r][2]);
    width += kHead;
    const int64_t n = all[0][0];
    std::vector<int64_t> rows(static_cast<size_t>(n * width), -1);
    for (int64_t i = 0; i < n; ++i) {
      auto d = describe(tensors[i]);
      std::copy(d.begin(), d.end(), rows.begin() + i * width);
    }
    torch::Tensor detail = gather(torch::tensor(rows)).contiguous();
    const int64_t* base = detail.data_ptr<int64_t>();
    auto at = [&](int r, int64_t i) { return base + (r * n + i) * width; };
    for (int64_t i = 0; i < n && msg.empty(); ++i) {
      bool dtype_differs = false, device_differs = false, differs = false;
      for (int r = 1; r < world; ++r) {
        differs = differs || !std::equal(at(r, i), at(r, i) + width, at(0, i));
        dtype_differs = dtype_differs || at(r, i)[0] != at(0, i)[0];
        device_differs = device_differs || at(r, i)[2] != at(0, i)[2];
      }
      if (!differs) continue;
      msg = fmt::format("{}: shape mismatch across ranks:", op);
      for (int r = 0; r < world; ++r) {
        msg += fmt::format("{} rank {} {}", r ? "," : "", r,
                           describe_text(at(r, i), dtype_differs, device_differs));
      }
      if (n > 1) msg += fmt::format(" (tensor {} of {})", i, n);
    }
  }
  if (!msg.empty()) throw RunError(msg);
}

std::vector<int64_t> check_gather_shapes(const torch::Tensor& t, const GatherRows& gather) {
  const int64_t width = kHead + kMaxGatherDims;
  std::vector<int64_t> row(width, -1);
  auto d = describe(t);
  std::copy_n(d.begin(), std::min<size_t>(d.size(), width), row.begin());
  torch::Tensor all = gather(torch::tensor(row)).contiguous();
  const int world = static_cast<int>(all.size(0));
  const int64_t* base = all.data_ptr<int64_t>();
  auto at = [&](int r) { return base + r * width; };
  bool ok = true, too_many_dims = false;
  for (int r = 0; r < world; ++r) {
    too_many_dims = too_many_dims || at(r)[3] > kMaxGatherDims;
    // dtype, layout, device, ndim, then every size but dim 0.
    ok = ok && std::equal(at(r), at(r) + kHead, at(0)) &&
         std::equal(at(r) + kHead + 1, at(r) + width, at(0) + kHead + 1);
  }
  if (too_many_dims) {
    throw std::invalid_argument(
        fmt::format("all_gather: tensors of up to {} dims are supported", kMaxGatherDims));
  }
  if (!ok) {
    std::string msg = "all_gather: shape mismatch across ranks (only dim 0 may differ):";
    bool dtypes = false;
    for (int r = 1; r < world; ++r) dtypes = dtypes || at(r)[0] != at(0)[0];
    for (int r = 0; r < world; ++r) {
      msg += fmt::format("{} rank {} {}", r ? "," : "", r, describe_text(at(r), dtypes, false));
    }
    throw RunError(msg);
  }
  std::vector<int64_t> rows;
  for (int r = 0; r < world; ++r) rows.push_back(at(r)[kHead]);
  return rows;
}

std::vector<Bucket> make_buckets(const std::vector<torch::Tensor>& tensors, std::size_t max_bucket_bytes) {
  // Group by (dtype, device) in first-seen order so the buckets line up on every rank.
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::pair<int, std::string>, std::size_t> group_of;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (!t.defined() || t.layout() != torch::kStrided) {
      throw std::invalid_argument(
          fmt::format("collective on tensor {}: expected a defined dense tensor (got {})", i,
                      t.defined() ? "a sparse tensor" : "an undefined tensor, e.g. a missing gradient"));
    }
    auto key = std::make_pair(static_cast<int>(t.scalar_type()), t.device().str());
    auto [it, inserted] = group_of.emplace(key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<Bucket> buckets;
  for (const auto& g : groups) {
    for (std::size_t k = 0; k < g.size();) {
      Bucket b;
      std::size_t bytes = 0;
      for (; k < g.size(); ++k) {
        const auto& t = tensors[g[k]];
        std::size_t nb = t.numel() * t.element_size();
        if (!b.members.empty() && bytes + nb > max_bucket_bytes) break;
        b.members.push_back(g[k]);
        b.numel += t.numel();
        bytes += nb;
      }
      buckets.push_back(std::move(b));
    }
  }
  return buckets;
}

void pack(Bucket& b, const std::vector<torch::Tensor>& tensors, bool fill) {
  const auto& first = tensors[b.members[0]];
  // Members that already lie back to back in one buffer (a lone contiguous tensor, or gradients
  // allocated as views of one flat buffer, as DDP's gradient_as_bucket_view does) are used in
  // place: no copy in, no copy out.
  const char* base = nullptr;
  const char* next = nullptr;
  bool adjacent = true;
  for (auto i : b.members) {
    const auto& t = tensors[i];
    if (t.numel() == 0) continue;
    const char* p = static_cast<const char*>(t.data_ptr());
    if (!t.is_contiguous() || (next != nullptr && p != next)) {
      adjacent = false;
      break;
    }
    if (base == nullptr) base = p;
    next = p + t.numel() * t.element_size();
  }
  if (adjacent && base != nullptr) {
    // Non-owning view: the members keep the storage alive for the whole collective.
    b.flat = torch::from_blob(const_cast<char*>(base), {b.numel}, first.options());
    b.aliases = true;
  } else if (fill) {
    std::vector<torch::Tensor> parts;
    for (auto i : b.members) parts.push_back(tensors[i].reshape({-1}));
    b.flat = torch::cat(parts);
  } else {
    b.flat = torch::empty({b.numel}, first.options());
  }
}

void unflatten(const Bucket& bucket, std::vector<torch::Tensor>& tensors) {
  if (bucket.aliases) return;
  int64_t offset = 0;
  for (auto i : bucket.members) {
    auto& t = tensors[i];
    t.copy_(bucket.flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace engine
