#include "components/datasets/digit_csv.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "engine/core/errors.h"

namespace engine {

namespace {

// One read into one buffer: iostreams line by line would be the slow part of loading 15 MB.
std::string read_whole_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::string text;
  if (std::fseek(f.get(), 0, SEEK_END) == 0) {
    long size = std::ftell(f.get());
    std::rewind(f.get());
    if (size > 0) text.resize(static_cast<size_t>(size));
    text.resize(std::fread(text.data(), 1, text.size(), f.get()));
  }
  char chunk[1 << 16];  // whatever is left (a file still growing, or one that cannot seek)
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f.get())) > 0;) text.append(chunk, n);
  if (std::ferror(f.get())) throw UserError(path + ": read error");
  return text;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// Walks the buffer line by line, tracking the 1-based line number for messages.
struct LineCursor {
  const char* p;
  const char* end;
  size_t number = 0;

  bool next(const char*& b, const char*& e) {
    if (p >= end) return false;
    b = p;
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    e = nl ? nl : end;
    p = nl ? nl + 1 : end;
    if (e > b && e[-1] == '\r') --e;  // CRLF files (saved on Windows, or by Excel)
    ++number;
    return true;
  }
  bool only_blank_left() const {
    return std::all_of(p, end, [](char c) { return c == '\n' || c == '\r' || is_blank(c); });
  }
};

size_t count_fields(const char* b, const char* e) { return 1 + static_cast<size_t>(std::count(b, e, ',')); }

std::string field_text(const char* b, const char* e) {
  const char* f = std::find(b, e, ',');
  std::string s(b, f);
  return s.size() > 20 ? s.substr(0, 20) + "..." : s;
}

}  // namespace

DigitCsvOptions DigitCsvOptions::read(Options& o) {
  DigitCsvOptions d;
  d.path = o.existing_file("path", "", "CSV file in the digit-recognizer layout (label,pixel0,...,pixelN)");
  d.labeled =
      o.flag("labeled", d.labeled, "first column is the label (false for unlabeled files like test.csv)");
  d.image_shape = o.integers("image_shape", d.image_shape,
                             "[height, width] of each image; [] = a square inferred from the pixel count");
  d.num_classes = o.integer("num_classes", d.num_classes, "labels are 0..num_classes-1", 1, 1 << 20);
  if (o.describing()) return d;
  if (!d.image_shape.empty() &&
      (d.image_shape.size() != 2 || d.image_shape[0] <= 0 || d.image_shape[1] <= 0 ||
       d.image_shape[0] > 1 << 16 || d.image_shape[1] > 1 << 16))
    o.error("image_shape", "expected [] or two values [height, width] in 1..65536",
            "e.g. image_shape = [28, 28]");
  return d;
}

DigitCsv::DigitCsv(DigitCsvOptions opts) : opts_(std::move(opts)) {
  if (!opts_.image_shape.empty() &&
      (opts_.image_shape.size() != 2 || opts_.image_shape[0] <= 0 || opts_.image_shape[1] <= 0))
    throw UserError("digit_csv " + opts_.path + ": image_shape must be [] or [height, width] > 0");
  parse(read_whole_file(opts_.path));
}

