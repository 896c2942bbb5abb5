#pragma once
// Train/valid split of a labeled dataset: by fraction (optionally shuffled with its own seed) or by
// explicit index ranges. The split never depends on world size or worker count.
// Two shuffled styles:
// - "engine" (default): a std::mt19937_64 shuffle; round(valid_fraction * n) valid samples, kept
//   in file order.
// - "fastai": exactly fastai's RandomSplitter(valid_pct, seed): torch.manual_seed(seed);
//   perm = torch.randperm(n); cut = int(valid_pct * n); valid = perm[:cut], train = perm[cut:],
//   both in permutation order. The same seed and files give fastai's very split, so a model
//   trained here is validated on the images fastai's notebook held out.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/recipe/options.h"

namespace engine {

struct SplitOptions {
  double valid_fraction = 0.2;
  bool shuffle = true;          // false: the first (1 - valid_fraction) go to train, like the seed's [:40000]
  int64_t seed = 42;
  std::string style = "engine";  // engine | fastai (RandomSplitter)
  std::vector<int64_t> train;   // [begin, end) index range; overrides valid_fraction when set
  std::vector<int64_t> valid;
  int64_t max_train = 0;        // 0 = all; > 0 keeps only the first N (quick runs, regression tests)
  int64_t max_valid = 0;
  static SplitOptions read(Options& o);
};

struct Split {
  std::vector<size_t> train;
  std::vector<size_t> valid;
};

/// Throws UserError when ranges fall outside [0, n) or overlap.
Split make_split(size_t n, const SplitOptions& opts);

}  // namespace engine
