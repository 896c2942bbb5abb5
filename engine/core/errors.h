#pragma once
// Two kinds of failure a user can tell apart by exit code (DESIGN.md, "Command line"):
//   UserError -> exit 2: bad recipe, bad data, bad arguments. Message says where and how to fix.
//   RunError  -> exit 1: the run itself failed (a rank died, a regression bound missed).
#include <stdexcept>
#include <string>

namespace engine {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace engine
