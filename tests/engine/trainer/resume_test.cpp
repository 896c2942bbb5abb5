// Runs that survive: a run killed (kill -9), preempted (SIGTERM) or cut mid-write, then resumed with
// `--resume`, must end exactly as the uninterrupted run: the same metrics.jsonl (timing fields
// aside), bit-identical weights and the same predictions. All on the real MNIST digits.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// kSmallMnistRun (paths.h): 1 process x 32 = 12 steps an epoch, 2 processes = 6; two epochs.
// 4 steps an epoch, two epochs: for the write-fault runs, which each run twice.
const char* kTiny =
    " --set data.split.max_train=128 --set data.split.max_valid=100 --set train.epochs=2"
    " --set predict.limit=50 --set data.batch_size=32 --set checkpoint.every_steps=3";

// `env` is "NAME=value " settings for the engine process; `shell` runs before it (ulimit).
std::string mnist_cmd(const std::string& how, const std::string& args, const std::string& env = "",
                       const std::string& shell = "") {
  mnist_file("train.csv");
  return shell + "cd " + source_path("") + " && ENGINE_THREADS=1 " + env + engine_binary() + " " + how +
         " recipes/mnist_convnext.toml" + args;
}

CommandResult run_mnist(const std::string& how, const std::string& args, const std::string& env = "",
                         const std::string& shell = "") {
  return run_command(mnist_cmd(how, args, env, shell));
}

// Starts the command in the background, waits until `file` exists, waits `delay_ms` more (so the
// signal lands inside a later step, not on the checkpoint's boundary), sends `signal`, and
// returns the command's exit code. A command that ends on its own first is reported as such.
CommandResult interrupt_after(const std::string& cmd, const std::string& file, int delay_ms, const std::string& signal) {
  // Beside the run directory (which the command creates): <dir>/<run>/checkpoints/<file>.
  const auto run = std::filesystem::path(file).parent_path().parent_path();
  const std::string script = run.string() + ".sh", log = run.string() + ".log";
  // "cd DIR && PROGRAM": the cd on its own line, so that $! is the engine's own pid.
  const auto amp = cmd.find(" && ");
  std::ofstream(script) << cmd.substr(0, amp) << "\n"
                        << cmd.substr(amp + 4) << " > " << log << " 2>&1 &\n"
                        << "pid=$!\n"
                        << "while [ ! -f " << file << " ]; do\n"
                        << "  kill -0 $pid 2>/dev/null || { echo 'ended before the signal'; break; }\n"
                        << "  sleep 0.02\n"
                        << "done\n"
                        << "sleep " << delay_ms / 1000.0 << "\n"
                        << "kill -" << signal << " $pid\n"
                        << "wait $pid\n"
                        << "rc=$?\n"
                        << "cat " << log << "\n"
                        << "exit $rc\n";
  return run_command("bash " + script);
}

// metrics.jsonl without the fields that measure time.
std::vector<nlohmann::json> metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string l; std::getline(in, l);) {
    auto j = nlohmann::json::parse(l);
    j.erase("seconds");
    j.erase("images_per_s");
    j.erase("eval_images_per_s");
    j.erase("comm_ms_per_step");
    out.push_back(j);
  }
  return out;
}

void check_same_run(const std::string& resumed, const std::string& reference) {
  auto a = metrics(resumed), b = metrics(reference);
  CHECK(a.size() == b.size());
  CHECK(!a.empty());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) CHECK_MESSAGE(a[i] == b[i], a[i].dump() << " vs " << b[i].dump());
  CHECK(read_text(resumed + "/model.safetensors") == read_text(reference + "/model.safetensors"));
  CHECK(!read_text(reference + "/model.safetensors").empty());
  CHECK(read_text(resumed + "/submission.csv") == read_text(reference + "/submission.csv"));
}

std::string step_file(const std::string& run_dir, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoints/step-%09d.safetensors", step);
  return run_dir + name;
}

int random_in(int lo, int hi) {
  std::random_device rd;
  return std::uniform_int_distribution<int>(lo, hi)(rd);
}

}  // namespace

