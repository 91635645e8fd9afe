// libs-report.cc — the process of `mldoctor libs` for people (the flat
// `ld.so --list` view with how each object was found, or the dependency
// tree) and as the objects of mldoctor.libs/1 (docs/json-schema.md); a
// missing object shows the paths considered, in ld.so's order.
#include "render/libs-report.h"

#include <cstdio>

namespace mld::render {

using loader::How;
using loader::Object;
using loader::Process;
using nlohmann::json;

namespace {

json attempts_json(const std::vector<loader::Attempt>& tried) {
  json a = json::array();
  for (const loader::Attempt& t : tried)
    a.push_back({{"path", t.path}, {"source", t.source}, {"outcome", t.outcome}});
  return a;
}

}  // namespace

json process_json(const Process& p) {
  json objs = json::array();
  for (const Object& o : p.objects) {
    if (o.removed) continue;
    json needed = json::array();
    for (const loader::Resolution& r : o.needed) {
      json n = {{"name", r.name}, {"how", std::string(loader::how_name(r.how))}};
      n["path"] =
          r.object && !p.objects[*r.object].faked ? json(p.objects[*r.object].path) : json(nullptr);
      if (!r.via.empty()) n["via"] = r.via;
      if (!r.tried.empty()) n["tried"] = attempts_json(r.tried);
      needed.push_back(std::move(n));
    }
    json j = {{"path", o.faked ? json(nullptr) : json(o.path)},
              {"name", o.names.empty() ? o.path : o.names.front()},
              {"found", !o.faked},
              {"depth", o.depth},
              {"needed", std::move(needed)}};
    if (o.elf && o.elf->soname()) j["soname"] = std::string(*o.elf->soname());
    objs.push_back(std::move(j));
  }
  return objs;
}

namespace {

// How an object was found, for the text views: "[ld.so.cache]",
// "[DT_RUNPATH of /x/liba.so]".
std::string provenance(const loader::Resolution& r) {
  std::string s = "[" + std::string(loader::how_name(r.how));
  if (!r.via.empty() && r.how != How::ExeRpath) s += " of " + r.via;
  return s + "]";
}

void print_considered(std::FILE* out, const loader::Resolution& r, const std::string& indent) {
  std::fprintf(out, "%spaths considered in this order:\n", indent.c_str());
  if (r.tried.empty()) std::fprintf(out, "%s  (none)\n", indent.c_str());
  for (size_t i = 0; i < r.tried.size(); i++) {
    const loader::Attempt& a = r.tried[i];
    std::fprintf(out, "%s  %zu. %s: %s (%s)\n", indent.c_str(), i + 1, a.source.c_str(),
                 a.path.c_str(), a.outcome.c_str());
  }
}

}  // namespace

// The flat view: every object in load order, as `ld.so --list` lists them,
// with the way each was found.
void print_list(std::FILE* out, const Process& p) {
  // The first resolution that reached each object says how it was found.
  std::vector<const loader::Resolution*> first(p.objects.size(), nullptr);
  for (const Object& o : p.objects)
    for (const loader::Resolution& r : o.needed)
      if (r.object && !first[*r.object] && r.how != How::Loaded) first[*r.object] = &r;
  for (size_t i = 1; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.removed) continue;
    const loader::Resolution* r = first[i];
    if (o.faked) {
      std::fprintf(out, "  %s => not found\n", o.names.front().c_str());
      if (r) print_considered(out, *r, "      ");
      continue;
    }
    std::string how = r ? "  " + provenance(*r) : "";
    if (o.names.front() == o.path)
      std::fprintf(out, "  %s%s\n", o.path.c_str(), how.c_str());
    else
      std::fprintf(out, "  %s => %s%s\n", o.names.front().c_str(), o.path.c_str(), how.c_str());
  }
}

void print_tree_node(std::FILE* out, const Process& p, size_t idx, const std::string& prefix,
                     std::vector<bool>& shown) {
  const Object& o = p.objects[idx];
  for (size_t k = 0; k < o.needed.size(); k++) {
    const loader::Resolution& r = o.needed[k];
    bool last = k + 1 == o.needed.size();
    std::string branch = prefix + (last ? "└── " : "├── ");
    std::string next = prefix + (last ? "    " : "│   ");
    if (!r.object || p.objects[*r.object].faked) {
      std::fprintf(out, "%s%s not found\n", branch.c_str(), r.name.c_str());
      print_considered(out, r, next);
      continue;
    }
    const Object& d = p.objects[*r.object];
    bool again = shown[*r.object];
    std::fprintf(out, "%s%s %s %s%s\n", branch.c_str(), r.name.c_str(), provenance(r).c_str(),
                 d.path.c_str(), again && !d.needed.empty() ? " (dependencies shown above)" : "");
    if (!again) {
      shown[*r.object] = true;
      print_tree_node(out, p, *r.object, next, shown);
    }
  }
}

}  // namespace mld::render
