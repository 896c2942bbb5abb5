#include "components/datasets/image_folder.h"

#include <algorithm>
#include <filesystem>

#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

namespace fs = std::filesystem;

ImageFolderOptions ImageFolderOptions::read(Options& o) {
  ImageFolderOptions d;
  d.path =
      o.text("path", "", "directory with one sub-folder of images per class (class names = folder names)");
  d.images = ImageFilesOptions::read(o);
  if (o.describing()) return d;
  std::error_code ec;
  if (d.path.empty())
    o.error("path", "a directory is required", "set " + o.key_path("path") + " = \"path/to/folder\"");
  else if (!fs::is_directory(d.path, ec))
    o.error("path", "directory not found: " + d.path, "paths are relative to the working directory");
  return d;
}

ImageFolder::ImageFolder(ImageFolderOptions opts) : opts_(std::move(opts)) {
  const std::string who = "image_folder " + opts_.path;
  require_directory(opts_.path, "image_folder");

  std::vector<std::string> folders;
  size_t loose_images = 0;
  for (const auto& e : fs::directory_iterator(opts_.path)) {
    std::error_code ec;
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (e.is_directory(ec))
      folders.push_back(name);
    else if (is_image_file_name(name))
      ++loose_images;
  }
  std::sort(folders.begin(), folders.end());
  if (folders.empty())
    throw UserError(who + ": no class sub-folders (expected DIR/<class>/<image>, e.g. " + opts_.path +
                    "/cat/001.jpg)" +
                    (loose_images ? "; it holds " + with_thousands(loose_images) +
                                        " images directly: for a flat folder whose file names carry the "
                                        "labels, use name = \"file_names\""
                                  : ""));
  const auto& fixed = opts_.images.classes;
  std::vector<ImageFiles::File> files;
  std::vector<std::string> labels;
  for (const auto& c : folders) {
    if (!fixed.empty() && std::find(fixed.begin(), fixed.end(), c) == fixed.end())
      throw UserError(who + ": class folder \"" + c + "\" is not in classes = [" + join(fixed) +
                      "] (add it to classes, or move the folder out of " + opts_.path + ")");
    size_t others = 0;
    auto found = list_image_files((fs::path(opts_.path) / c).string(), true, &others);
    if (found.empty())
      throw UserError(who + ": class folder " + (fs::path(opts_.path) / c).string() +
                      " has no image files (expected " + image_extensions_text() +
                      (others ? "; it has " + with_thousands(others) + " other files" : "") +
                      "); add images or remove the folder");
    for (auto& f : found) {
      files.push_back({c + "/" + f, -1});
      labels.push_back(c);
    }
  }
  std::vector<std::string> classes = assign_labels(fixed, labels, files, who);
  set_files(std::move(classes), opts_.path, std::move(files), opts_.images, who);
}

std::string ImageFolder::describe() const {
  return "image_folder " + opts_.path + ": " + summary(true);
}

void register_image_folder(DatasetRegistry& registry) {
  registry.add("image_folder",
               "one sub-folder of images per class (torchvision ImageFolder); png/jpg/bmp/webp, CV_8UC1 or "
               "CV_8UC3 RGB, 0..255",
               [](Options& o) -> DatasetRegistry::Factory {
                 auto opts = ImageFolderOptions::read(o);
                 return [opts] { return std::make_unique<ImageFolder>(opts); };
               });
}

}  // namespace engine