// Two identical runs started together, each slowing the other down (as ctest -j2 runs tests): what
// the engine decides at start (its OpenBLAS kernel family once came from a timing that load swung)
// must not depend on how busy the machine is. Every test below compares two runs bit for bit.
TEST_CASE("two identical runs at once, each slowing the other, end with the same metrics, weights and predictions") {
  const std::string dir = temp_dir("twins");
  const std::string cmd = mnist_cmd("run", kTiny + std::string(" --set run.output_dir=") + dir + "/");
  const auto amp = cmd.find(" && ");
  const std::string cd = cmd.substr(0, amp), engine = cmd.substr(amp + 4);
  auto both = run_command(cd + " && { " + engine + "a > " + dir + "/a.log 2>&1 & a=$!; " + engine + "b > " + dir +
                          "/b.log 2>&1; b=$?; wait $a; a=$?; cat " + dir + "/a.log " + dir + "/b.log; exit $((a | b)); }");
  REQUIRE_MESSAGE(both.exit_code == 0, both.output);
  check_same_run(dir + "/a", dir + "/b");
}

TEST_CASE("kill -9 at a random step, then --resume: the same metrics, weights and predictions as an uninterrupted run") {
  const std::string dir = temp_dir("resume_kill");
  const std::string every = " --set checkpoint.every_steps=2";
  auto ref = run_mnist("run", kSmallMnistRun + every + " --set run.output_dir=" + dir + "/ref");
  REQUIRE_MESSAGE(ref.exit_code == 0, ref.output);

  // Any even step but the epoch boundary (12) and the last (24); the kill lands up to 0.3 s later.
  int step = 2 * random_in(1, 10);
  if (step == 12) step = 14;
  const int delay = random_in(0, 300);
  MESSAGE("killed after the checkpoint of step " << step << " + " << delay << " ms");
  const std::string run = dir + "/run";
  const std::string args = kSmallMnistRun + every + " --set run.output_dir=" + run;
  auto killed = interrupt_after(mnist_cmd("run", args), step_file(run, step), delay, "KILL");
  REQUIRE_MESSAGE(killed.exit_code == 128 + 9, killed.output);

  // A resume that would not be exact is refused before anything runs: another recipe, another world.
  auto changed = run_mnist("run", args + " --set optimizer.lr=0.01 --resume " + run);
  CHECK(changed.exit_code == 2);
  CHECK_MESSAGE(changed.output.find("optimizer.lr: 0.002 -> 0.01") != std::string::npos, changed.output);
  auto world = run_mnist("launch -n 2 --threads 1", args + " --resume " + run);
  CHECK(world.exit_code == 2);
  CHECK_MESSAGE(world.output.find("written by a run of 1 processes, this one has 2") != std::string::npos, world.output);

  auto resumed = run_mnist("run", args + " --resume " + run);
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("resuming " + run) != std::string::npos);
  check_same_run(run, dir + "/ref");
  // keep_last = 2: only the two newest resume checkpoints remain.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(run + "/checkpoints"))
    if (e.path().filename().string().rfind("step-", 0) == 0) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"step-000000022.safetensors", "step-000000024.safetensors"});
}

TEST_CASE("engine launch -n 2: SIGTERM checkpoints every rank and exits 75, kill -9 loses nothing, and both resume exactly") {
  const std::string dir = temp_dir("resume_ddp");
  const std::string how = "launch -n 2 --threads 1";
  auto ref = run_mnist(how, kSmallMnistRun + std::string(" --set run.output_dir=") + dir + "/ref");
  REQUIRE_MESSAGE(ref.exit_code == 0, ref.output);

  // SIGTERM to the launcher (Slurm's preemption): it reaches both ranks, which finish the step
  // they are in, agree on it, write one checkpoint and exit 75 with the resume command.
  const std::string term = dir + "/term";
  const std::string term_args = kSmallMnistRun + std::string(" --set checkpoint.every_steps=2 --set run.output_dir=") + term;
  auto stopped = interrupt_after(mnist_cmd(how, term_args), step_file(term, 2), random_in(0, 200), "TERM");
  REQUIRE_MESSAGE(stopped.exit_code == 75, stopped.output);
  CHECK_MESSAGE(stopped.output.find("preempted (SIGTERM) at step") != std::string::npos, stopped.output);
  CHECK(stopped.output.find("run the same command with --resume " + term) != std::string::npos);
  auto resumed = run_mnist(how, term_args + " --resume " + term);
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  check_same_run(term, dir + "/ref");

  // kill -9 of the launcher: its workers die with it (no checkpoint at the kill); the run resumes
  // from the last one written, mid-epoch 2.
  const std::string kill = dir + "/kill";
  const std::string kill_args = kSmallMnistRun + std::string(" --set checkpoint.every_steps=4 --set run.output_dir=") + kill;
  auto killed = interrupt_after(mnist_cmd(how, kill_args), step_file(kill, 8), random_in(0, 200), "KILL");
  REQUIRE_MESSAGE(killed.exit_code == 128 + 9, killed.output);
  auto again = run_mnist(how, kill_args + " --resume");  // no value: the recipe's run directory
  REQUIRE_MESSAGE(again.exit_code == 0, again.output);
  CHECK_MESSAGE(again.output.find("resuming " + kill) != std::string::npos, again.output);
  check_same_run(kill, dir + "/ref");
}

