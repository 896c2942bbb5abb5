#pragma once
// file_names: a folder of images whose file names carry their labels (fastai's from_name_re and
// from_name_func; the Oxford Pets layout).
//   { name = "file_names", path = "data/digits_png", files = "*.png", label = { regex = "^(\\d)_" } }
//   { name = "file_names", path = "data/pets/images", label = { rule = "first_upper" } }
//   { name = "file_names", path = "data/unlabeled", labeled = false, classes = ["cat", "dog"] }
// - Files: every image file under `path` (and its sub-folders unless recursive = false) whose file
//   name matches the glob `files` (*, ?, [...]; case-sensitive, on the name without folders).
// - label.regex: an ECMAScript regex with exactly one capture group, searched in the file name
//   (not the folders): the group is the class name. Every selected file must match, else an error
//   lists the first names that do not.
// - label.rule = "first_upper": "True" when the file name starts with an uppercase ASCII letter,
//   else "False" (the Pets cat/dog rule of the fastai seed: cat breeds are capitalised).
// - Class names are the sorted labels found (fastai's CategoryBlock vocab) unless `classes` fixes
//   them; labeled = false gives labels -1 (images to predict), and `classes` then only names them.
// - Sample order: sorted relative paths; sample_name(i) is that path. Decoding: image_files.h.
#include <memory>
#include <string>
#include <vector>

#include "components/datasets/image_files.h"

namespace engine {

struct FileNamesOptions {
  std::string path;          // directory of images
  std::string files = "*";   // glob on the file name
  bool recursive = true;     // also look in sub-folders (fastai's get_image_files does)
  bool labeled = true;       // false: unlabeled images for prediction, labels -1
  std::string label_regex;   // label.regex: one capture group = the class name
  std::string label_rule;    // label.rule: "first_upper"
  ImageFilesOptions images;  // mode, on_bad_sample, classes

  /// Reads and validates the options: a directory, exactly one label source when labeled (a regex
  /// that compiles and has one capture group), none when not.
  static FileNamesOptions read(Options& o);
};

class FileNames : public ImageFilesDataset {
 public:
  /// Lists, selects, labels, reads and decodes every image; throws UserError naming the problem.
  explicit FileNames(FileNamesOptions opts);

  bool labeled() const override { return opts_.labeled; }
  std::string describe() const override;

 private:
  FileNamesOptions opts_;
};

void register_file_names(DatasetRegistry& registry);

}  // namespace engine
