// Reading transforms from a recipe: every option validated, errors collected with positions.
#include <doctest/doctest.h>

#include <fstream>

#include "components/transforms/all.h"
#include "components/transforms/resize.h"
#include "components/transforms/shift_scale_rotate.h"
#include "engine/recipe/options.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {
std::string write_recipe(const std::string& tag, const std::string& text) {
  std::string p = test::temp_dir(tag) + "/r.toml";
  std::ofstream(p) << text;
  return p;
}

// Parses every [[t]] table with the transform registry; returns the factories (empty on error).
std::vector<TransformRegistry::Factory> parse_all(RecipeDocument& doc) {
  TransformRegistry reg("transform");
  register_transforms(reg);
  std::vector<TransformRegistry::Factory> out;
  for (Options& t : doc.root().tables("t", "")) out.push_back(reg.parse(t));
  doc.finish();
  return out;
}

bool has_line(const std::vector<std::string>& lines, const std::string& a, const std::string& b) {
  for (const auto& l : lines)
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("every transform is registered under its recipe name") {
  TransformRegistry reg("transform");
  register_transforms(reg);
  CHECK(reg.names() == std::vector<std::string>{"horizontal_flip", "normalize", "random_brightness_contrast",
                                                "resize", "shift_scale_rotate", "vertical_flip"});
  std::vector<std::string> keys;
  for (const auto& d : reg.describe("resize")) keys.push_back(d.key);
  CHECK(keys == std::vector<std::string>{"size", "interpolation", "p"});
}

TEST_CASE("a valid recipe builds every transform with its options") {
  auto file = write_recipe("tf_ok",
                           "[[t]]\nname = \"horizontal_flip\"\np = 0.25\n"
                           "[[t]]\nname = \"resize\"\nsize = [56, 48]\ninterpolation = \"lanczos4\"\n"
                           "[[t]]\nname = \"normalize\"\nmean = [0.1310]\nstd = [0.30854]\n"
                           "[[t]]\nname = \"random_brightness_contrast\"\nmax_value = 255\n"
                           "[[t]]\nname = \"shift_scale_rotate\"\nrotate_limit = 10\nshift_limit = 0.1\n"
                           "[[t]]\nname = \"vertical_flip\"\n");
  RecipeDocument doc(file, {});
  auto factories = parse_all(doc);
  REQUIRE(doc.diagnostics().ok());
  REQUIRE(factories.size() == 6);
  for (auto& f : factories) REQUIRE(f);
  auto resize = factories[1]();
  const auto& r = dynamic_cast<Resize&>(*resize).options();
  CHECK(r.height == 56);
  CHECK(r.width == 48);
  CHECK(r.interpolation == "lanczos4");
  auto ssr = factories[4]();
  CHECK(dynamic_cast<ShiftScaleRotate&>(*ssr).options().rotate_limit == 10);
  CHECK(dynamic_cast<ShiftScaleRotate&>(*ssr).options().scale_limit == 0.1);  // default

  // The built chain runs: 28x28 uint8 in, 56x48 float out.
  cv::Mat img(28, 28, CV_8UC1, cv::Scalar(100));
  Rng rng(1);
  for (auto& f : factories) f()->apply(img, rng);
  CHECK(img.size() == cv::Size(48, 56));
  CHECK(img.type() == CV_32FC1);
}

TEST_CASE("bad transform options are all reported, each with file:line:col and the key path") {
  auto file =
      write_recipe("tf_bad",
                   "[[t]]\nname = \"horizontal_flip\"\np = 1.5\n"                                   // 1-3
                   "[[t]]\nname = \"resize\"\ninterpolation = \"lanczos\"\n"                        // 4-6
                   "[[t]]\nname = \"resize\"\nsize = [0, 5]\n"                                      // 7-9
                   "[[t]]\nname = \"normalize\"\nstd = [0.0]\n"                                     // 10-12
                   "[[t]]\nname = \"normalize\"\nmean = [1, 2]\nstd = [1, 2, 3]\n"                  // 13-16
                   "[[t]]\nname = \"random_brightness_contrast\"\nbrightness_limit = -0.1\n"        // 17-19
                   "[[t]]\nname = \"shift_scale_rotate\"\nrotate_limit = 200\nscale_limit = 1.0\n"  // 20-23
                   "[[t]]\nname = \"vertical_flip\"\nprob = 0.5\n");                                // 24-26
  RecipeDocument doc(file, {});
  parse_all(doc);
  const auto& lines = doc.diagnostics().lines();
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  INFO(all);  // shown only when a check fails
  CHECK(has_line(lines, file + ":3:", "t[0].p: value 1.5 is out of range [0, 1]"));
  CHECK(has_line(lines, file + ":6:", "did you mean \"lanczos4\""));
  CHECK(has_line(lines, "t[1].size", "required"));
  CHECK(has_line(lines, file + ":9:", "t[2].size: values must be in 1..65536"));
  CHECK(has_line(lines, file + ":12:", "t[3].std: every value must be > 0"));
  CHECK(has_line(lines, file + ":16:", "t[4].std: 3 values but mean has 2"));
  CHECK(has_line(lines, file + ":19:", "t[5].brightness_limit: value -0.1 is out of range"));
  CHECK(has_line(lines, file + ":22:", "t[6].rotate_limit"));
  CHECK(has_line(lines, file + ":23:", "t[6].scale_limit"));
  CHECK(has_line(lines, file + ":26:", "t[7].prob: unknown key (valid keys: name, p)"));
  CHECK(lines.size() == 10);
}
