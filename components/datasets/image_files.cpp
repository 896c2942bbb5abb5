#include "components/datasets/image_files.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "engine/core/cpu_threads.h"
#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

namespace fs = std::filesystem;

namespace {

// OpenCV builds may leave webp out; ask once instead of failing on the first .webp file.
const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> exts = [] {
    std::vector<std::string> e = {"png", "jpg", "jpeg", "bmp"};
    if (cv::haveImageWriter(".webp")) e.push_back("webp");  // reader and writer come together
    return e;
  }();
  return exts;
}

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// Reads a whole file; on failure returns false with the reason in `why`.
bool read_file(const std::string& path, std::string& out, std::string& why) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    why = std::string("cannot open (") + std::strerror(errno) + ")";
    return false;
  }
  out.clear();
  char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f.get())) > 0;) out.append(chunk, n);
  if (std::ferror(f.get())) {
    why = "read error";
    return false;
  }
  return true;
}

// libjpeg decodes a truncated JPEG without failing (it pads the missing rows with gray and only
// warns), so OpenCV hands back a half-gray image. PIL refuses such files ("image file is
// truncated"); we find them by walking the marker structure: every complete JPEG reaches an EOI
// marker after its last scan. Bytes after EOI (trailers some cameras append) do not matter, and an
// EXIF thumbnail's own EOI sits inside an APP1 segment that the walk skips by its length.
bool jpeg_reaches_end(const std::string& bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 2;  // after SOI
  while (i + 1 < n) {
    if (b[i] != 0xFF) {  // stray bytes between segments: libjpeg skips to the next marker too
      ++i;
      continue;
    }
    const unsigned char m = b[i + 1];
    if (m == 0xD9) return true;  // EOI
    if (m == 0xFF || m == 0x00) {
      ++i;
      continue;
    }  // fill byte / not a marker
    if ((m >= 0xD0 && m <= 0xD7) || m == 0x01 || m == 0xD8) {
      i += 2;
      continue;
    }  // no length field
    if (i + 3 >= n) return false;
    i += 2 + ((static_cast<size_t>(b[i + 2]) << 8) | b[i + 3]);
    if (m != 0xDA) continue;
    // After SOS comes entropy-coded data, where 0xFF is followed by 0x00 (a stuffed byte) or a
    // restart marker; any other marker ends the scan.
    for (;;) {
      const void* ff = i < n ? std::memchr(b + i, 0xFF, n - i) : nullptr;
      if (!ff) return false;
      size_t j = static_cast<size_t>(static_cast<const unsigned char*>(ff) - b);
      if (j + 1 >= n) return false;
      const unsigned char next = b[j + 1];
      if (next == 0x00 || next == 0xFF || (next >= 0xD0 && next <= 0xD7)) {
        i = j + 1;
        continue;
      }
      i = j;
      break;
    }
  }
  return false;
}

// A PNG cut short ends inside a chunk: the chunk lengths say so without inflating anything, which
// gives a clearer message than libpng's and spares decoding (libpng also prints its own error line
// to stderr for every broken file it sees). "" when the chunk structure is whole up to IEND, or
// when it ends exactly at a chunk boundary (then the decoder decides).
std::string png_truncation(const std::string& bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 8;  // after the signature
  while (i + 8 <= n) {
    const size_t len = (size_t{b[i]} << 24) | (size_t{b[i + 1]} << 16) | (size_t{b[i + 2]} << 8) | b[i + 3];
    const std::string type(bytes, i + 4, 4);
    if (i + 12 + len > n) return "truncated PNG (the file ends inside its " + type + " chunk)";
    if (type == "IEND") return "";
    i += 12 + len;
  }
  return i == n ? "" : "truncated PNG (the file ends inside a chunk header)";
}

bool looks_like_png(const std::string& bytes) { return bytes.compare(0, 8, "\x89PNG\r\n\x1a\n", 8) == 0; }

bool looks_like_jpeg(const std::string& bytes) {
  return bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
         static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF;
}

std::string channels_text(int c) {
  return c == 1 ? "gray (1 channel)" : "colour (" + std::to_string(c) + " channels)";
}

}  // namespace

