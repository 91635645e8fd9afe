// fleet-command.cc — `mldoctor fleet` (every rank of an MPI job runs check;
// rank 0 compares) and `mldoctor diff` (the same comparison of saved check
// reports). Both end in one Comparison rendered here: the differences as
// FLEET findings, what is the same everywhere, the clock offsets, and each
// node's own check findings grouped by the nodes that share them.
//
// MPI is reached through libmldoctor-mpi.so (src/mpi), dlopen()ed only by
// fleet: the binary links no MPI and every other command starts without it.
#include <dlfcn.h>
#include <time.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/cli.h"
#include "fleet/fleet.h"
#include "mpi/mpi-plugin.h"
#include "report/report.h"

namespace mld::cli {

namespace {

using nlohmann::json;

// What the digest protocol moved, for the report and docs/benchmarks.md.
struct ProtocolBytes {
  u64 digests = 0;  // gathered at rank 0 in step 1
  u64 plan = 0;     // broadcast in step 2
  u64 details = 0;  // gathered in step 3
  u64 reports = 0;  // what gathering every full report would have moved
};

struct Source {
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

std::vector<NodeFinding> node_findings(const fleet::Comparison& c) {
  std::vector<NodeFinding> out;
  const size_t g = *fleet::group_index("findings");
  for (const fleet::Variant& v : c.groups[g].variants) {
    if (!v.group) continue;
    for (const auto& [key, value] : v.group->values) {
      auto it = std::find_if(out.begin(), out.end(), [&k = key](const NodeFinding& f) { return f.key == k; });
      if (it == out.end()) {
        NodeFinding nf;
        nf.key = key;
        size_t colon = value.find(": ");
        nf.severity = parse_severity(value.substr(0, colon)).value_or(Severity::Info);
        nf.message = colon == std::string::npos ? value : value.substr(colon + 2);
        out.push_back(std::move(nf));
        it = out.end() - 1;
      }
      it->members.insert(it->members.end(), v.members.begin(), v.members.end());
    }
  }
  for (NodeFinding& f : out) std::sort(f.members.begin(), f.members.end());
  std::stable_sort(out.begin(), out.end(), [](const NodeFinding& a, const NodeFinding& b) {
    return a.severity > b.severity;
  });
  return out;
}

std::string rule_of(const std::string& key) { return key.substr(0, key.find(' ')); }

std::string member_count(const fleet::Observations& obs, size_t n) {
  bool ranks = !obs.members.empty() && obs.members.front().rank;
  return std::to_string(n) + (ranks ? (n == 1 ? " rank" : " ranks") : (n == 1 ? " report" : " reports"));
}

std::string clock_text(double seconds) {
  char buf[64];
  if (seconds < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  return buf;
}

json comparison_json(const fleet::Comparison& c, const fleet::Observations& obs, const Source& src) {
  const std::vector<fleet::GroupSpec>& specs = fleet::group_specs();
  json members = json::array();
  for (size_t m = 0; m < obs.members.size(); m++) {
    const fleet::Member& mem = obs.members[m];
    json j = {{"label", mem.label}, {"node", c.node_of_member[m]}, {"tool_version", mem.tool_version}};
    if (mem.rank) j["rank"] = *mem.rank;
    if (m < obs.clock_offset.size() && obs.clock_offset[m]) j["clock_offset_s"] = *obs.clock_offset[m];
    members.push_back(std::move(j));
  }
  json nodes = json::array();
  for (const fleet::Node& n : c.nodes)
    nodes.push_back({{"name", n.identity.name}, {"key", n.identity.key}, {"members", n.members}});
  json groups = json::array();
  for (const fleet::GroupComparison& gc : c.groups) {
    const fleet::GroupSpec& spec = specs[gc.group];
    json variants = json::array();
    for (const fleet::Variant& v : gc.variants) {
      json vj = {{"members", v.members}};
      if (v.group) vj["values"] = v.group->values;
      variants.push_back(std::move(vj));
    }
    json keys = json::array();
    for (const fleet::KeyDifference& k : gc.keys) {
      json vals = json::array();
      for (const auto& [value, holders] : k.values)
        vals.push_back({{"value", value ? json(*value) : json(nullptr)}, {"members", holders}});
      keys.push_back({{"key", k.key}, {"values", vals}});
    }
    groups.push_back({{"name", spec.name},
                      {"scope", spec.scope == fleet::Scope::Node ? "node" : "process"},
                      {"title", spec.title},
                      {"differs", gc.differs()},
                      {"variants", variants},
                      {"keys", keys},
                      {"not_recorded", gc.not_recorded}});
  }
  json findings = json::array();
  for (const Finding& f : c.findings) findings.push_back(report::finding_json(f));
  json nf = json::array();
  for (const NodeFinding& f : node_findings(c))
    nf.push_back({{"rule", rule_of(f.key)},
                  {"key", f.key},
                  {"severity", severity_name(f.severity)},
                  {"message", f.message},
                  {"members", f.members}});
  json doc = {{"schema", "mldoctor.fleet/1"},
              {"version", MLD_VERSION},
              {"source", src.fleet ? "mpi" : "reports"},
              {"members", members},
              {"nodes", nodes},
              {"groups", groups},
              {"max_clock_offset_s", c.max_clock_offset ? json(*c.max_clock_offset) : json(nullptr)},
              {"node_findings", nf},
              {"findings", findings}};
  if (src.bytes)
    doc["protocol"] = {{"digest_bytes", src.bytes->digests},
                       {"plan_bytes", src.bytes->plan},
                       {"detail_bytes", src.bytes->details},
                       {"full_report_bytes", src.bytes->reports}};
  if (!src.mpi_library.empty()) doc["mpi_library"] = src.mpi_library;
  return doc;
}

void print_text(std::FILE* out, const fleet::Comparison& c, const fleet::Observations& obs, const Source& src,
                const CommonOptions& common) {
  const std::vector<fleet::GroupSpec>& specs = fleet::group_specs();
  const bool markdown = common.format == OutputFormat::Markdown;
  std::string head = std::string(src.fleet ? "mldoctor fleet" : "mldoctor diff") + " · " +
                     member_count(obs, obs.members.size()) + " on " + std::to_string(c.nodes.size()) +
                     (c.nodes.size() == 1 ? " node" : " nodes");
  if (markdown)
    std::fprintf(out, "## %s\n\n| node | %s |\n|---|---|\n", head.c_str(), src.fleet ? "ranks" : "reports");
  else
    std::fprintf(out, "%s\n", head.c_str());
  for (const fleet::Node& n : c.nodes) {
    std::string who;
    std::vector<u32> ranks;
    for (size_t m : n.members)
      if (obs.members[m].rank) ranks.push_back(*obs.members[m].rank);
    if (ranks.size() == n.members.size()) {
      who = format_ranges(ranks);
    } else {
      for (size_t m : n.members) who += (who.empty() ? "" : ", ") + obs.members[m].label;
    }
    std::string name = n.identity.name.empty() ? "(no hostname)" : n.identity.name;
    if (markdown)
      std::fprintf(out, "| %s | %s |\n", name.c_str(), who.c_str());
    else
      std::fprintf(out, "  %-16s %s\n", name.c_str(), who.c_str());
  }
  if (c.tool_versions.size() > 1) {
    std::string v;
    for (const std::string& t : c.tool_versions) v += (v.empty() ? "" : ", ") + (t.empty() ? "unknown" : t);
    std::fprintf(out, "%sreports written by mldoctor %s\n", markdown ? "\n" : "  ", v.c_str());
  }
  std::fprintf(out, "\n");

  std::vector<const Finding*> all;
  for (const Finding& f : c.findings) all.push_back(&f);
  if (markdown) {
    report::print_findings_markdown(out, all);
  } else {
    if (all.empty()) std::fprintf(out, "%s no differences\n", common.color ? "\033[32m✓\033[0m" : "✓");
    for (const Finding* f : all) report::print_finding(out, *f, report::Style{common.color, false});
    std::fprintf(out, "\n");
  }

  std::string same_node, same_process;
  for (const fleet::GroupComparison& gc : c.groups) {
    const fleet::GroupSpec& spec = specs[gc.group];
    if (gc.differs() || gc.variants.empty() || spec.rule.empty()) continue;
    if (obs.members.size() - gc.not_recorded.size() < 2) continue;  // nothing to compare with
    std::string& list = spec.scope == fleet::Scope::Node ? same_node : same_process;
    list += (list.empty() ? "" : ", ") + std::string(spec.title);
  }
  const char* bullet = markdown ? "- " : "";
  if (!same_node.empty()) std::fprintf(out, "%sSame on every node: %s\n", bullet, same_node.c_str());
  if (!same_process.empty())
    std::fprintf(out, "%sSame in every %s: %s\n", bullet, src.fleet ? "rank" : "report", same_process.c_str());
  for (const fleet::GroupComparison& gc : c.groups) {
    if (gc.not_recorded.empty()) continue;
    std::string who;
    for (size_t m : gc.not_recorded) {
      who += (who.empty() ? "" : ", ") + obs.members[m].label;
      if (!obs.members[m].tool_version.empty()) who += " (mldoctor " + obs.members[m].tool_version + ")";
    }
    std::fprintf(out, "%sNot compared for %s: %s, which its report does not record\n", bullet, who.c_str(),
                 std::string(specs[gc.group].title).c_str());
  }
  if (c.max_clock_offset)
    std::fprintf(out, "%sClocks: nodes at most %s apart\n", bullet, clock_text(*c.max_clock_offset).c_str());
  if (src.bytes && src.bytes->reports)
    std::fprintf(out, "%sGathered %llu bytes of digests and %llu of details (the full reports: %llu bytes)\n",
                 bullet, static_cast<unsigned long long>(src.bytes->digests),
                 static_cast<unsigned long long>(src.bytes->details),
                 static_cast<unsigned long long>(src.bytes->reports));

  std::vector<NodeFinding> nf = node_findings(c);
  std::fprintf(out, markdown ? "\n### Findings of check on each node\n\n" : "\nFindings of check on each node:\n");
  if (nf.empty()) std::fprintf(out, "%s none\n", markdown ? "-" : " ");
  // Grouped by the members that share them: "every rank" first.
  std::vector<std::vector<size_t>> holder_sets;
  for (const NodeFinding& f : nf)
    if (std::find(holder_sets.begin(), holder_sets.end(), f.members) == holder_sets.end())
      holder_sets.push_back(f.members);
  std::stable_sort(holder_sets.begin(), holder_sets.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  const size_t fg = *fleet::group_index("findings");
  size_t recorded = obs.members.size() - c.groups[fg].not_recorded.size();
  for (const std::vector<size_t>& holders : holder_sets) {
    std::string who = holders.size() == recorded && recorded == obs.members.size()
                          ? std::string(src.fleet ? "every rank" : "every report")
                          : fleet::describe_members(c, obs, holders);
    std::fprintf(out, markdown ? "- on %s:\n" : "  on %s:\n", who.c_str());
    for (const NodeFinding& f : nf)
      if (f.members == holders)
        std::fprintf(out, markdown ? "  - %s `%s` %s\n" : "    %s %s  %s\n", report::severity_mark(f.severity),
                     markdown ? rule_of(f.key).c_str() : f.message.c_str(),
                     markdown ? f.message.c_str() : rule_of(f.key).c_str());
  }
}

// Prints the comparison and returns the exit status: 1 when a difference or
// a node's finding is at or above --fail-on.
int render(const fleet::Observations& obs, const CommonOptions& common, const Source& src) {
  fleet::Comparison c = fleet::compare(obs);
  std::vector<std::string> ids;
  for (const Finding& f : c.findings) ids.push_back(f.rule);
  rules::RuleSet rule_set = rules::RuleSet::builtin_subset(ids);
  for (Finding& f : c.findings) rules::complete_from_rule(f, rule_set);
  if (common.format == OutputFormat::Json)
    std::fprintf(stdout, "%s\n", comparison_json(c, obs, src).dump(2).c_str());
  else
    print_text(stdout, c, obs, src, common);
  std::vector<const Finding*> all;
  for (const Finding& f : c.findings) all.push_back(&f);
  if (report::count_at_or_above(all, common.fail_on) > 0) return 1;
  for (const NodeFinding& f : node_findings(c))
    if (f.severity >= common.fail_on) return 1;
  return 0;
}

// ─── MPI ────────────────────────────────────────────────────────────────────

double wall_clock() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}


class Mpi {
 public:
  const mld_mpi_plugin* p = nullptr;
  void check(int rc, const char* what) const {
    if (rc == 0) return;
    char buf[256];
    p->error_text(rc, buf, sizeof buf);
    throw std::runtime_error(std::string("MPI ") + what + ": " + buf);
  }
  std::vector<std::string> gather(const std::string& mine, int size) const {
    void* out = nullptr;
    int* lengths = nullptr;
    check(p->gatherv(mine.data(), static_cast<int>(mine.size()), &out, &lengths), "gather");
    std::vector<std::string> parts;
    if (out) {
      const char* b = static_cast<const char*>(out);
      size_t off = 0;
      for (int i = 0; i < size; i++) {
        parts.emplace_back(b + off, static_cast<size_t>(lengths[i]));
        off += static_cast<size_t>(lengths[i]);
      }
    }
    std::free(out);
    std::free(lengths);
    return parts;
  }
  std::string bcast(const std::string& root_bytes, bool root) const {
    void* data = root ? const_cast<char*>(root_bytes.data()) : nullptr;
    int len = static_cast<int>(root_bytes.size());
    check(p->bcast(&data, &len), "broadcast");
    if (root) return root_bytes;
    std::string out(static_cast<const char*>(data), static_cast<size_t>(len));
    std::free(data);
    return out;
  }
};

// Rank 0 probes each node leader's clock a few times (Cristian's algorithm);
// the leaders answer. Returns the offset per leader rank (rank 0 only).
std::map<u32, double> probe_clocks(const Mpi& mpi, u32 me, const std::vector<u32>& leaders) {
  constexpr int kRounds = 5;
  std::map<u32, double> offsets;
  if (me == 0) {
    for (u32 leader : leaders) {
      if (leader == 0) {
        offsets[0] = 0;
        continue;
      }
      std::vector<fleet::ClockSample> samples;
      for (int i = 0; i < kRounds; i++) {
        double t0 = wall_clock(), remote = 0;
        mpi.check(mpi.p->send_doubles(&t0, 1, static_cast<int>(leader)), "clock probe");
        mpi.check(mpi.p->recv_doubles(&remote, 1, static_cast<int>(leader)), "clock probe");
        samples.push_back({t0, remote, wall_clock()});
      }
      if (std::optional<double> off = fleet::clock_offset(samples)) offsets[leader] = *off;
    }
  } else if (std::find(leaders.begin(), leaders.end(), me) != leaders.end()) {
    for (int i = 0; i < kRounds; i++) {
      double ping = 0;
      mpi.check(mpi.p->recv_doubles(&ping, 1, 0), "clock probe");
      double now = wall_clock();
      mpi.check(mpi.p->send_doubles(&now, 1, 0), "clock probe");
    }
  }
  return offsets;
}

}  // namespace

int run_diff(const CommonOptions& common, const std::vector<std::string>& paths) {
  if (paths.size() < 2) {
    print_error("diff compares two or more reports of `mldoctor check --json`");
    return 2;
  }
  fleet::Observations obs;
  std::vector<fleet::MemberFacts> facts;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      print_error(path + ": " + std::strerror(errno));
      return 2;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    json doc = json::parse(buf.str(), nullptr, false);
    if (doc.is_discarded()) {
      print_error(path + ": not JSON (write a report with `mldoctor check --json > FILE`)");
      return 2;
    }
    try {
      facts.push_back(fleet::facts_from_check(doc));
    } catch (const fleet::ReportError& e) {
      print_error(path + ": " + e.what());
      return 2;
    }
    fleet::Member m;
    m.label = std::string(base_name(path));
    m.node = facts.back().node;
    m.tool_version = facts.back().tool_version;
    obs.members.push_back(std::move(m));
    std::vector<u64> digests;
    for (size_t g = 0; g < facts.back().groups.size(); g++) {
      u64 d = fleet::digest(facts.back().groups[g]);
      digests.push_back(d);
      obs.details.emplace(std::pair{g, d}, facts.back().groups[g]);
    }
    obs.digests.push_back(std::move(digests));
  }
  return render(obs, common, Source{});
}

std::string find_mpi_plugin(std::string* tried) {
  const host::Host live = host::Host::live();
  for (const std::string& d : host::companion_dirs(live)) {
    std::string p = host::join_path(d, "libmldoctor-mpi.so");
    *tried += (tried->empty() ? "" : ", ") + p;
    if (live.stat(p).kind == host::FileKind::Regular) return live.real_path(p).value_or(p);
  }
  return {};
}

int run_fleet(const CommonOptions& common, const CheckOptions& opts, int* argc, char*** argv) {
  std::string tried;
  std::string plugin = find_mpi_plugin(&tried);
  if (plugin.empty()) {
    print_error(std::string("fleet needs its MPI plugin, libmldoctor-mpi.so (looked for ") + tried + "). " +
                (mpi_plugin_built() ? "Install the mldoctor-mpi package (or `cmake --install` the whole build)"
                                    : "This mldoctor was built without MPI: apt-get install libopenmpi-dev "
                                      "openmpi-bin and rebuild") +
                "; then launch with `mpirun -np N mldoctor fleet` or `srun mldoctor fleet`");
    return 2;
  }
#if defined(__SANITIZE_ADDRESS__)
  // make test-sanitize: the process-wide leak check runs here, before Open
  // MPI is loaded, instead of at exit. Open MPI and PMIx drop blocks at
  // MPI_Init and MPI_Finalize, often from components unloaded by then, whose
  // frames no suppression can name. What runs after this point (check, the
  // comparison, the protocol) is leak-checked by check's, diff's and the
  // fleet protocol's own tests; ASan and UBSan stay on to the end.
  __lsan_do_leak_check();
#endif
  void* h = dlopen(plugin.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    print_error(std::string("fleet: cannot load ") + plugin + ": " + dlerror() +
                " (is Open MPI installed? apt-get install openmpi-bin)");
    return 2;
  }
  auto entry = reinterpret_cast<const mld_mpi_plugin* (*)()>(dlsym(h, "mld_mpi_plugin_v1"));
  Mpi mpi;
  if (!entry || !(mpi.p = entry()) || mpi.p->abi != MLD_MPI_PLUGIN_ABI) {
    print_error("fleet: " + plugin + " is not a plugin of this mldoctor");
    return 2;
  }
  try {
    mpi.check(mpi.p->init(argc, argv), "init");
  } catch (const std::exception& e) {
    print_error(std::string("fleet: ") + e.what());
    return 2;
  }
  int me_i = 0, size = 0;
  int status = 2;
  try {
    mpi.check(mpi.p->rank(&me_i), "rank");
    mpi.check(mpi.p->size(&size), "size");
    const u32 me = static_cast<u32>(me_i);
    const bool root = me == 0;

    // Every rank: its check, cut into groups.
    host::Host host = analysed_host(common);
    std::optional<check::CheckReport> checked = checked_report(common, opts, host);
    if (!checked) throw std::runtime_error("the rules could not be loaded");
    json doc = check_report_json(*checked);
    fleet::MemberFacts own = fleet::facts_from_check(doc);
    own.report_bytes = doc.dump().size();
    ProtocolBytes bytes;
    std::vector<std::string> digest_msgs = mpi.gather(fleet::encode_digests(me, own), size);
    std::vector<fleet::DigestMessage> digests;
    std::string plan_bytes;
    if (root) {
      for (const std::string& m : digest_msgs) {
        bytes.digests += m.size();
        digests.push_back(fleet::decode_digests(m));
        bytes.reports += digests.back().report_bytes;
      }
      plan_bytes = fleet::encode_plan(fleet::plan_fetch(digests));
      bytes.plan = plan_bytes.size();
    }
    fleet::FetchPlan plan = fleet::decode_plan(mpi.bcast(plan_bytes, root));
    std::vector<std::string> answers = mpi.gather(fleet::encode_details(plan, me, own), size);
    std::map<u32, double> offsets = probe_clocks(mpi, me, plan.node_leaders);
    if (root) {
      for (const std::string& a : answers) bytes.details += a.size();
      fleet::Observations obs = fleet::assemble(digests, own, answers);
      // A node's offset is its leader's; every member of the node shares it.
      std::map<std::string, double> by_node;
      for (const fleet::DigestMessage& d : digests)
        if (auto it = offsets.find(d.rank); it != offsets.end()) by_node[d.node.key] = it->second;
      for (size_t m = 0; m < obs.members.size(); m++)
        if (auto it = by_node.find(obs.members[m].node.key); it != by_node.end()) obs.clock_offset[m] = it->second;
      Source src;
      src.fleet = true;
      src.bytes = bytes;
      src.mpi_library = mpi.p->library_version;
      status = render(obs, common, src);
      std::fflush(stdout);
    }
    int shared = status;
    mpi.check(mpi.p->bcast_int(&shared), "broadcast");
    status = shared;
  } catch (const std::exception& e) {
    print_error(std::string("fleet (rank ") + std::to_string(me_i) + "): " + e.what());
    // The other ranks wait in a collective: end the job rather than hang it.
    std::fflush(nullptr);
    mpi.p->abort_job(2);
    return 2;
  }
  mpi.p->finalize();
  return status;
}

}  // namespace mld::cli
