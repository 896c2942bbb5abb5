#pragma once
// run_info.json: where and how a run ran, which nothing else in the run directory records (the
// world size, the device, the machine, the engine build). `engine run` writes it on the main
// process when the run ends, finished or failed; the report reads it back.
//   {"status": "finished"|"failed"|"preempted", "ended_at": "2026-12-01T06:20:04Z", "world_size": 2,
//    "accelerator": "cpu, 2 processes x 1 thread, mixed precision: no", "mixed_precision": "no",
//    "machine": {"hostname": .., "cpu": .., "cores": .., "memory_gib": ..},
//    "engine_version": .., "git_revision": .., "build_type": .., "torch_version": ..}
#include <string>

namespace engine {
class Accelerator;
}

namespace engine::report {

/// Writes run_dir/run_info.json atomically. `status`: "finished", "failed" or "preempted".
void write_run_info(const std::string& run_dir, const Accelerator& accelerator, const std::string& status);

/// The current UTC time formatted with strftime's `format`.
std::string utc_now(const char* format = "%Y-%m-%dT%H:%M:%SZ");

/// "hostname, Intel(R) Xeon(R) ..., 16 cores, 62.7 GiB": the machine this process runs on.
std::string describe_machine();

}  // namespace engine::report
