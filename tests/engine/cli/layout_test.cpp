// The layout `engine run` picks for itself ([accelerator] processes): how many local processes,
// threads each, and each one's share of the batch.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include <sched.h>

#include <algorithm>
#include <string>

#include "engine/cli/layout.h"
#include "engine/core/errors.h"
#include "engine/trainer/registries.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine;

TEST_CASE("auto layout: one process per core, each a whole share of the batch, never under 8 samples") {
  auto l = choose_layout(0, 64, 0, 2, 0);
  CHECK(l.processes == 2);
  CHECK(l.threads == 1);
  CHECK(l.batch_per_process == 32);
  CHECK(choose_layout(0, 64, 0, 16, 0).processes == 8);   // 16 cores: 64 / 8 = 8 each, no fewer
  CHECK(choose_layout(0, 60, 0, 8, 0).processes == 6);    // 8 cores: the largest divisor of 60 up to 8
  CHECK(choose_layout(0, 60, 0, 8, 0).batch_per_process == 10);
  CHECK(choose_layout(0, 7, 0, 4, 0).processes == 1);     // a batch too small to split stays in one process
  CHECK(choose_layout(0, 64, 2, 8, 0).processes == 4);    // threads = 2 asked: 8 cores hold 4 such processes
  CHECK(choose_layout(0, 64, 2, 8, 0).threads == 2);
  CHECK(choose_layout(0, 64, 0, 16, 2).processes == 2);   // GPUs: one process per device
  CHECK(choose_layout(0, 64, 0, 1, 0).processes == 1);
}

TEST_CASE("auto layout with BatchNorm: one process with every core on CPU, and a split batch is said") {
  const auto synced = BatchNormLayers::synchronised, per_process = BatchNormLayers::per_process;
  auto l = choose_layout(0, 64, 0, 2, 0, synced);
  CHECK(l.processes == 1);
  CHECK(l.threads == 2);
  CHECK(l.batch_per_process == 64);
  CHECK(l.why.find("BatchNorm") != std::string::npos);
  CHECK(l.note.empty());
  CHECK(choose_layout(0, 64, 0, 2, 0, per_process).processes == 1);
  // Asked for 2: granted, with a note on what the split does to BatchNorm.
  auto two = choose_layout(2, 64, 0, 2, 0, synced);
  CHECK(two.processes == 2);
  CHECK(two.note.find("all-reduce their statistics over the 2 processes") != std::string::npos);
  CHECK(choose_layout(2, 64, 0, 2, 0, per_process).note.find("each process's 32 samples, not the 64 of one process") !=
        std::string::npos);
  // GPUs: still one process per device (what several GPUs are for), with the note.
  auto gpus = choose_layout(0, 64, 0, 16, 2, synced);
  CHECK(gpus.processes == 2);
  CHECK(!gpus.note.empty());
  // No BatchNorm: no note.
  CHECK(choose_layout(2, 64, 0, 2, 0).note.empty());
  // The registry says which models have BatchNorm.
  const Registries reg = make_registries();
  CHECK(reg.models.has_trait("resnet34", "batch_norm"));
  CHECK(reg.models.has_trait("resnet50", "batch_norm"));
  CHECK(!reg.models.has_trait("convnext_atto", "batch_norm"));
  CHECK(!reg.models.has_trait("no_such_model", "batch_norm"));
}

TEST_CASE("engine run with processes = 0 keeps a BatchNorm model in one process, and says why") {
  using namespace engine::test;
  const std::string images = source_path("data/digits_png/images");
  REQUIRE_MESSAGE(std::filesystem::is_directory(images), images << " missing: run datasets/make_digit_pngs.sh (tools/setup.sh does)");
  const std::string dir = temp_dir("layout_bn");
  auto r = run_command("cd " + source_path("") + " && ENGINE_PROCESSES= ENGINE_THREADS= " + engine_binary() +
                       " run recipes/digits_png_resnet34_pretrain.toml --set accelerator.processes=0"
                       " --set data.split.max_train=64 --set data.split.max_valid=32 --set train.max_steps=1"
                       " --set train.epochs=1 --set run.output_dir=" + dir + "/run");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_MESSAGE(r.output.find("layout: 1 process x ") != std::string::npos, r.output);
  CHECK(r.output.find("the model has BatchNorm, whose statistics several processes would have to synchronise") != std::string::npos);
  CHECK(r.output.find("accelerator: cpu, 1 process") != std::string::npos);
}

TEST_CASE("an explicit process count must divide the batch") {
  auto l = choose_layout(4, 64, 0, 2, 0);
  CHECK(l.processes == 4);
  CHECK(l.batch_per_process == 16);
  CHECK(l.threads == 1);
  CHECK_THROWS_AS(choose_layout(3, 64, 0, 2, 0), UserError);
}

TEST_CASE("engine run with processes = 0 starts a local DDP job sized to this machine, and says so") {
  using namespace engine::test;
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  int expect = std::min(cores, 4);  // batch 32 with >= 8 samples each: at most 4 processes
  while (32 % expect != 0) --expect;
  mnist_file("train.csv");
  const std::string dir = temp_dir("layout_auto");
  // ENGINE_PIN_RANKS=1 (opt-in): each rank keeps its own slice of the cores, and the run says so.
  auto r = run_command("cd " + source_path("") + " && ENGINE_PROCESSES= ENGINE_THREADS= ENGINE_PIN_RANKS=1 " + engine_binary() +
                       " run recipes/mnist_convnext.toml --set data.split.max_train=128 --set data.split.max_valid=64"
                       " --set train.epochs=1 --set predict.limit=16 --set data.batch_size=32 --set run.output_dir=" +
                       dir + "/run");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const std::string procs = std::to_string(expect) + (expect == 1 ? " process" : " processes");
  CHECK_MESSAGE(r.output.find("layout: " + procs + " x ") != std::string::npos, r.output);
  CHECK(r.output.find("batch " + std::to_string(32 / expect) + " per process = 32") != std::string::npos);
  if (expect > 1) {
    CHECK(r.output.find("accelerator: cpu, " + procs) != std::string::npos);
    // The ranks divided the cores between them (cpu_threads.h).
    CHECK(r.output.find("(each rank on its own core") != std::string::npos);
  }
  // A DDP run reports its communication time per step (all-reduce + agreement) in every epoch line.
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  int epoch_lines = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "epoch") continue;
    ++epoch_lines;
    CHECK(j.contains("comm_ms_per_step") == (expect > 1));
    if (expect > 1) CHECK(j["comm_ms_per_step"].get<double>() > 0);
  }
  CHECK(epoch_lines == 1);
}
