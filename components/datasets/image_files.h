#pragma once
// What every image-file dataset (image_folder, file_names) shares: finding image files, decoding
// them with OpenCV, and validating all of them when the dataset is built.
//
// - Image files are recognised by extension, case-insensitively: png, jpg, jpeg, bmp, and webp
//   when this OpenCV build reads it. Names starting with '.' (hidden files and folders, macOS
//   "._x.jpg" resource forks) are skipped, as fastai's get_files does.
// - mode: "gray" -> CV_8UC1; "rgb" -> CV_8UC3 in RGB order (OpenCV decodes BGR; timm and fastai
//   models are trained on RGB); "auto" -> as the files are (1 or 3 channels, RGB order), and every
//   file must agree. Alpha is dropped, 16-bit files come back as 8-bit, EXIF orientation is ignored
//   (as PIL.Image.open does, so pixels match fastai's and timm's loaders). Values are 0..255.
// - Every file is read and decoded once at construction, on a few threads: an empty, truncated or
//   corrupt file is a UserError naming it, or with on_bad_sample = "skip" it is left out and counted.
// - get(i) decodes again: decoded images are never all kept in memory. The encoded bytes are kept
//   when the whole set is small (<= 256 MB on disk), so an epoch reads no file at all.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "components/datasets/dataset.h"

namespace engine {

/// Options shared by the image-file datasets, read by each dataset's own reader.
struct ImageFilesOptions {
  std::string mode = "auto";            // gray | rgb | auto
  std::string on_bad_sample = "error";  // error | skip: what an unreadable image file does
  /// The fix an unreadable file's error suggests (not a recipe key: `engine predict` says its own).
  std::string unreadable_hint = "delete or replace it, or set on_bad_sample = \"skip\" to leave unreadable files out";
  std::vector<std::string> classes;     // fixes the class vocabulary and order; empty = sorted found names
  /// Encoded files totalling more bytes than this are re-read from disk in get() instead of held
  /// in memory. Not a recipe key: 256 MB holds MNIST-size sets, while Oxford Pets (~750 MB of
  /// JPEGs) is re-read from disk; tests set 0 to exercise the disk path.
  uint64_t hold_bytes_limit = 256ull << 20;

  /// Reads mode, on_bad_sample and classes (documented keys); checks classes for duplicates.
  static ImageFilesOptions read(Options& o);
};

/// True when `name` ends in an image extension this build decodes (png, jpg, jpeg, bmp, webp).
bool is_image_file_name(const std::string& name);
/// "png, jpg, jpeg, bmp, webp": for messages.
std::string image_extensions_text();

/// Every image file under `dir`, as paths relative to it ('/'-separated), sorted bytewise.
/// recursive = false lists `dir` itself only. Hidden names are skipped; symlinks are followed.
/// `non_images` (optional) counts the regular files skipped for their extension.
std::vector<std::string> list_image_files(const std::string& dir, bool recursive,
                                          size_t* non_images = nullptr);

/// Throws a UserError "`what` DIR: not found / not a directory" with a hint.
void require_directory(const std::string& dir, const std::string& what);

/// The decoded images of a list of files, validated at construction. Used by composition: a
/// dataset lists and labels its files, then hands them over.
class ImageFiles {
 public:
  struct File {
    std::string name;  // path relative to root, e.g. "cat/001.png"
    int64_t label = -1;
  };

  /// Reads and decodes every file (in parallel); `who` starts messages ("file_names data/pets").
  /// Throws UserError for an unreadable file (unless on_bad_sample = "skip") and, in auto mode,
  /// for files that disagree on channels.
  ImageFiles(std::string root, std::vector<File> files, const ImageFilesOptions& opts, std::string who);

  size_t size() const { return files_.size(); }
  /// Decoded image i (CV_8UC1 or CV_8UC3 RGB) and its label. Const and thread-safe.
  Sample get(size_t index) const;
  const std::string& name(size_t index) const { return files_.at(index).name; }
  int64_t label(size_t index) const { return files_.at(index).label; }
  /// 1 or 3 (0 only when there are no images).
  int64_t channels() const { return channels_; }
  size_t skipped() const { return skipped_; }
  /// Whether the encoded bytes are held in memory (small sets) or re-read from disk in get().
  bool holds_bytes() const { return !bytes_.empty(); }
  const std::string& root() const { return root_; }
  /// "9,998 images (2 unreadable skipped)"
  std::string count_text() const;

 private:
  /// The image in `bytes` as the mode asks, or an empty Mat with the reason in `why`.
  cv::Mat decode(const std::string& bytes, std::string* why) const;

  std::string root_;
  std::string who_;
  std::string mode_;
  std::vector<File> files_;
  std::vector<std::string> bytes_;  // encoded file contents, empty when not held
  int64_t channels_ = 0;
  size_t skipped_ = 0;
};

/// The Dataset side shared by every image-file dataset (file_names, image_folder, the images that
/// `engine predict` is given): a subclass lists and labels its files, then calls set_files().
class ImageFilesDataset : public Dataset {
 public:
  size_t size() const override { return images_->size(); }
  Sample get(size_t index) const override { return images_->get(index); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  int64_t channels() const override { return images_->channels(); }
  std::string sample_name(size_t index) const override { return images_->name(index); }

  /// The label of sample i without decoding its image (-1 when unlabeled).
  int64_t label(size_t index) const { return images_->label(index); }
  const ImageFiles& files() const { return *images_; }

 protected:
  /// Reads and decodes the files (ImageFiles' constructor) and keeps the class names.
  void set_files(std::vector<std::string> classes, std::string root, std::vector<ImageFiles::File> files,
                 const ImageFilesOptions& opts, std::string who);
  /// "<count text>, 10 classes, gray" (or "unlabeled" for the classes part when !labeled).
  std::string summary(bool labeled) const;

 private:
  std::vector<std::string> classes_;
  std::unique_ptr<ImageFiles> images_;
};

/// Maps found label names to indices: the sorted unique names (fastai's CategoryBlock vocab,
/// torchvision's sorted folders) or, when `fixed` is not empty, that list (a name outside it is a
/// UserError naming an example file). Returns the class names; fills each label.
std::vector<std::string> assign_labels(const std::vector<std::string>& fixed,
                                       const std::vector<std::string>& label_names,
                                       std::vector<ImageFiles::File>& files, const std::string& who);

/// 9998 -> "9,998": counts in describe() lines.
std::string with_thousands(size_t n);

}  // namespace engine
