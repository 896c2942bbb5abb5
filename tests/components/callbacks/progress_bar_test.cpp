// The console of a real run, as tqdm users expect it: progress on stderr, redrawn in place only on
// a terminal that can take it, no ANSI escapes under NO_COLOR, and the metrics table on stdout
// whatever stderr is. Each case runs `engine run` on a few real MNIST digits (2 epochs of 2 steps),
// under a pseudo-terminal (util-linux `script`) where a terminal is needed.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

struct Console {
  std::string out, err;  // what the run wrote to stdout and to stderr
};

// `env` is put before the engine command (TERM=..., NO_COLOR=...). With `tty`, stderr is a
// pseudo-terminal without newline translation (stty -onlcr), so any '\r' in it is the engine's.
Console run_progress(const std::string& tag, const std::string& env, bool tty) {
  mnist_file("train.csv");
  const std::string dir = temp_dir("progress_" + tag);
  const std::string cmd =
      "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u "
      "NO_COLOR " +
      env + " " + engine_binary() +
      " run recipes/mnist_convnext.toml --set accelerator.threads=1 --set data.split.max_train=32"
      " --set data.batch_size=16 --set train.epochs=2 --set data.split.max_valid=16 --set predict.limit=8"
      " --set run.output_dir=" +
      dir + "/run > " + dir + "/out";
  Console c;
  if (tty) {
    auto r = run_command("cd " + source_path("") + " && SHELL=/bin/sh script -qec 'stty -onlcr; " + cmd +
                         "' /dev/null < /dev/null");
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    c.err = r.output;
  } else {
    // A subshell: run_command adds its own 2>&1 after the command.
    auto r = run_command("cd " + source_path("") + " && (" + cmd + " 2> " + dir + "/err < /dev/null)");
    REQUIRE_MESSAGE(r.exit_code == 0, r.output << read_text(dir + "/err"));
    c.err = read_text(dir + "/err");
  }
  c.out = read_text(dir + "/out");
  std::filesystem::remove_all(dir);
  return c;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Lines of `text` that start with `prefix`.
int lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

// stdout holds the metrics table (header + one row per epoch) and no progress.
void check_table(const Console& c) {
  INFO("stdout:\n" << c.out);
  CHECK(lines_starting(c.out, "epoch  ") == 1);
  CHECK(has(c.out, "train/loss"));
  CHECK(has(c.out, "valid/accuracy"));
  CHECK(lines_starting(c.out, "    1  ") == 1);
  CHECK(lines_starting(c.out, "    2  ") == 1);
  CHECK_FALSE(has(c.out, "epoch 1/2 ["));
  CHECK_FALSE(has(c.out, "\r"));
  CHECK_FALSE(has(c.out, "\x1b["));
}

}  // namespace

TEST_CASE(
    "progress_bar: stderr not a terminal: plain lines per epoch, no redraws or escapes, table on stdout") {
  const Console c = run_progress("pipe", "TERM=xterm-256color", false);
  INFO("stderr:\n" << c.err);
  CHECK_FALSE(has(c.err, "\r"));
  CHECK_FALSE(has(c.err, "\x1b["));
  // One line at the end of each epoch (plain_every_s = 15 s is longer than this run).
  CHECK(lines_starting(c.err, "epoch 1/2 [========================] 2/2 loss ") == 1);
  CHECK(lines_starting(c.err, "epoch 2/2 [========================] 2/2 loss ") == 1);
  check_table(c);
}

TEST_CASE(
    "progress_bar: on a terminal the bar is redrawn in place in colour, and the table stays on stdout") {
  // The control for the two cases below: the same run on a terminal does use '\r' and escapes.
  const Console c = run_progress("tty", "TERM=xterm", true);
  INFO("stderr:\n" << c.err);
  CHECK(has(c.err, "\repoch 1/2 ["));
  CHECK(has(c.err, "\x1b[32m"));
  CHECK(lines_starting(c.err, "epoch 1/2 [") == 0);  // never a line of its own
  check_table(c);
}

TEST_CASE("progress_bar: TERM=dumb gets plain lines, no carriage returns or escapes") {
  const Console c = run_progress("dumb", "TERM=dumb", true);
  INFO("stderr:\n" << c.err);
  CHECK_FALSE(has(c.err, "\r"));
  CHECK_FALSE(has(c.err, "\x1b["));
  CHECK(lines_starting(c.err, "epoch 1/2 [") == 1);
  CHECK(lines_starting(c.err, "epoch 2/2 [") == 1);
  check_table(c);
}

TEST_CASE("progress_bar: NO_COLOR on a terminal redraws without any ANSI escape") {
  const Console c = run_progress("no_color", "TERM=xterm NO_COLOR=1", true);
  INFO("stderr:\n" << c.err);
  CHECK(has(c.err, "\repoch 2/2 ["));
  CHECK_FALSE(has(c.err, "\x1b["));
  check_table(c);
}
