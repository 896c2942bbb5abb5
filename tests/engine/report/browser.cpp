#include "tests/engine/report/browser.h"

#include <filesystem>
#include <sstream>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

namespace engine::test {

namespace {

std::string flags(const std::string& profile) {
  // What a CI container allows: no sandbox (root), no GPU, nothing fetched, a profile of its own.
  return " --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking"
         " --disable-dev-shm-usage --user-data-dir=" +
         profile + " --enable-logging=stderr --v=0";
}

}  // namespace

std::string chromium_binary() {
  auto r = run_command("command -v chromium || command -v chromium-browser");
  if (r.exit_code != 0) return "";
  std::string path = r.output.substr(0, r.output.find('\n'));
  return path;
}

RenderedPage render_page(const std::string& html_path, const std::string& screenshot, int height) {
  RenderedPage page;
  const std::string chromium = chromium_binary();
  if (chromium.empty()) return page;
  const std::string dir = temp_dir("chromium");
  const std::string url = "file://" + std::filesystem::absolute(html_path).string();
  auto r = run_command("timeout 90 " + chromium + flags(dir + "/profile") + " --dump-dom " + url + " > " +
                       dir + "/dom.html 2> " + dir + "/log.txt");
  page.exit_code = r.exit_code;
  page.dom = read_text(dir + "/dom.html");
  page.log = read_text(dir + "/log.txt");
  if (!screenshot.empty()) {
    auto s = run_command("timeout 90 " + chromium + flags(dir + "/profile2") +
                         " --hide-scrollbars --window-size=1280," + std::to_string(height) +
                         " --screenshot=" + screenshot + " " + url + " 2>> " + dir + "/log.txt");
    if (s.exit_code != 0) page.exit_code = s.exit_code;
    page.log = read_text(dir + "/log.txt");
  }
  return page;
}

std::string console_messages(const std::string& log) {
  std::istringstream in(log);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.find(":CONSOLE") != std::string::npos) out += line + "\n";
  return out;
}

}  // namespace engine::test
