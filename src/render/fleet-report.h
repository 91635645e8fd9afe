// fleet-report.h — the report of `mldoctor fleet` and `mldoctor diff`: a
// Comparison of many check reports, as text, Markdown or JSON.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fleet/fleet.h"

namespace mld::render {

// What the digest protocol moved, for the report and docs/benchmarks.md.
struct ProtocolBytes {
  u64 digests = 0;  // gathered at rank 0 in step 1
  u64 plan = 0;     // broadcast in step 2
  u64 details = 0;  // gathered in step 3
  u64 reports = 0;  // what gathering every full report would have moved
};

struct Source {        // where the reports came from
  bool fleet = false;  // MPI ranks; else saved reports
  std::optional<ProtocolBytes> bytes;
  std::string mpi_library;
};

// Each check finding of the members, keyed as in the findings group
// ("GPU007 rank binding"), with the members that have it.
struct NodeFinding {
  std::string key;
  Severity severity = Severity::Info;
  std::string message;
  std::vector<size_t> members;
};

std::vector<NodeFinding> node_findings(const fleet::Comparison& c);
nlohmann::json comparison_json(const fleet::Comparison& c, const fleet::Observations& obs,
                               const Source& src);
void print_comparison(std::FILE* out, const fleet::Comparison& c, const fleet::Observations& obs,
                      const Source& src, bool markdown, bool color);

}  // namespace mld::render
