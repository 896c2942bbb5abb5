#include "components/datasets/file_names.h"

#include <fnmatch.h>

#include <cctype>
#include <filesystem>
#include <regex>

#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLabelHint =
    "e.g. label = { regex = \"^(\\\\d)_\" } or label = { rule = \"first_upper\" }";

// "" when `pattern` compiles with exactly one capture group, else what is wrong.
std::string regex_problem(const std::string& pattern) {
  try {
    std::regex re(pattern, std::regex::ECMAScript);
    if (re.mark_count() == 0)
      return "regex \"" + pattern + "\" has no capture group; put the label part in ( ), e.g. \"^(\\\\d)_\"";
    if (re.mark_count() > 1)
      return "regex \"" + pattern + "\" has " + std::to_string(re.mark_count()) +
             " capture groups, expected one (the label); write other groups as (?:...)";
  } catch (const std::regex_error& e) {
    return "regex \"" + pattern + "\" does not compile (" + e.what() + ")";
  }
  return "";
}

std::string base_name(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

// The first few names of a list, for messages: "a.png, b.png, c.png, ... (12 in all)".
std::string some_names(const std::vector<std::string>& names, size_t shown = 5) {
  std::vector<std::string> head(names.begin(),
                                names.begin() + static_cast<std::ptrdiff_t>(std::min(shown, names.size())));
  std::string s = join(head);
  if (names.size() > shown) s += ", ... (" + with_thousands(names.size()) + " in all)";
  return s;
}

}  // namespace

FileNamesOptions FileNamesOptions::read(Options& o) {
  FileNamesOptions d;
  d.path = o.text("path", "", "directory of images whose file names carry the labels");
  d.files =
      o.text("files", d.files, "glob on the file name selecting the images, e.g. \"*.png\" (case-sensitive)");
  d.recursive = o.flag("recursive", d.recursive, "also take images from sub-folders of path");
  d.labeled =
      o.flag("labeled", d.labeled, "false: unlabeled images for prediction (labels -1, no label rule)");
  Options label = o.table("label", "how a file name gives its class: regex or rule (one of them)");
  d.label_regex = label.text("regex", "",
                             "ECMAScript regex searched in the file name; its one capture group is the class "
                             "name, e.g. \"^(\\\\d)_\"");
  d.label_rule =
      label.choice("rule", "", {"first_upper"},
                   "first_upper: \"True\" when the file name starts with an uppercase letter, else "
                   "\"False\" (fastai's Pets cat/dog rule)");
  d.images = ImageFilesOptions::read(o);
  if (o.describing()) return d;

  std::error_code ec;
  if (d.path.empty())
    o.error("path", "a directory is required", "set " + o.key_path("path") + " = \"path/to/images\"");
  else if (!fs::is_directory(d.path, ec))
    o.error("path", "directory not found: " + d.path,
            d.path.rfind("data/digits_png", 0) == 0 ? "run datasets/make_digit_pngs.sh to write it"
                                                    : "paths are relative to the working directory");
  if (d.files.empty()) o.error("files", "the glob is empty", "use \"*\" for every image file");
  if (!d.labeled) {
    if (o.has("label"))
      o.error("label", "a label rule is set but labeled = false",
              "remove label for unlabeled images, or set labeled = true");
  } else if (d.label_regex.empty() == d.label_rule.empty()) {
    o.error("label",
            d.label_regex.empty() ? "labeled = true needs a label rule" : "set regex or rule, not both",
            kLabelHint);
  } else if (!d.label_regex.empty()) {
    std::string why = regex_problem(d.label_regex);
    if (!why.empty()) label.error("regex", why);
  }
  return d;
}

FileNames::FileNames(FileNamesOptions opts) : opts_(std::move(opts)) {
  const std::string who = "file_names " + opts_.path;
  std::vector<std::string> classes;
  require_directory(opts_.path, "file_names");
  if (opts_.labeled && opts_.label_regex.empty() == opts_.label_rule.empty())
    throw UserError(who + ": labeled = true needs exactly one of label.regex and label.rule (" + kLabelHint +
                    ")");
  if (!opts_.label_rule.empty() && opts_.label_rule != "first_upper")
    throw UserError(who + ": unknown label.rule \"" + opts_.label_rule + "\" (known: first_upper)");
  if (opts_.labeled && !opts_.label_regex.empty()) {
    std::string why = regex_problem(opts_.label_regex);
    if (!why.empty()) throw UserError(who + ": " + why);
  }

  size_t others = 0;
  auto found = list_image_files(opts_.path, opts_.recursive, &others);
  if (found.empty())
    throw UserError(who + ": no image files (expected " + image_extensions_text() + ")" +
                    (others ? "; it has " + with_thousands(others) + " other files" : "") +
                    (opts_.recursive ? "" : "; recursive = false looks in the folder itself only"));
  std::vector<ImageFiles::File> files;
  for (auto& rel : found)
    if (fnmatch(opts_.files.c_str(), base_name(rel).c_str(), 0) == 0) files.push_back({rel, -1});
  if (files.empty())
    throw UserError(who + ": files = \"" + opts_.files + "\" selects none of the " +
                    with_thousands(found.size()) + " image files (e.g. " + some_names(found, 3) +
                    "); the glob applies to file names, case-sensitively");

  if (opts_.labeled) {
    std::vector<std::string> labels;
    labels.reserve(files.size());
    if (!opts_.label_regex.empty()) {
      const std::regex re(opts_.label_regex, std::regex::ECMAScript);
      std::vector<std::string> unmatched;
      std::smatch m;
      for (const auto& f : files) {
        std::string name = base_name(f.name);
        // An optional group that took no part gives "", which is no class name either.
        if (std::regex_search(name, m, re) && m[1].matched && m[1].length() > 0)
          labels.push_back(m[1].str());
        else
          unmatched.push_back(name);
      }
      if (unmatched.size() == files.size())
        throw UserError(who + ": label.regex \"" + opts_.label_regex + "\" matches no file name (e.g. " +
                        some_names(unmatched, 3) + "); it is searched in the file name without its folders");
      if (!unmatched.empty())
        throw UserError(who + ": label.regex \"" + opts_.label_regex + "\" does not match " +
                        with_thousands(unmatched.size()) + " of " + with_thousands(files.size()) +
                        " file names: " + some_names(unmatched) +
                        " (every selected file needs a label; narrow files = \"...\" to leave them out)");
    } else {
      for (const auto& f : files) {
        std::string name = base_name(f.name);
        labels.push_back(std::isupper(static_cast<unsigned char>(name[0])) ? "True" : "False");
      }
    }
    classes = assign_labels(opts_.images.classes, labels, files, who);
  } else {
    classes = opts_.images.classes;  // names the model's outputs; every label stays -1
  }
  set_files(std::move(classes), opts_.path, std::move(files), opts_.images, who);
}

std::string FileNames::describe() const {
  return "file_names " + opts_.path + ": " + summary(opts_.labeled);
}

void register_file_names(DatasetRegistry& registry) {
  registry.add("file_names",
               "a folder of images labeled by their file names (regex or rule, fastai from_name_re/func); "
               "CV_8UC1 or CV_8UC3 RGB, 0..255",
               [](Options& o) -> DatasetRegistry::Factory {
                 auto opts = FileNamesOptions::read(o);
                 return [opts] { return std::make_unique<FileNames>(opts); };
               });
}

}  // namespace engine
