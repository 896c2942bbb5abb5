#pragma once
// Headless Chromium for the report tests: the page as a browser builds it (--dump-dom), what its
// console said, and a screenshot. Debian's `chromium` package; tools/test.sh installs it.
#include <string>

namespace engine::test {

struct RenderedPage {
  int exit_code = -1;
  std::string dom;  // the DOM after the load event, serialised
  std::string log;  // Chromium's stderr with --enable-logging: console messages show as ":CONSOLE"
};

/// The chromium binary on PATH, or "" when it is not installed.
std::string chromium_binary();

/// Loads `html_path` (a file) in a fresh headless profile and dumps its DOM. With `screenshot`
/// set, also writes a PNG of the first `height` pixels of the page at 1280 px wide.
RenderedPage render_page(const std::string& html_path, const std::string& screenshot = "", int height = 2200);

/// Lines of `log` that are console messages of the page (errors, warnings, logs): none expected.
std::string console_messages(const std::string& log);

}  // namespace engine::test
