// facts.cc — one `check --json` report cut into the fact groups fleet and
// diff compare. What goes into a group is what makes two nodes of one job
// behave differently (driver, libraries, packages, interfaces, variables);
// what differs between healthy nodes by nature (free memory, PCI paths,
// the rank-identity variables, container veth names) is left out, so a
// difference is worth reading.
#include <algorithm>
#include <cmath>

#include "fleet/fleet.h"

namespace mld::fleet {

using nlohmann::json;

const std::vector<GroupSpec>& group_specs() {
  static const std::vector<GroupSpec> specs = {
      {"os", Scope::Node, "operating system, kernel and glibc"},
      {"gpu-driver", Scope::Node, "NVIDIA driver"},
      {"gpus", Scope::Node, "GPUs"},
      {"cpu", Scope::Node, "CPUs and NUMA nodes"},
      {"memory", Scope::Node, "memory and /dev/shm"},
      {"network", Scope::Node, "network interfaces"},
      {"infiniband", Scope::Node, "InfiniBand/RDMA devices"},
      {"libraries", Scope::Node, "native libraries (CUDA, NCCL, cuDNN, verbs, OpenMP)"},
      {"python", Scope::Process, "Python interpreter"},
      {"packages", Scope::Process, "key Python packages and torch's CUDA"},
      {"distributions", Scope::Process, "installed Python distributions"},
      {"imports", Scope::Process, "OpenMP runtimes and numba layer of the import set"},
      {"environment", Scope::Process, "native-layer environment variables"},
      {"limits", Scope::Process, "resource limits (memlock, nofile, nproc)"},
      {"cpu-binding", Scope::Process, "CPUs usable by each process"},
      {"findings", Scope::Process, "check's findings"},
  };
  return specs;
}

std::optional<size_t> group_index(std::string_view name) {
  const std::vector<GroupSpec>& specs = group_specs();
  for (size_t i = 0; i < specs.size(); i++)
    if (specs[i].name == name) return i;
  return std::nullopt;
}

u64 digest(const FactGroup& group) {
  u64 h = 0xcbf29ce484222325ULL;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
    // A terminator that cannot occur inside a UTF-8 string keeps
    // ("ab","c") and ("a","bc") apart.
    h ^= 0xff;
    h *= 0x100000001b3ULL;
  };
  mix(group.recorded ? "recorded" : "absent");
  for (const auto& [k, v] : group.values) {
    mix(k);
    mix(v);
  }
  // fmix64 (MurmurHash3's finaliser): FNV's low bits mix poorly.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

namespace {

// The value at a path of object keys, or nullptr when any step is missing
// or not an object: reports of older versions lack newer fields.
const json* at(const json& doc, std::initializer_list<std::string_view> path) {
  const json* cur = &doc;
  for (std::string_view key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// A scalar as the value text of a key: strings as they are, numbers and
// booleans as JSON writes them, null as "unknown".
std::string text(const json* v) {
  if (!v || v->is_null()) return "unknown";
  if (v->is_string()) return v->get<std::string>();
  return v->dump();
}

std::string text(const json& doc, std::initializer_list<std::string_view> path) {
  return text(at(doc, path));
}

std::string gib(const json* bytes) {
  if (!bytes || !bytes->is_number()) return "unknown";
  double g = bytes->get<double>() / double(1ULL << 30);
  // Identical nodes differ by a few MiB of reserved memory: whole GiB.
  return std::to_string(static_cast<long long>(std::llround(g))) + " GiB";
}

// Variables that name the rank or its device and differ between ranks by
// design: comparing them would report every healthy job.
bool rank_identity_variable(std::string_view name) {
  // Laid out by hand (clang-format would put one name per line).
  // clang-format off
  static constexpr std::string_view names[] = {
      "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_NODE_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
      "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RUN_ID"};
  // clang-format on
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// Interfaces that exist per container or per bridge and say nothing about
// the node's fabric (NCCL itself skips lo and docker*).
bool incidental_interface(std::string_view name) {
  static constexpr std::string_view prefixes[] = {"docker",  "veth", "br-",  "virbr", "cali",
                                                  "flannel", "cni",  "tunl", "vxlan", "ifb"};
  if (name == "lo") return true;
  for (std::string_view p : prefixes)
    if (name.starts_with(p)) return true;
  return false;
}

FactGroup absent() {
  FactGroup g;
  g.recorded = false;
  return g;
}

FactGroup os_group(const json& host) {
  FactGroup g;
  g.values["os"] = text(host, {"os"});
  g.values["kernel"] = text(host, {"kernel_release"});
  g.values["glibc"] = text(host, {"glibc_version"});
  const json* detected = at(host, {"container", "detected"});
  g.values["container"] = detected && detected->is_boolean() && detected->get<bool>()
                              ? text(host, {"container", "kind"})
                              : "none";
  return g;
}

FactGroup driver_group(const json& host) {
  FactGroup g;
  const json* d = at(host, {"nvidia_driver"});
  g.values["driver"] = d && d->is_string() ? d->get<std::string>() : "none loaded";
  return g;
}

FactGroup gpus_group(const json& host) {
  FactGroup g;
  std::map<std::string, size_t> models;
  size_t count = 0;
  if (const json* gpus = at(host, {"gpus"}); gpus && gpus->is_array())
    for (const json& m : *gpus) {
      models[m.is_string() ? m.get<std::string>() : "unknown"]++;
      count++;
    }
  g.values["count (driver)"] = std::to_string(count);
  std::string m;
  for (const auto& [name, n] : models)
    m += (m.empty() ? "" : ", ") + std::to_string(n) + "× " + name;
  g.values["models"] = m.empty() ? "none" : m;
  std::string numa;
  size_t pci = 0;
  if (const json* pg = at(host, {"gpu", "gpus"}); pg && pg->is_array())
    for (const json& gpu : *pg) {
      pci++;
      numa += (numa.empty() ? "" : ",") + text(gpu, {"pci", "numa_node"});
    }
  g.values["count (PCI)"] = std::to_string(pci);
  if (!numa.empty()) g.values["NUMA node of each GPU"] = numa;
  return g;
}

FactGroup cpu_group(const json& host) {
  FactGroup g;
  g.values["model"] = text(host, {"cpu_model"});
  g.values["online"] = text(host, {"cpus", "online_count"});
  g.values["cores"] = text(host, {"physical_cores"});
  const json* numa = at(host, {"numa_nodes"});
  g.values["NUMA nodes"] = numa && numa->is_array() ? std::to_string(numa->size()) : "unknown";
  return g;
}

FactGroup memory_group(const json& host) {
  FactGroup g;
  g.values["total"] = gib(at(host, {"memory", "total_bytes"}));
  const json* present = at(host, {"shm", "present"});
  g.values["/dev/shm"] = present && present->is_boolean() && !present->get<bool>()
                             ? "absent"
                             : gib(at(host, {"shm", "size_bytes"}));
  return g;
}

FactGroup network_group(const json& host) {
  FactGroup g;
  const json* ifs = at(host, {"gpu", "interfaces"});
  if (!ifs) return absent();
  if (ifs->is_array())
    for (const json& i : *ifs) {
      std::string name = text(i, {"name"});
      if (incidental_interface(name)) continue;
      const json* running = at(i, {"running"});
      g.values[name] =
          text(i, {"operstate"}) + (running && running->is_boolean()
                                        ? (running->get<bool>() ? ", running" : ", not running")
                                        : "");
    }
  return g;
}

FactGroup infiniband_group(const json& host) {
  FactGroup g;
  const json* hcas = at(host, {"gpu", "hcas"});
  if (hcas && hcas->is_array())
    for (const json& h : *hcas) {
      std::string name = text(h, {"name"});
      const json* ports = at(h, {"ports"});
      if (!ports || !ports->is_array() || ports->empty()) g.values[name] = "no ports";
      if (ports && ports->is_array())
        for (const json& p : *ports)
          g.values[name + " port " + text(p, {"port"})] =
              text(p, {"link_layer"}) + " " + text(p, {"state"});
    }
  // Devices the PCI walk did not place still count by name.
  if (const json* devs = at(host, {"rdma_devices"}); devs && devs->is_array())
    for (const json& d : *devs) {
      std::string name = text(&d);
      bool described = std::any_of(g.values.begin(), g.values.end(), [&](const auto& kv) {
        return kv.first == name || kv.first.starts_with(name + " port ");
      });
      if (!described) g.values[name] = "present";
    }
  return g;
}

FactGroup libraries_group(const json& doc) {
  const json* libs = at(doc, {"libraries"});
  if (!libs || !libs->is_array()) return absent();
  FactGroup g;
  for (const json& l : *libs) {
    const json* file = at(l, {"file"});
    const json* size = at(l, {"size"});
    std::string v = "not found";
    if (file && file->is_string()) {
      v = file->get<std::string>();
      if (size && size->is_number()) v += " (" + size->dump() + " bytes)";
    }
    g.values[text(l, {"soname"})] = v;
  }
  return g;
}

FactGroup python_group(const json& py) {
  FactGroup g;
  if (const json* err = at(py, {"error"}); err && err->is_string()) {
    // The error names this member's own PATH and directories: only whether
    // there is a Python is comparable.
    g.values["interpreter"] = "none found";
    return g;
  }
  g.values["version"] = text(py, {"version"});
  g.values["executable"] = text(py, {"executable"});
  g.values["prefix"] = text(py, {"prefix"});
  return g;
}

FactGroup packages_group(const json& py) {
  FactGroup g;
  if (const json* pk = at(py, {"packages"}); pk && pk->is_array())
    for (const json& p : *pk) g.values[text(p, {"import"})] = text(p, {"version"});
  if (const json* cuda = at(py, {"torch_cuda"}))
    g.values["torch CUDA"] = cuda->is_null() ? "CPU build" : text(cuda);
  return g;
}

FactGroup distributions_group(const json& py) {
  FactGroup g;
  if (const json* ds = at(py, {"distributions"}); ds && ds->is_array())
    for (const json& d : *ds) {
      std::string name = text(d, {"name"});
      std::string version = text(d, {"version"});
      // Two copies of one distribution on sys.path: both versions.
      auto [it, fresh] = g.values.emplace(name, version);
      if (!fresh && it->second != version) it->second += ", " + version;
    }
  return g;
}

FactGroup imports_group(const json& imports) {
  FactGroup g;
  std::string omp;
  if (const json* rts = at(imports, {"openmp_runtimes"}); rts && rts->is_array())
    for (const json& rt : *rts) omp += (omp.empty() ? "" : ", ") + text(rt, {"soname"});
  g.values["OpenMP runtimes"] = omp.empty() ? "none" : omp;
  if (const json* layer = at(imports, {"numba_layer"}); layer && layer->is_string())
    g.values["numba layer"] = layer->get<std::string>();
  if (const json* steps = at(imports, {"steps"}); steps && steps->is_array())
    for (const json& s : *steps)
      if (const json* ok = at(s, {"ok"}); ok && ok->is_boolean() && !ok->get<bool>())
        g.values["import " + text(s, {"module"})] = text(s, {"error"});
  return g;
}

FactGroup environment_group(const json& env) {
  FactGroup g;
  if (const json* vars = at(env, {"variables"}); vars && vars->is_object())
    for (const auto& [name, value] : vars->items())
      if (!rank_identity_variable(name)) g.values[name] = text(&value);
  return g;
}

FactGroup limits_group(const json& host) {
  FactGroup g;
  for (std::string_view l : {"memlock", "nofile", "nproc"}) {
    const json* lim = at(host, {"limits", l});
    if (!lim || lim->is_null()) {
      g.values[std::string(l)] = "unknown";
      continue;
    }
    std::string soft = text(*lim, {"soft"}), hard = text(*lim, {"hard"});
    g.values[std::string(l)] = soft == hard ? soft : soft + " (hard " + hard + ")";
  }
  return g;
}

FactGroup cpu_binding_group(const json& host) {
  FactGroup g;
  g.values["usable CPUs"] = text(host, {"cpus", "usable"});
  const json* quota = at(host, {"cpus", "cgroup", "quota", "cpus"});
  g.values["cgroup quota"] = quota && quota->is_number() ? text(quota) + " CPUs" : "none";
  return g;
}

FactGroup findings_group(const json& doc) {
  FactGroup g;
  const json* fs = at(doc, {"findings"});
  if (!fs || !fs->is_array()) return absent();
  for (const json& f : *fs) {
    std::string key = text(f, {"rule"});
    std::string subject = text(f, {"subject"});
    if (!subject.empty() && subject != "unknown") key += " " + subject;
    std::string value = text(f, {"severity"}) + ": " + text(f, {"message"});
    // The same rule and subject twice: number the later ones.
    std::string k = key;
    for (int n = 2; g.values.count(k); n++) k = key + " #" + std::to_string(n);
    g.values[k] = value;
  }
  return g;
}

}  // namespace

MemberFacts facts_from_check(const json& doc) {
  if (!doc.is_object())
    throw ReportError("not an mldoctor report (the document is not a JSON object)");
  const json* schema = at(doc, {"schema"});
  if (!schema || !schema->is_string() || !schema->get<std::string>().starts_with("mldoctor."))
    throw ReportError(
        "not an mldoctor report (no \"schema\": \"mldoctor.…\" field); write one with `mldoctor "
        "check --json`");
  std::string s = schema->get<std::string>();
  std::string_view kind_prefix = "mldoctor.check/";
  if (!s.starts_with(kind_prefix))
    throw ReportError(
        "a " + s +
        " report, not a check report; diff compares the reports of `mldoctor check --json`");
  std::string major_text = s.substr(kind_prefix.size());
  size_t dot = major_text.find('.');
  if (dot != std::string::npos) major_text.resize(dot);
  int major = 0;
  if (major_text.empty() || major_text.size() > 6 ||
      major_text.find_first_not_of("0123456789") != std::string::npos ||
      (major = std::stoi(major_text)) == 0)
    throw ReportError("schema \"" + s + "\" has no version number this mldoctor can read");
  if (major > 1) {
    std::string by = at(doc, {"version"}) ? " by mldoctor " + text(doc, {"version"}) : "";
    throw ReportError("schema " + s + " (written" + by + ") is newer than this mldoctor reads (" +
                      std::string(kCheckSchema) + "); compare it with that version or newer");
  }
  const json* host = at(doc, {"host"});
  if (!host || !host->is_object()) throw ReportError(s + " report without its \"host\" object");
  const json* py = at(doc, {"python"});
  const json* env = at(doc, {"environment"});
  const json* imports = at(doc, {"imports"});

  MemberFacts m;
  m.tool_version = at(doc, {"version"}) ? text(doc, {"version"}) : "";
  if (const json* h = at(*host, {"hostname"}); h && h->is_string())
    m.node.name = h->get<std::string>();
  if (const json* b = at(*host, {"boot_id"}); b && b->is_string())
    m.node.key = b->get<std::string>();
  if (m.node.key.empty()) m.node.key = m.node.name;

  m.groups = {os_group(*host),
              driver_group(*host),
              gpus_group(*host),
              cpu_group(*host),
              memory_group(*host),
              network_group(*host),
              infiniband_group(*host),
              libraries_group(doc),
              py ? python_group(*py) : absent(),
              py ? packages_group(*py) : absent(),
              py ? distributions_group(*py) : absent(),
              imports ? imports_group(*imports) : absent(),
              env ? environment_group(*env) : absent(),
              limits_group(*host),
              cpu_binding_group(*host),
              findings_group(doc)};
  return m;
}

}  // namespace mld::fleet
