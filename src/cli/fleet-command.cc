// fleet-command.cc — `mldoctor fleet` (every rank of an MPI job runs check;
// rank 0 compares) and `mldoctor diff` (the same comparison of saved check
// reports). Both end in one Comparison rendered here: the differences as
// FLEET findings, what is the same everywhere, the clock offsets, and each
// node's own check findings grouped by the nodes that share them.
//
// MPI is reached through libmldoctor-mpi.so (src/mpi), dlopen()ed only by
// fleet: the binary links no MPI and every other command starts without it.
// Before MPI_Init the launcher is read from the environment (fleet/launcher.cc):
// srun without PMIx would make Open MPI abort the process with status 1,
// which reads as "differences found", so fleet refuses it with status 2 and
// the command that works; after it, a world smaller than the launcher
// announced (salloc with no launcher: a world of one) is refused too.
#include <dlfcn.h>
#include <time.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/cli.h"
#include "fleet/fleet.h"
#include "hostfacts/hostfacts.h"
#include "mpi/mpi-plugin.h"
#include "render/fleet-report.h"
#include "report/report.h"

namespace mld::cli {

namespace {

using nlohmann::json;

// Prints the comparison and returns the exit status: 1 when a difference or
// a node's finding is at or above --fail-on.
int render(const fleet::Observations& obs, const CommonOptions& common, const render::Source& src) {
  const fleet::Comparison c = fleet::compare(obs);
  if (common.format == OutputFormat::Json)
    std::fprintf(stdout, "%s\n", render::comparison_json(c, obs, src).dump(2).c_str());
  else
    render::print_comparison(stdout, c, obs, src, common.format == OutputFormat::Markdown,
                             common.color);
  std::vector<const Finding*> all;
  for (const Finding& f : c.findings) all.push_back(&f);
  if (report::count_at_or_above(all, common.fail_on) > 0) return 1;
  for (const render::NodeFinding& f : render::node_findings(c))
    if (f.severity >= common.fail_on) return 1;
  return 0;
}

// ─── MPI ────────────────────────────────────────────────────────────────────

// Test hook (docs/fleet.md, "Testing fleet"): MLDOCTOR_TEST_CLOCK_SKEW_S=
// SECONDS shifts the clock this rank answers the probe with, so a test on
// one machine can give one emulated node a clock offset (FLEET006); every
// node of one machine shares the kernel's CLOCK_REALTIME, which time
// namespaces do not offset. A value that is not a number is ignored.
double clock_skew() {
  static const double skew = [] {
    std::optional<std::string> v = host::Host::live().getenv("MLDOCTOR_TEST_CLOCK_SKEW_S");
    if (!v) return 0.0;
    char* end = nullptr;
    const double d = std::strtod(v->c_str(), &end);
    return end && *end == 0 && end != v->c_str() && std::isfinite(d) ? d : 0.0;
  }();
  return skew;
}

double wall_clock() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9 + clock_skew();
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

// The node identity fleet groups by (boot id, else hostname; as
// facts_from_check reads it) and this rank's affinity mask, one line.
std::string binding_line(const host::Host& host) {
  std::string key;
  for (const char* file : {"/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname"})
    if (std::optional<std::string> t = host.read_file(file, 4096); t && !trim(*t).empty()) {
      key = std::string(trim(*t));
      break;
    }
  const hostfacts::CpuFacts cpu = hostfacts::collect_cpu_facts(host);
  return key + "\t" + (cpu.affinity ? hostfacts::format_cpu_list(*cpu.affinity) : "?") + "\n";
}

// Every rank's binding line at rank 0, and all of them back to every rank:
// the affinity masks of the ranks of this rank's node, in rank order, or
// nullopt when one of them is unknown.
std::optional<std::vector<std::vector<u32>>> node_masks(const Mpi& mpi, const host::Host& host,
                                                        int size, bool root) {
  const std::string mine = binding_line(host);
  std::string all;
  for (const std::string& line : mpi.gather(mine, size)) all += line;
  all = mpi.bcast(all, root);
  const std::string key = mine.substr(0, mine.find('\t'));
  std::vector<std::vector<u32>> masks;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t nl = all.find('\n', pos);
    if (nl == std::string::npos) nl = all.size();
    const std::string_view line(all.data() + pos, nl - pos);
    pos = nl + 1;
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos || line.substr(0, tab) != key) continue;
    std::optional<std::vector<u32>> m = hostfacts::parse_cpu_list(line.substr(tab + 1));
    if (!m || m->empty()) return std::nullopt;
    masks.push_back(std::move(*m));
  }
  if (masks.empty()) return std::nullopt;
  return masks;
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
  return render(obs, common, render::Source{});
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
    print_error(std::string("fleet needs its MPI plugin, libmldoctor-mpi.so (looked for ") + tried +
                "). " +
                (mpi_plugin_built()
                     ? "Install the mldoctor-mpi package (or `cmake --install` the whole build)"
                     : "This mldoctor was built without MPI: apt-get install libopenmpi-dev "
                       "openmpi-bin and rebuild") +
                "; then launch with `mpirun -np N mldoctor fleet` or `srun --mpi=pmix mldoctor "
                "fleet`");
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
  const host::Host live = host::Host::live();
  const std::string_view library = mpi.p->library_version;
  std::optional<std::vector<std::string>> pmi;
  if (library.find("Open MPI") != std::string_view::npos && *mpi.p->library_path)
    pmi = fleet::open_mpi_pmi_components(live, mpi.p->library_path);
  const fleet::Launcher launcher = fleet::detect_launcher(live, pmi);
  if (!launcher.problem.empty()) {
    print_error("fleet: " + launcher.problem + "; " + fleet::launcher_advice() +
                " (this mldoctor's MPI: " + std::string(library) + ")");
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
    if (std::optional<std::string> wrong =
            fleet::world_size_problem(launcher, static_cast<u32>(size))) {
      // Every rank sees the same variables and says the same: no rank waits.
      print_error("fleet: " + *wrong);
      mpi.p->finalize();
      return 2;
    }
    const u32 me = static_cast<u32>(me_i);
    const bool root = me == 0;

    // Every rank: its check, cut into groups, knowing the CPUs of the other
    // ranks of its node (THR001 counts the ranks that share its CPUs).
    host::Host host = analysed_host(common);
    CheckOptions with_masks = opts;
    with_masks.node_masks = node_masks(mpi, host, size, root);
    std::optional<check::CheckReport> checked = checked_report(common, with_masks, host);
    if (!checked) throw std::runtime_error("the rules could not be loaded");
    json doc = fleet::check_document(*checked, MLD_VERSION);
    fleet::MemberFacts own = fleet::facts_from_check(doc);
    own.report_bytes = doc.dump().size();
    render::ProtocolBytes bytes;
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
        if (auto it = by_node.find(obs.members[m].node.key); it != by_node.end())
          obs.clock_offset[m] = it->second;
      render::Source src;
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