TEST_CASE("a checkpoint write cut at any stage, a damaged checkpoint, or a full disk leave a resumable run") {
  const std::string dir = temp_dir("resume_torn");
  auto ref = run_mnist("run", kTiny + std::string(" --set run.output_dir=") + dir + "/ref");
  REQUIRE_MESSAGE(ref.exit_code == 0, ref.output);

  // Checkpoints come at steps 3, 4 (epoch end), 6 and 8: the write of step 6 dies at each stage.
  for (const char* stage : {"partial", "unrenamed", "renamed"}) {
    CAPTURE(stage);
    const std::string run = dir + "/" + stage;
    const std::string args = kTiny + std::string(" --set run.output_dir=") + run;
    auto died = run_mnist("run", args, std::string("ENGINE_FAULT_INJECT=") + stage + "@step-000000006 ");
    REQUIRE_MESSAGE(died.exit_code == 99, died.output);
    auto resumed = run_mnist("run", args + " --resume " + run);
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
    // Before the rename the new file does not exist yet: the run goes on from step 4.
    const std::string from = std::string(stage) == "renamed" ? "step-000000006" : "step-000000004";
    CHECK_MESSAGE(resumed.output.find(from + ".safetensors: after epoch") != std::string::npos, resumed.output);
    check_same_run(run, dir + "/ref");
  }

  // A newest checkpoint damaged on disk is detected (CRC-32), named, and skipped for the one before.
  const std::string bad = dir + "/damaged";
  const std::string bad_args = kTiny + std::string(" --set run.output_dir=") + bad;
  auto died = run_mnist("run", bad_args, "ENGINE_FAULT_INJECT=partial@step-000000008 ");
  REQUIRE_MESSAGE(died.exit_code == 99, died.output);
  {
    std::fstream f(step_file(bad, 6), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(f.tellg());
    f.seekp(size - 100);
    f.put('\x7f');
  }
  auto resumed = run_mnist("run", bad_args + " --resume " + bad);
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK_MESSAGE(resumed.output.find("skipped " + step_file(bad, 6) + ": damaged") != std::string::npos, resumed.output);
  CHECK(resumed.output.find("step-000000004.safetensors: after epoch 1") != std::string::npos);
  check_same_run(bad, dir + "/ref");

  // Disk full (a 20 MB file-size limit: a checkpoint is ~40 MB): the run stops with an error naming
  // the file, leaves no temp file, and the checkpoint before it resumes to the same end.
  const std::string full = dir + "/full";
  const std::string full_args = kTiny + std::string(" --set run.output_dir=") + full;
  auto cut = run_mnist("run", full_args, "ENGINE_FAULT_INJECT=partial@step-000000006 ");
  REQUIRE_MESSAGE(cut.exit_code == 99, cut.output);
  // This resume runs at 2 threads: it says that its steps no longer round as the checkpoint's run did.
  auto limited = run_mnist("run", full_args + " --resume " + full, "ENGINE_THREADS=2 ", "ulimit -f 20000; ");
  CHECK(limited.exit_code == 1);
  CHECK_MESSAGE(limited.output.find("step-000000006.safetensors.tmp: File too large") != std::string::npos, limited.output);
  CHECK_MESSAGE(limited.output.find("the checkpoint's run used 1 threads per process, this one 2") != std::string::npos,
                limited.output);
  CHECK(!std::filesystem::exists(step_file(full, 6) + ".tmp"));
  auto after = run_mnist("run", full_args + " --resume " + full);
  REQUIRE_MESSAGE(after.exit_code == 0, after.output);
  CHECK(after.output.find("step-000000004.safetensors: after epoch 1") != std::string::npos);
  CHECK_MESSAGE(after.output.find("threads per process") == std::string::npos, after.output);
  check_same_run(full, dir + "/ref");
}
