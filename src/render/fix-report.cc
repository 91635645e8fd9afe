// fix-report.cc — `mldoctor fix`: the environment settings of the findings
// as shell code for `eval "$(mldoctor fix)"` (bash/zsh or fish), each group
// under a comment naming the rules that ask for it, or as mldoctor.fix/1.
#include "render/fix-report.h"

namespace mld::render {

using nlohmann::json;

nlohmann::json fix_document(const std::vector<check::FixSetting>& settings) {
  json a = json::array();
  for (const check::FixSetting& s : settings)
    a.push_back({{"name", s.name},
                 {"value", s.value ? json(*s.value) : json(nullptr)},
                 {"rules", s.rules}});
  return {{"schema", "mldoctor.fix/1"}, {"version", MLD_VERSION}, {"settings", a}};
}

void print_fix_shell(std::FILE* out, const std::vector<check::FixSetting>& settings,
                     const std::string& shell) {
  // Single quotes keep every byte literal: in bash a ' inside is closed,
  // escaped and reopened; fish escapes ' and \\ inside single quotes.
  auto quote = [&](const std::string& v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\'')
        q += shell == "fish" ? "\\'" : "'\\''";
      else if (c == '\\' && shell == "fish")
        q += "\\\\";
      else
        q += c;
    }
    return q + "'";
  };
  if (settings.empty())
    std::fprintf(out, "# mldoctor fix: no configuration findings; nothing to set\n");
  std::vector<std::string> last_rules;
  for (const check::FixSetting& s : settings) {
    if (s.rules != last_rules) {
      std::string why;
      for (const std::string& rule : s.rules) why += (why.empty() ? "" : ", ") + rule;
      std::fprintf(out, "# %s (mldoctor explain %s)\n", why.c_str(), s.rules.front().c_str());
      last_rules = s.rules;
    }
    if (!s.value)
      std::fprintf(out, shell == "fish" ? "set -e %s\n" : "unset %s\n", s.name.c_str());
    else if (shell == "fish")
      std::fprintf(out, "set -gx %s %s\n", s.name.c_str(), quote(*s.value).c_str());
    else
      std::fprintf(out, "export %s=%s\n", s.name.c_str(), quote(*s.value).c_str());
  }
}

}  // namespace mld::render
