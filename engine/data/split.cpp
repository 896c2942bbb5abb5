#include "engine/data/split.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "engine/core/errors.h"
#include "engine/core/rng.h"

namespace engine {

SplitOptions SplitOptions::read(Options& o) {
  SplitOptions s;
  s.valid_fraction = o.number("valid_fraction", s.valid_fraction, "fraction of the labeled data held out for validation", 0.0, 1.0);
  s.shuffle = o.flag("shuffle", s.shuffle, "shuffle before splitting; false keeps file order (first rows train)");
  s.seed = o.integer("seed", s.seed, "seed of the split shuffle (independent of run.seed)");
  s.style = o.choice("style", s.style, {"engine", "fastai"},
                     "engine = this engine's shuffle; fastai = RandomSplitter(valid_pct, seed): torch.randperm, "
                     "int(valid_fraction * n) valid, the same indices as fastai");
  s.train = o.integers("train", {}, "explicit [begin, end) row range for training; overrides valid_fraction");
  s.valid = o.integers("valid", {}, "explicit [begin, end) row range for validation");
  s.max_train = o.integer("max_train", 0, "use only the first N training samples (0 = all)", 0);
  s.max_valid = o.integer("max_valid", 0, "use only the first N validation samples (0 = all)", 0);
  for (const char* k : {"train", "valid"}) {
    const auto& r = std::string(k) == "train" ? s.train : s.valid;
    if (!r.empty() && (r.size() != 2 || r[0] < 0 || r[1] < r[0]))
      o.error(k, "expected [begin, end) with 0 <= begin <= end");
  }
  if (s.style == "fastai" && !s.shuffle)
    o.error("shuffle", "style = \"fastai\" always shuffles (RandomSplitter)", "remove shuffle = false or use style = \"engine\"");
  if (s.train.empty() != s.valid.empty()) o.error(s.train.empty() ? "train" : "valid", "set both train and valid ranges, or neither");
  return s;
}

Split make_split(size_t n, const SplitOptions& opts) {
  Split out;
  auto range = [&](const std::vector<int64_t>& r, const char* what) {
    if (static_cast<size_t>(r[1]) > n)
      throw UserError(std::string("data.split.") + what + " = [" + std::to_string(r[0]) + ", " + std::to_string(r[1]) +
                      "] exceeds the dataset size " + std::to_string(n));
    std::vector<size_t> v(static_cast<size_t>(r[1] - r[0]));
    std::iota(v.begin(), v.end(), static_cast<size_t>(r[0]));
    return v;
  };
  if (!opts.train.empty()) {
    out.train = range(opts.train, "train");
    out.valid = range(opts.valid, "valid");
    if (opts.train[0] < opts.valid[1] && opts.valid[0] < opts.train[1])
      throw UserError("data.split: train and valid ranges overlap");
  } else if (opts.style == "fastai") {
    // torch.manual_seed seeds the default CPU generator; a fresh CPU generator with the same seed
    // draws the same numbers, and randperm runs the same CPU kernel as from Python.
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(opts.seed));
    at::Tensor perm = torch::randperm(static_cast<int64_t>(n), gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    // Python's int() truncates the double product; the same double arithmetic here.
    const auto cut = static_cast<size_t>(opts.valid_fraction * static_cast<double>(n));
    out.valid.assign(p, p + cut);
    out.train.assign(p + cut, p + n);
  } else if (opts.style != "engine") {
    throw UserError("data.split.style = \"" + opts.style + "\" is unknown (expected engine or fastai)");
  } else {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (opts.shuffle) {
      Rng rng(Rng::mix(static_cast<uint64_t>(opts.seed), 0x5B117));
      std::shuffle(order.begin(), order.end(), rng.engine());
    }
    size_t n_valid = static_cast<size_t>(static_cast<double>(n) * opts.valid_fraction + 0.5);
    out.train.assign(order.begin(), order.end() - static_cast<std::ptrdiff_t>(n_valid));
    out.valid.assign(order.end() - static_cast<std::ptrdiff_t>(n_valid), order.end());
    // Validation in file order: predictions and per-sample reports line up with the data.
    std::sort(out.valid.begin(), out.valid.end());
  }
  if (opts.max_train > 0 && out.train.size() > static_cast<size_t>(opts.max_train)) out.train.resize(opts.max_train);
  if (opts.max_valid > 0 && out.valid.size() > static_cast<size_t>(opts.max_valid)) out.valid.resize(opts.max_valid);
  if (out.train.empty()) throw UserError("data.split leaves no training samples");
  return out;
}

}  // namespace engine