void DigitCsv::parse(const std::string& text) {
  const std::string& path = opts_.path;
  auto fail = [&](size_t line, const std::string& what, const std::string& expected) {
    throw UserError(path + ":" + std::to_string(line) + ": " + what + " (expected " + expected + ")");
  };
  LineCursor lines{text.data(), text.data() + text.size()};
  if (text.size() >= 3 && std::memcmp(text.data(), "\xEF\xBB\xBF", 3) == 0) lines.p += 3;  // UTF-8 BOM

  const char *b = nullptr, *e = nullptr;
  if (!lines.next(b, e) || b == e) fail(1, "empty file", "a header line or rows of integers");
  const size_t columns = count_fields(b, e);
  const size_t first = opts_.labeled ? 1 : 0;  // index of the first pixel column
  // A header is a first line whose first field is not a number ("label", "pixel0", ...).
  const char* f = b;
  while (f < e && is_blank(*f)) ++f;
  const bool header = f < e && !(std::isdigit(static_cast<unsigned char>(*f)) || *f == '-' || *f == '+');
  if (header) {
    std::string name = field_text(f, e);
    if (name == "label" && !opts_.labeled)
      fail(1, "header starts with \"label\" but labeled = false", "pixel columns only; set labeled = true");
    if (name.rfind("pixel", 0) == 0 && opts_.labeled)
      fail(1, "header starts with \"" + name + "\" but labeled = true",
           "a label column first; set labeled = false for unlabeled files such as test.csv");
  }
  if (columns <= first) fail(1, "only " + std::to_string(columns) + " column", "a label and pixel columns");
  const size_t n_pixels = columns - first;

  if (!opts_.image_shape.empty()) {
    height_ = static_cast<int>(opts_.image_shape[0]);
    width_ = static_cast<int>(opts_.image_shape[1]);
    if (static_cast<size_t>(height_) * width_ != n_pixels)
      fail(1,
           std::to_string(n_pixels) + " pixel columns, but image_shape = [" + std::to_string(height_) + ", " +
               std::to_string(width_) + "]",
           std::to_string(static_cast<size_t>(height_) * width_) + " pixel columns = height * width");
  } else {
    auto side = static_cast<size_t>(std::llround(std::sqrt(static_cast<double>(n_pixels))));
    if (side * side != n_pixels)
      fail(1, std::to_string(n_pixels) + " pixel columns is not a square image",
           "a square count such as 784 = 28x28, or set image_shape = [height, width]");
    height_ = width_ = static_cast<int>(side);
  }

  // Reserve once: counting newlines is a fast pass next to parsing. Capped by what the file can
  // hold (every pixel takes at least a byte of it): counted blank lines times the pixel count once
  // reserved 2 TB for a 4 MB file, a std::bad_alloc naming no file (fuzz/corpus/digit_csv/regress_*).
  const size_t rows_hint = std::min(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1,
                                    text.size() / n_pixels + 1);
  pixels_.reserve(rows_hint * n_pixels);
  labels_.reserve(rows_hint);
  const std::string label_range = "0.." + std::to_string(opts_.num_classes - 1);
  const std::string shape_text =
      opts_.labeled ? std::to_string(columns) + " values: a label and " + std::to_string(n_pixels) + " pixels"
                    : std::to_string(columns) + " pixel values";

  auto store = [&](size_t col, int64_t v) {
    if (col < first) {
      if (v < 0 || v >= opts_.num_classes)
        fail(lines.number, "label " + std::to_string(v) + " is out of range",
             label_range + " for num_classes = " + std::to_string(opts_.num_classes));
      labels_.push_back(static_cast<int32_t>(v));
    } else {
      if (v < 0 || v > 255)
        fail(lines.number,
             "column " + std::to_string(col + 1) + ": pixel value " + std::to_string(v) + " is out of range",
             "0..255");
      pixels_.push_back(static_cast<uint8_t>(v));
    }
  };

  bool have_line = !header;  // the first line is data when there is no header
  while (have_line || lines.next(b, e)) {
    have_line = false;
    if (b == e) {
      if (lines.only_blank_left()) break;  // trailing newlines
      fail(lines.number, "empty row", shape_text);
    }
    const char* q = b;
    for (size_t col = 0; col < columns; ++col) {
      const bool last = col + 1 == columns;
      const char* start = q;
      // Fast path, every field of a well-formed file: 1-3 digits, then ',' (or the line end).
      int64_t v = 0;
      int digits = 0;
      while (digits < 3 && q < e && static_cast<unsigned>(*q - '0') < 10) {
        v = v * 10 + (*q++ - '0');
        ++digits;
      }
      if (digits > 0 && (last ? q == e : q < e && *q == ',')) {
        if (!last) ++q;
        store(col, v);
        continue;
      }
      // General path: blanks, signs, long numbers, and every kind of error.
      q = start;
      while (q < e && is_blank(*q)) ++q;
      start = q;
      auto [ptr, ec] = std::from_chars(q, e, v);
      q = ptr;
      while (q < e && is_blank(*q)) ++q;
      // A well-formed field is a number followed by ',' (or the line end for the last column).
      if (ec != std::errc() || (q < e && *q != ',') || (last && q < e) || (!last && q == e)) {
        if (!last && q == e && ec == std::errc())
          fail(lines.number, "row has " + std::to_string(count_fields(b, e)) + " values", shape_text);
        if (last && q < e && *q == ',')
          fail(lines.number, "row has " + std::to_string(count_fields(b, e)) + " values", shape_text);
        std::string what =
            "column " + std::to_string(col + 1) + ": \"" + field_text(start, e) + "\" is not an integer";
        if (col < first) fail(lines.number, what, "a label " + label_range);
        fail(lines.number, what, "a pixel value 0..255; scale 0..1 floats to bytes first");
      }
      if (!last) ++q;  // the comma
      store(col, v);
    }
    if (!opts_.labeled) labels_.push_back(-1);
  }
  if (labels_.empty()) fail(lines.number, "no data rows", "at least one row of " + shape_text);
  pixels_.shrink_to_fit();
  labels_.shrink_to_fit();
}

Sample DigitCsv::get(size_t index) const {
  if (index >= labels_.size())
    throw std::out_of_range("digit_csv: index " + std::to_string(index) + " >= size " +
                            std::to_string(labels_.size()));
  const size_t n = static_cast<size_t>(height_) * width_;
  // The const_cast only lets cv::Mat wrap the stored bytes; clone() copies them at once, so the
  // caller (and every transform) works on its own pixels.
  cv::Mat view(height_, width_, CV_8UC1, const_cast<uint8_t*>(pixels_.data() + index * n));
  return Sample{view.clone(), labels_[index]};
}

std::string DigitCsv::describe() const {
  return "digit_csv " + opts_.path + ": " + std::to_string(size()) + " samples, " + std::to_string(height_) +
         "x" + std::to_string(width_) + ", " +
         (opts_.labeled ? "labeled (" + std::to_string(opts_.num_classes) + " classes)" : "unlabeled");
}

void register_digit_csv(DatasetRegistry& registry) {
  registry.add("digit_csv",
               "images as CSV rows (label,pixel0,...), Kaggle digit-recognizer layout; CV_8UC1 0..255",
               [](Options& o) -> DatasetRegistry::Factory {
                 auto opts = DigitCsvOptions::read(o);
                 return [opts] { return std::make_unique<DigitCsv>(opts); };
               });
}

}  // namespace engine
