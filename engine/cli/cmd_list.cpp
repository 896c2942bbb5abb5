#include <fmt/format.h>

#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

namespace {

template <class R>
void print_registry(const R& registry) {
  std::printf("%ss:\n", registry.kind().c_str());
  for (const auto& name : registry.names()) {
    std::printf("  %s: %s\n", name.c_str(), registry.find(name)->doc.c_str());
    for (const auto& d : registry.describe(name))
      std::printf("%s\n", fmt::format("      {:<22} {:<24} = {:<18} {}", d.key, d.type, d.default_value, d.doc).c_str());
  }
}

}  // namespace

int cmd_list(const Registries& reg, const std::string& kind) {
  std::vector<std::string> kinds{"datasets", "transforms", "models", "optimizers", "schedulers", "metrics", "callbacks"};
  std::string k = kind;
  if (!k.empty() && k.back() != 's') k += 's';
  bool any = false;
  auto show = [&](const std::string& name, auto& r) {
    if (k.empty() || k == name) print_registry(r), any = true;
  };
  show("datasets", reg.datasets);
  show("transforms", reg.transforms);
  show("models", reg.models);
  show("optimizers", reg.optimizers);
  show("schedulers", reg.schedulers);
  show("metrics", reg.metrics);
  show("callbacks", reg.callbacks);
  if (!any) {
    std::string near = nearest(k, kinds);
    throw UserError("unknown kind \"" + kind + "\"" + (near.empty() ? "" : " (did you mean \"" + near + "\"?)") +
                    "; kinds: " + join(kinds));
  }
  return 0;
}

}  // namespace engine
