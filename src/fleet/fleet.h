// fleet.h — comparing many machines and processes of one job: `mldoctor
// fleet` (every MPI rank runs `check`) and `mldoctor diff` (saved
// `check --json` reports).
//
// A report is cut into fact groups (the NVIDIA driver, the native libraries,
// the Python packages, the environment variables...). Node-level groups
// describe the machine and count once per node; process-level groups are
// compared across every member. Each group has a digest, so a fleet of
// thousands of ranks exchanges digests first and the details only of the
// groups whose digests differ, one copy per distinct value (protocol.cc).
//
// Analysis only: nothing here prints or talks MPI; the CLI renders a
// Comparison and drives the protocol over its transport.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "detect/detect.h"
#include "findings/findings.h"
#include "host/host.h"

namespace mld::check {
struct CheckReport;
}

namespace mld::fleet {

// ─── check-document.cc: the document fleet and diff read ──────────────────
// mldoctor.check/1 (docs/json-schema.md) of one check report; `version` is
// the program's.
nlohmann::json check_document(const check::CheckReport& r, std::string_view version);

// ─── facts.cc: fact groups of one report ────────────────────────────────────

enum class Scope { Node, Process };

struct GroupSpec {
  std::string_view name;  // "gpu-driver": the group's id in JSON and the protocol
  Scope scope;
  std::string_view title;  // "NVIDIA driver"
};
// Every group, in protocol order (a group's index is its number on the wire).
const std::vector<GroupSpec>& group_specs();
std::optional<size_t> group_index(std::string_view name);

// One member's view of one group: key → value text. `recorded` is false when
// the report predates the group (an older mldoctor did not collect it): such
// a member is left out of that group's comparison rather than counted as
// different.
struct FactGroup {
  bool recorded = true;
  std::map<std::string, std::string> values;
  bool operator==(const FactGroup&) const = default;
};

// Stable 64-bit digest of a group (FNV-1a over its canonical bytes, then
// a 64-bit finaliser): equal groups, equal digests, on every machine.
u64 digest(const FactGroup& group);

class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The schema `check --json` writes and the newest minor of it this build
// reads ("mldoctor.check/1").
inline constexpr std::string_view kCheckSchema = "mldoctor.check/1";

// The identity of a member's machine.
struct NodeIdentity {
  std::string key;   // the kernel's boot id, else the hostname, else ""
  std::string name;  // the hostname, else ""
};

struct MemberFacts {
  NodeIdentity node;
  u64 report_bytes = 0;           // the size of the report it was cut from
  std::string tool_version;       // "0.2.0", "" when absent
  std::vector<FactGroup> groups;  // one per group_specs() entry
};

// Cuts a `check --json` document into groups. Throws ReportError with a
// message for the user when the document is no check report or has a
// schema this build cannot read (a newer major version).
MemberFacts facts_from_check(const nlohmann::json& doc);

// ─── launcher.cc: who started this rank, read before MPI_Init ──────────────

enum class LauncherKind { None, Mpirun, Pmix, SrunWithoutPmix, NoLauncher };

struct Launcher {
  LauncherKind kind = LauncherKind::None;
  std::string name;     // "srun with PMIx", "mpirun (Open MPI)", ...
  std::string problem;  // non-empty: MPI_Init cannot reach this launcher, and why
  // The ranks the launcher announced, and the variable that said so
  // ("SLURM_NTASKS=2"); nullopt when none did.
  std::optional<u32> world_size;
  std::string world_size_source;
};

// `pmi_components`: the Open MPI pmix components the plugin's MPI has
// (open_mpi_pmi_components), nullopt when unknown (another MPI, or
// components linked into libmpi).
Launcher detect_launcher(const host::Host& host,
                         const std::optional<std::vector<std::string>>& pmi_components);
// The names of the mca_pmix_*.so beside the Open MPI whose libmpi is at
// `libmpi` ("ext3x", "flux", "isolated"; "s1", "s2" where it speaks PMI-1/2).
std::optional<std::vector<std::string>> open_mpi_pmi_components(const host::Host& host,
                                                                std::string_view libmpi);
// How to start fleet so that MPI_Init reaches every rank.
std::string launcher_advice();
// The message when MPI's world contradicts the launcher's count; nullopt
// when it agrees or nothing announced a count.
std::optional<std::string> world_size_problem(const Launcher& l, u32 size);
// Whether a launcher started this process (its stdout may be a pty that
// the launcher forwards into a file: colour is no guide to a person there).
bool under_launcher(const host::Host& host);

// ─── compare.cc: what differs, and where ────────────────────────────────────

struct Member {
  std::string label;  // "rank 3", "node-b.json"
  std::optional<u32> rank;
  NodeIdentity node;
  std::string tool_version;
};

// What the comparer knows: every member's digest of every group, and the
// values behind the digests it has fetched (at least one per digest of a
// group that differs; for a uniform group one copy, or none).
struct Observations {
  std::vector<Member> members;
  std::vector<std::vector<u64>> digests;                // [member][group]
  std::map<std::pair<size_t, u64>, FactGroup> details;  // (group, digest) → values
  // Clock offset of each member's node from the first member's, in seconds
  // (fleet only; nullopt where not measured).
  std::vector<std::optional<double>> clock_offset;
};

// A distinct value of a group and the members that hold it.
struct Variant {
  u64 digest = 0;
  const FactGroup* group = nullptr;  // into Observations::details
  std::vector<size_t> members;
};

// One key of a differing group: each value (nullopt: the key is absent)
// and the members that have it.
struct KeyDifference {
  std::string key;
  std::vector<std::pair<std::optional<std::string>, std::vector<size_t>>> values;
};

struct GroupComparison {
  size_t group = 0;                  // index into group_specs()
  std::vector<Variant> variants;     // most members first
  std::vector<size_t> not_recorded;  // members whose report lacks the group
  std::vector<KeyDifference> keys;   // only when there are several variants
  bool differs() const { return variants.size() > 1; }
};

struct Node {
  NodeIdentity identity;
  std::vector<size_t> members;
};

struct Comparison {
  std::vector<Node> nodes;                 // in order of first member
  std::vector<size_t> node_of_member;      // index into nodes
  std::vector<GroupComparison> groups;     // one per group_specs() entry
  std::vector<std::string> tool_versions;  // distinct, in first-seen order
  // The largest clock offset between nodes (fleet), seconds.
  std::optional<double> max_clock_offset;
  std::vector<Finding> findings;  // the FLEET rules' findings, errors first
};

// Throws std::logic_error when a differing group lacks a variant's details.
// The findings are the fact detectors' over comparison_facts().
Comparison compare(const Observations& obs);

// What differs, as the detectors read it: each differing group with its
// differing keys and their holders, and every node's clock offset.
detect::FleetFacts comparison_facts(const Comparison& c, const Observations& obs);

// "node-a, node-b" / "node[01-04], node07" for whole nodes, with
// "(ranks 1,3)" / "(2 of 4 reports)" where only some of a node's members
// are meant; at most `limit` entries, then "and N more".
std::string describe_members(const Comparison& c, const Observations& obs,
                             const std::vector<size_t>& members, size_t limit = 8);
// The parts of that description, all of them.
std::vector<std::string> member_parts(const Comparison& c, const Observations& obs,
                                      const std::vector<size_t>& members);
// Slurm-style host list: "gpu[001-004,009],login1".
std::string compress_host_list(std::vector<std::string> names);

// ─── protocol.cc: digests first, details for what differs ───────────────────
//
// Every step is a pure function over byte strings, so the transport (MPI
// gathers and broadcasts in the CLI, plain loops in the tests) only moves
// bytes and the tests count exactly what a real run sends.
//   1. every rank:  encode_digests(own facts)        → gathered at rank 0
//   2. rank 0:      plan_fetch(all digest messages)  → broadcast
//   3. every rank:  encode_details(plan, own facts)  → gathered at rank 0
//   4. rank 0:      assemble(...)                    → Observations

struct DigestMessage {
  u32 rank = 0;
  NodeIdentity node;
  std::string tool_version;
  u64 report_bytes = 0;      // what sending the whole report would have cost
  std::vector<u64> digests;  // one per group_specs() entry
};
std::string encode_digests(u32 rank, const MemberFacts& facts);
DigestMessage decode_digests(std::string_view bytes);  // throws ReportError

// What rank 0 asks for: for each group whose digests differ, each distinct
// digest from the lowest rank that holds it. Also names every node's
// lowest rank (its leader, which answers the clock probe).
struct FetchPlan {
  std::vector<std::pair<u32, size_t>> requests;  // (rank, group), sorted by rank
  std::vector<u32> node_leaders;                 // sorted
};
FetchPlan plan_fetch(const std::vector<DigestMessage>& digests);
std::string encode_plan(const FetchPlan& plan);
FetchPlan decode_plan(std::string_view bytes);

// The groups `plan` asks `rank` for (empty string when none).
std::string encode_details(const FetchPlan& plan, u32 rank, const MemberFacts& facts);
// (group, values) pairs of one rank's answer.
std::vector<std::pair<size_t, FactGroup>> decode_details(std::string_view bytes);

// Rank 0's observations: `own` supplies the values of groups nobody was
// asked for (uniform ones), `answers[r]` is rank r's encode_details.
Observations assemble(const std::vector<DigestMessage>& digests, const MemberFacts& own,
                      const std::vector<std::string>& answers);

// Clock offset from two probes of the remote clock: rank 0 reads t0, the
// peer answers its clock tr, rank 0 reads t1 (Cristian's algorithm);
// the sample with the shortest round trip wins.
struct ClockSample {
  double t0 = 0, remote = 0, t1 = 0;
};
std::optional<double> clock_offset(const std::vector<ClockSample>& samples);

}  // namespace mld::fleet
