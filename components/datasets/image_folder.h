#pragma once
// image_folder: one sub-folder per class, images inside (torchvision's ImageFolder, fastai's
// parent_label). { name = "image_folder", path = "data/pets_by_class" }
//   DIR/cat/001.jpg, DIR/cat/more/002.png, DIR/dog/003.jpg  ->  classes ["cat", "dog"]
// - Class names are the sorted sub-folder names (or `classes`, which fixes their order); images
//   are found in each class folder and its sub-folders; files directly in DIR are not samples.
// - A class folder without image files is an error naming it (a class with no examples would be
//   silently unlearnable).
// - Sample order: by class folder (sorted), then by path inside it (sorted). sample_name(i) is the
//   path relative to DIR ("cat/001.jpg"). Decoding, modes and validation: image_files.h.
#include <memory>
#include <string>
#include <vector>

#include "components/datasets/image_files.h"

namespace engine {

struct ImageFolderOptions {
  std::string path;          // the directory holding one sub-folder per class
  ImageFilesOptions images;  // mode, on_bad_sample, classes

  /// Reads and validates the options (path must be a directory); errors carry recipe positions.
  static ImageFolderOptions read(Options& o);
};

class ImageFolder : public ImageFilesDataset {
 public:
  /// Lists, labels, reads and decodes every image; throws UserError naming the folder or file.
  explicit ImageFolder(ImageFolderOptions opts);

  bool labeled() const override { return true; }
  std::string describe() const override;

 private:
  ImageFolderOptions opts_;
};

void register_image_folder(DatasetRegistry& registry);

}  // namespace engine
