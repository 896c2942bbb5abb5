// libFuzzer target: the digit-recognizer CSV reader (components/datasets/digit_csv.cpp).
//   Input: the CSV file's bytes, read twice: as a labeled file (train.csv) and as an unlabeled
//   one (test.csv), with the square image shape inferred and num_classes = 10, as the shipped
//   recipes read them. Samples of a file that loads are read back with get().
//   Expected: a dataset, or engine::UserError naming file:line. Anything else (another
//   exception, std::bad_alloc, a crash, an ASan/UBSan report, a hang) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "components/datasets/digit_csv.h"
#include "engine/core/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("engine_csv_fuzz_" + std::to_string(getpid()) + ".csv"))
          .string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  for (bool labeled : {true, false}) {
    engine::DigitCsvOptions opts;
    opts.path = path;
    opts.labeled = labeled;
    try {
      engine::DigitCsv csv(opts);
      for (size_t i = 0; i < csv.size(); ++i) csv.get(i);
    } catch (const engine::UserError& e) {
      // the expected outcome of a bad file; ENGINE_FUZZ_VERBOSE=1 shows it (checking a seed)
      if (std::getenv("ENGINE_FUZZ_VERBOSE")) std::fprintf(stderr, "UserError: %s\n", e.what());
    }
  }
  return 0;
}
