#include "engine/report/run_info.h"

#include <torch/version.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/accelerator/accelerator.h"
#include "engine/core/version.h"
#include "engine/io/atomic_file.h"

namespace engine::report {

namespace {

std::string hostname() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("unknown");
}

// /proc is Linux's; elsewhere these fields stay empty rather than failing a finished run.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "";
}

double memory_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib / (1024.0 * 1024.0);
    in.ignore(1 << 10, '\n');
  }
  return 0;
}


nlohmann::json machine() {
  return {{"hostname", hostname()},
          {"cpu", cpu_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_gib", std::round(memory_gib() * 10) / 10}};
}

}  // namespace

std::string describe_machine() {
  auto m = machine();
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", m["memory_gib"].get<double>());
  std::string cpu = m["cpu"].get<std::string>();
  return m["hostname"].get<std::string>() + (cpu.empty() ? "" : ", " + cpu) + ", " +
         std::to_string(m["cores"].get<unsigned>()) + " cores, " + mem;
}

void write_run_info(const std::string& run_dir, const Accelerator& acc, const std::string& status) {
  nlohmann::json j{{"status", status},
                   {"ended_at", utc_now()},
                   {"world_size", acc.world().world_size},
                   {"accelerator", acc.describe()},
                   {"mixed_precision", acc.mixed_precision()},
                   {"machine", machine()},
                   {"engine_version", engine_version()},
                   {"git_revision", git_revision()},
                   {"build_type", build_type()},
                   {"torch_version", TORCH_VERSION}};
  write_file_atomic(run_dir + "/run_info.json", j.dump(2) + "\n");
}

std::string utc_now(const char* format) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace engine::report
