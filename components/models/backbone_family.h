#pragma once
// What every timm-style model family (ResNet, ConvNeXt) does the same way around its class: build
// a variant and load `pretrained`, find a variant by name, register every variant under its name
// with the [model] options of components/models/backbone_options.h. A family supplies its variant
// list (a vector of Arch, each with a `name`), its class (constructible from (Arch, BackboneOptions))
// and its registry doc line.
#include <memory>
#include <string>
#include <vector>

#include "components/models/backbone_options.h"
#include "components/models/model.h"
#include "components/models/pretrained.h"
#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

/// Builds Net(arch, options) and, when options.pretrained is set, loads it with load_pretrained
/// (in_chans / num_classes adapted as timm, the rest strict).
template <class Net, class Arch>
std::unique_ptr<Net> build_backbone(const Arch& arch, const BackboneOptions& options) {
  auto model = std::make_unique<Net>(arch, options);
  if (!options.pretrained.empty()) load_pretrained(*model, options.pretrained);
  return model;
}

/// The variant called `name`; an unknown name is a UserError naming the `family` ("ResNet") and
/// listing the known variants.
template <class Arch>
const Arch& find_arch(const std::vector<Arch>& archs, const std::string& name, const std::string& family) {
  std::vector<std::string> names;
  for (const auto& a : archs) {
    if (a.name == name) return a;
    names.push_back(a.name);
  }
  throw UserError("unknown " + family + " \"" + name + "\" (known: " + join(names) + ")");
}

/// Registers every variant under its name, documented by doc(arch) and with the family's registry
/// `traits` (registry.h): the factory reads the [model] options with read_backbone_options
/// (`classifier` names the classifier in the key docs), then builds with build_backbone<Net>.
template <class Net, class Arch, class Doc>
void register_backbones(ModelRegistry& registry, const std::vector<Arch>& archs, const std::string& classifier,
                        const Doc& doc, const std::vector<std::string>& traits = {}) {
  for (const auto& arch : archs) {
    registry.add(arch.name, doc(arch), [arch, classifier](Options& o) -> ModelRegistry::Factory {
      BackboneOptions opts = read_backbone_options(o, classifier);
      return [arch, opts]() -> std::unique_ptr<Model> { return build_backbone<Net>(arch, opts); };
    }, traits);
  }
}

}  // namespace engine
