// libs-report.h — `mldoctor libs`' view of one simulated process.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/loader.h"

namespace mld::render {

// The objects of mldoctor.libs/1, each with its needs and how they resolved.
nlohmann::json process_json(const loader::Process& p);
// Every object in load order, as `ld.so --list` lists them, with how each was found.
void print_list(std::FILE* out, const loader::Process& p);
// The dependencies of object `idx` as a tree (objects shown once).
void print_tree_node(std::FILE* out, const loader::Process& p, size_t idx,
                     const std::string& prefix, std::vector<bool>& shown);

}  // namespace mld::render