std::string with_thousands(size_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

ImageFilesOptions ImageFilesOptions::read(Options& o) {
  ImageFilesOptions d;
  d.mode =
      o.choice("mode", d.mode, {"gray", "rgb", "auto"},
               "gray = 1 channel; rgb = 3 channels in RGB order; auto = as the files are (all must agree)");
  d.on_bad_sample =
      o.choice("on_bad_sample", d.on_bad_sample, {"error", "skip"},
               "an empty, truncated or corrupt image file: error (name it) or skip it (counted)");
  d.classes =
      o.texts("classes", d.classes,
              "class names in label order; [] = the sorted names found (set it so a prediction set maps "
              "to the training classes)");
  if (o.describing()) return d;
  std::set<std::string> seen;
  for (const auto& c : d.classes) {
    if (c.empty()) o.error("classes", "a class name is empty");
    if (!seen.insert(c).second) o.error("classes", "class \"" + c + "\" is listed twice");
  }
  return d;
}

bool is_image_file_name(const std::string& name) {
  auto dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return false;
  std::string ext = name.substr(dot + 1);
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const auto& exts = image_extensions();
  return std::find(exts.begin(), exts.end(), ext) != exts.end();
}

std::string image_extensions_text() { return join(image_extensions()); }

void require_directory(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (dir.empty()) throw UserError(what + ": path is empty (expected a directory of images)");
  if (!fs::exists(dir, ec)) {
    std::string hint = "paths are relative to the working directory";
    if (dir.rfind("data/digits_png", 0) == 0) hint += "; datasets/make_digit_pngs.sh writes data/digits_png";
    throw UserError(what + " " + dir + ": directory not found (" + hint + ")");
  }
  if (!fs::is_directory(dir, ec))
    throw UserError(what + " " + dir + ": not a directory (expected a directory of images)");
}

std::vector<std::string> list_image_files(const std::string& dir, bool recursive, size_t* non_images) try {
  std::vector<std::string> out;
  size_t others = 0;
  const fs::path root(dir);
  auto consider = [&](const fs::directory_entry& e) {
    std::error_code ec;
    if (!e.is_regular_file(ec)) return;
    std::string name = e.path().filename().string();
    if (hidden(name)) return;
    if (!is_image_file_name(name)) {
      ++others;
      return;
    }
    out.push_back(e.path().lexically_relative(root).generic_string());
  };
  if (recursive) {
    auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink);
    for (auto end = fs::recursive_directory_iterator(); it != end; ++it) {
      if (hidden(it->path().filename().string())) {
        std::error_code ec;
        if (it->is_directory(ec)) it.disable_recursion_pending();  // .git, .ipynb_checkpoints
        continue;
      }
      consider(*it);
    }
  } else {
    for (const auto& e : fs::directory_iterator(root)) consider(e);
  }
  // Bytewise order of the relative paths: the same on every file system and every run, and what
  // Python's sorted() gives for UTF-8 names.
  std::sort(out.begin(), out.end());
  if (non_images) *non_images = others;
  return out;
} catch (const fs::filesystem_error& e) {
  // Unreadable folders (permissions), a symlink loop: a data problem, reported as one.
  throw UserError(dir + ": cannot list the image files (" + e.code().message() + ": " + e.path1().string() +
                  ")");
}

std::vector<std::string> assign_labels(const std::vector<std::string>& fixed,
                                       const std::vector<std::string>& label_names,
                                       std::vector<ImageFiles::File>& files, const std::string& who) {
  std::vector<std::string> classes = fixed;
  if (classes.empty()) {
    std::set<std::string> found(label_names.begin(), label_names.end());
    classes.assign(found.begin(), found.end());  // sorted, as fastai's CategoryMap and torchvision
  }
  std::map<std::string, int64_t> index;
  for (size_t c = 0; c < classes.size(); ++c) index[classes[c]] = static_cast<int64_t>(c);
  for (size_t i = 0; i < files.size(); ++i) {
    auto it = index.find(label_names[i]);
    if (it == index.end())
      throw UserError(who + ": " + files[i].name + " has label \"" + label_names[i] +
                      "\", which is not in classes = [" + join(classes) +
                      "] (add it to classes, or leave classes unset to use the names found)");
    files[i].label = it->second;
  }
  return classes;
}

ImageFiles::ImageFiles(std::string root, std::vector<File> files, const ImageFilesOptions& opts,
                       std::string who)
    : root_(std::move(root)), who_(std::move(who)), mode_(opts.mode), files_(std::move(files)) {
  const size_t n = files_.size();
  if (n == 0) throw UserError(who_ + ": no image files (expected " + image_extensions_text() + ")");

  // Hold the encoded bytes only for small sets: sizes come from the directory, before reading.
  uint64_t total = 0;
  for (const auto& f : files_) {
    std::error_code ec;
    auto s = fs::file_size(fs::path(root_) / f.name, ec);
    if (!ec) total += s;
  }
  const bool hold = total <= opts.hold_bytes_limit;

  // Read and decode every file once, on a few threads (decoding dominates: ~20 us per small PNG).
  std::vector<std::string> bytes(n);
  std::vector<std::string> why(n);  // non-empty = unreadable
  std::vector<int> chans(n, 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::string buf;
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      const std::string path = (fs::path(root_) / files_[i].name).string();
      if (!read_file(path, buf, why[i])) continue;
      cv::Mat m = decode(buf, &why[i]);
      if (m.empty()) continue;
      chans[i] = m.channels();
      if (hold) bytes[i].swap(buf);
    }
  };
  unsigned threads = static_cast<unsigned>(std::min(8, usable_cores()));
  threads = static_cast<unsigned>(std::min<size_t>(threads, (n + 63) / 64));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  // Messages follow the sorted file order, so the same data always reports the same file.
  std::vector<size_t> bad;
  for (size_t i = 0; i < n; ++i)
    if (!why[i].empty()) bad.push_back(i);
  if (!bad.empty() && opts.on_bad_sample != "skip") {
    const auto& f = files_[bad[0]].name;
    std::string more =
        bad.size() > 1 ? " (and " + with_thousands(bad.size() - 1) + " more unreadable files)" : "";
    throw UserError(who_ + ": " + (fs::path(root_) / f).string() + ": " + why[bad[0]] + more + "; " +
                    opts.unreadable_hint);
  }
  skipped_ = bad.size();

  size_t first_gray = n, first_colour = n;
  for (size_t i = 0; i < n; ++i) {
    if (!why[i].empty()) continue;
    if (chans[i] == 1 && first_gray == n) first_gray = i;
    if (chans[i] != 1 && first_colour == n) first_colour = i;
  }
  if (first_gray == n && first_colour == n)
    throw UserError(who_ + ": all " + with_thousands(n) +
                    " image files are unreadable (first: " + files_[bad[0]].name + ": " + why[bad[0]] + ")");
  if (mode_ == "auto" && first_gray < n && first_colour < n)
    throw UserError(who_ + ": mode = \"auto\" needs every image to have the same channels, but " +
                    files_[first_gray].name + " is " + channels_text(chans[first_gray]) + " and " +
                    files_[first_colour].name + " is " + channels_text(chans[first_colour]) +
                    "; set mode = \"gray\" or mode = \"rgb\" to convert them all");
  channels_ = mode_ == "gray" ? 1 : mode_ == "rgb" ? 3 : (first_gray < n ? 1 : 3);

  std::vector<File> kept;
  kept.reserve(n - skipped_);
  for (size_t i = 0; i < n; ++i) {
    if (!why[i].empty()) continue;
    kept.push_back(std::move(files_[i]));
    if (hold) bytes_.push_back(std::move(bytes[i]));
  }
  files_ = std::move(kept);
}

