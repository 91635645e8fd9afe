// tool-output.h — shared by the build-time generators in tools/: outputs are
// rewritten only when their content changes, so a build with nothing new
// recompiles and relinks nothing.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace mld::tools {

inline bool write_if_changed(const std::string& path, const std::string& content) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream old;
    old << in.rdbuf();
    if (old.str() == content) return true;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return static_cast<bool>(out);
}

}  // namespace mld::tools
