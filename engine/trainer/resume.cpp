#include "engine/trainer/resume.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "engine/core/errors.h"
#include "engine/trainer/checkpointer.h"

namespace engine {

namespace {

namespace fs = std::filesystem;

// Every leaf of a TOML document as "a.b[2].c" -> its TOML text. Arrays of scalars stay one leaf.
void flatten(const toml::node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (const auto* t = node.as_table()) {
    for (const auto& [k, v] : *t) flatten(v, prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str()), out);
  } else if (const auto* a = node.as_array(); a && !a->empty() && a->is_array_of_tables()) {
    for (size_t i = 0; i < a->size(); ++i) flatten(*a->get(i), prefix + "[" + std::to_string(i) + "]", out);
  } else {
    std::ostringstream s;
    node.visit([&](const auto& n) { s << n; });
    out[prefix] = s.str();
  }
}

std::map<std::string, std::string> leaves(const std::string& text, const std::string& what) {
  std::map<std::string, std::string> out;
  try {
    flatten(toml::parse(text), "", out);
  } catch (const toml::parse_error& e) {
    throw UserError(what + ": its recipe does not parse: " + std::string(e.description()));
  }
  return out;
}

bool is_safe(const std::string& key) {
  for (const auto& s : resume_safe_keys())
    if (key == s || key.rfind(s + ".", 0) == 0 || key.rfind(s + "[", 0) == 0) return true;
  return false;
}

std::string meta(const SafetensorsFile& f, const char* key) {
  auto it = f.metadata.find(key);
  return it == f.metadata.end() ? "" : it->second;
}

}  // namespace

const std::vector<std::string>& resume_safe_keys() {
  static const std::vector<std::string> keys{
      "train.epochs",           // train longer (the schedule stretches from here on)
      "train.max_steps",        // likewise
      "run.output_dir",         // the resumed run writes where its checkpoint lives
      "base",                   // a path; what it contributed is compared key by key
      "data.workers",           // loader threads and prefetch: same batches, other timing
      "data.prefetch",
      "data.eval_batch_size",   // evaluation sums are exact whatever the batch
      "accelerator.threads",    // results are identical at any thread count up to rounding order
      "accelerator.timeout_s",
      "checkpoint",             // when checkpoints are written
      "predict",                // what happens after training
      "expect",
  };
  return keys;
}

std::optional<ResumePoint> find_resume_point(const ResumeRequest& request, const std::string& recipe_run_dir) {
  if (!request.requested) return std::nullopt;
  const bool implicit = request.from.empty();
  const std::string from = implicit ? recipe_run_dir : request.from;
  std::error_code ec;
  ResumePoint p;
  if (!implicit && fs::is_regular_file(from, ec)) {
    p.path = from;
    p.file = Checkpointer::load_resume(from);  // an explicitly named file must be good
    p.run_dir = fs::path(from).parent_path().parent_path().string();
    if (p.run_dir.empty()) p.run_dir = ".";
    return p;
  }
  if (!fs::is_directory(from, ec)) {
    if (implicit) return std::nullopt;  // the first submission of a job that always passes --resume
    throw UserError("--resume " + from + ": no such run directory or checkpoint file");
  }
  p.run_dir = from;
  for (const auto& path : Checkpointer::resume_checkpoints(from)) {
    try {
      p.file = Checkpointer::load_resume(path);
      p.path = path;
      return p;
    } catch (const UserError& e) {
      p.skipped.push_back(e.what());
    }
  }
  if (implicit && p.skipped.empty()) return std::nullopt;
  std::string msg = fmt::format("--resume {}: no complete checkpoint in {}/checkpoints", from, from);
  for (const auto& s : p.skipped) msg += "\n  skipped " + s;
  if (p.skipped.empty())
    msg += " (resume checkpoints are written at epoch ends and every [checkpoint] every_steps steps; this run wrote none)";
  throw UserError(msg);
}

std::vector<std::string> check_resumable(const ResumePoint& point, const std::string& resolved_toml, int world_size) {
  const std::string saved_world = meta(point.file, "world_size");
  if (saved_world != std::to_string(world_size))
    throw UserError(fmt::format(
        "{}: written by a run of {} processes, this one has {}: resume with the same number (engine launch -n {} ...). "
        "Each rank's shuffle shard and random state belong to its world size, so another one could not continue "
        "the same run exactly",
        point.path, saved_world, world_size, saved_world));
  auto before = leaves(meta(point.file, "recipe"), point.path);
  auto now = leaves(resolved_toml, "this recipe");
  std::vector<std::string> refused, accepted;
  auto note = [&](const std::string& key, const std::string& a, const std::string& b) {
    (is_safe(key) ? accepted : refused).push_back(fmt::format("{}: {} -> {}", key, a, b));
  };
  for (const auto& [k, v] : before) {
    auto it = now.find(k);
    if (it == now.end()) note(k, v, "(absent)");
    else if (it->second != v) note(k, v, it->second);
  }
  for (const auto& [k, v] : now)
    if (!before.count(k)) note(k, "(absent)", v);
  if (!refused.empty()) {
    std::string msg = fmt::format("{}: this recipe differs from the one the checkpoint was written with, in keys a resume "
                                  "cannot change without changing what the finished steps computed:",
                                  point.path);
    for (const auto& r : refused) msg += "\n  " + r;
    msg += "\nresume with the original recipe (saved as " + point.run_dir +
           "/recipe.resolved.toml), or start a new run. Keys that may change: ";
    for (size_t i = 0; i < resume_safe_keys().size(); ++i) msg += (i ? ", " : "") + resume_safe_keys()[i];
    throw UserError(msg);
  }
  return accepted;
}

std::string thread_count_note(const ResumePoint& point, int threads) {
  const std::string saved = meta(point.file, "threads"), now = std::to_string(threads);
  if (saved.empty() || saved == now) return "";
  return fmt::format(
      "  note: the checkpoint's run used {0} threads per process, this one {1}: the steps from here round as "
      "{1} threads do, so the metrics may differ from an uninterrupted run's in their last digits "
      "(resume with --set accelerator.threads={0} to continue it bit for bit)\n",
      saved, now);
}

}  // namespace engine