cv::Mat ImageFiles::decode(const std::string& bytes, std::string* why) const {
  if (bytes.empty()) {
    *why = "empty file (0 bytes)";
    return {};
  }
  if (looks_like_png(bytes)) {
    *why = png_truncation(bytes);
    if (!why->empty()) return {};
  } else if (looks_like_jpeg(bytes) && !jpeg_reaches_end(bytes)) {
    *why = "truncated JPEG (the image data ends before the end-of-image marker)";
    return {};
  }
  // IGNORE_ORIENTATION: PIL (fastai, timm) does not rotate by EXIF either, so pixels agree.
  // Without ANYDEPTH, 16-bit files come back 8-bit; ANYCOLOR keeps gray files gray in auto mode.
  int flags = cv::IMREAD_IGNORE_ORIENTATION;
  int want = mode_ == "gray" ? 1 : mode_ == "rgb" ? 3 : channels_;  // channels_ is 0 while validating
  flags |= want == 1 ? cv::IMREAD_GRAYSCALE : want == 3 ? cv::IMREAD_COLOR : cv::IMREAD_ANYCOLOR;
  cv::Mat m;
  try {
    cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
    m = cv::imdecode(raw, flags);
  } catch (const cv::Exception& e) {
    *why = "cannot decode the image (" + std::string(e.err.empty() ? e.what() : e.err) + ")";
    return {};
  }
  if (m.empty()) {
    *why = "cannot decode the image (corrupt, truncated, or not the format its extension says)";
    return {};
  }
  if (m.depth() != CV_8U) m.convertTo(m, CV_8U);  // defensive: flags above already ask for 8-bit
  if (m.channels() == 4) cv::cvtColor(m, m, cv::COLOR_BGRA2BGR);
  if (m.channels() == 3) cv::cvtColor(m, m, cv::COLOR_BGR2RGB);
  return m;
}

Sample ImageFiles::get(size_t index) const {
  if (index >= files_.size())
    throw std::out_of_range(who_ + ": index " + std::to_string(index) + " >= size " +
                            std::to_string(files_.size()));
  const File& f = files_[index];
  std::string why;
  cv::Mat m;
  if (!bytes_.empty()) {
    m = decode(bytes_[index], &why);
  } else {
    std::string buf;
    if (read_file((fs::path(root_) / f.name).string(), buf, why)) m = decode(buf, &why);
  }
  // Only a file changed or removed after validation gets here.
  if (m.empty())
    throw UserError(who_ + ": " + (fs::path(root_) / f.name).string() + ": " + why +
                    " (it was readable when the dataset was built; was it changed since?)");
  return Sample{m, f.label};
}

std::string ImageFiles::count_text() const {
  std::string s = with_thousands(files_.size()) + " images";
  if (skipped_ > 0) s += " (" + with_thousands(skipped_) + " unreadable skipped)";
  return s;
}

void ImageFilesDataset::set_files(std::vector<std::string> classes, std::string root, std::vector<ImageFiles::File> files,
                                  const ImageFilesOptions& opts, std::string who) {
  classes_ = std::move(classes);
  images_ = std::make_unique<ImageFiles>(std::move(root), std::move(files), opts, std::move(who));
}

std::string ImageFilesDataset::summary(bool labeled) const {
  return images_->count_text() + ", " + (labeled ? std::to_string(classes_.size()) + " classes" : std::string("unlabeled")) +
         ", " + (images_->channels() == 1 ? "gray" : "rgb");
}

}  // namespace engine
