// protocol.cc — what fleet's ranks send each other, as bytes. A digest
// message is ~40 bytes plus one 8-byte digest per group whatever the report
// holds (a report with 400 Python distributions is ~60 KB of JSON); rank 0
// then asks for one copy of each distinct value of each group that differs,
// from the lowest rank holding it. So the bytes gathered grow with the
// number of ranks times the group count, plus the size of what actually
// differs, and never with the full reports. Every message starts with a
// magic and the protocol version, and every read is bounds-checked: ranks of
// two different mldoctor builds in one job get a clear error, not garbage.
#include <algorithm>
#include <cstring>

#include "fleet/fleet.h"

namespace mld::fleet {

namespace {

constexpr u8 kVersion = 1;

class Writer {
 public:
  explicit Writer(char kind) {
    out_ += "MLDF";
    out_ += kind;
    out_ += static_cast<char>(kVersion);
  }
  void u32v(u32 v) {
    for (int i = 0; i < 4; i++) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void u64v(u64 v) {
    for (int i = 0; i < 8; i++) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void str(std::string_view s) {
    u32v(static_cast<u32>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view bytes, char kind, const char* what) : b_(bytes), what_(what) {
    if (b_.size() < 6 || b_.substr(0, 4) != "MLDF" || b_[4] != kind)
      throw ReportError(std::string("fleet: a malformed ") + what + " message");
    if (static_cast<u8>(b_[5]) != kVersion)
      throw ReportError(std::string("fleet: a ") + what + " message of protocol version " +
                        std::to_string(static_cast<u8>(b_[5])) + " (this mldoctor speaks " +
                        std::to_string(kVersion) + "): every rank must run the same mldoctor");
    pos_ = 6;
  }
  u32 u32v() {
    need(4);
    u32 v = 0;
    for (int i = 0; i < 4; i++) v |= u32(static_cast<u8>(b_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  u64 u64v() {
    need(8);
    u64 v = 0;
    for (int i = 0; i < 8; i++) v |= u64(static_cast<u8>(b_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string str() {
    u32 n = u32v();
    need(n);
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of items of at least `min_item` bytes each: bounded by what is left.
  u32 count(size_t min_item) {
    u32 n = u32v();
    if (min_item && n > (b_.size() - pos_) / min_item) fail();
    return n;
  }
  void end() {
    if (pos_ != b_.size()) fail();
  }

 private:
  void need(size_t n) {
    if (b_.size() - pos_ < n) fail();
  }
  [[noreturn]] void fail() {
    throw ReportError(std::string("fleet: a truncated or malformed ") + what_ + " message");
  }
  std::string_view b_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_digests(u32 rank, const MemberFacts& facts) {
  Writer w('D');
  w.u32v(rank);
  w.str(facts.node.key);
  w.str(facts.node.name);
  w.str(facts.tool_version);
  w.u64v(facts.report_bytes);
  w.u32v(static_cast<u32>(facts.groups.size()));
  for (const FactGroup& g : facts.groups) w.u64v(digest(g));
  return w.take();
}

DigestMessage decode_digests(std::string_view bytes) {
  Reader r(bytes, 'D', "digest");
  DigestMessage m;
  m.rank = r.u32v();
  m.node.key = r.str();
  m.node.name = r.str();
  m.tool_version = r.str();
  m.report_bytes = r.u64v();
  u32 n = r.count(8);
  if (n != group_specs().size())
    throw ReportError("fleet: rank " + std::to_string(m.rank) + " sent " + std::to_string(n) +
                      " fact groups, this mldoctor has " + std::to_string(group_specs().size()) +
                      ": every rank must run the same mldoctor");
  for (u32 i = 0; i < n; i++) m.digests.push_back(r.u64v());
  r.end();
  return m;
}

FetchPlan plan_fetch(const std::vector<DigestMessage>& digests) {
  FetchPlan plan;
  if (digests.empty()) return plan;
  FactGroup absent_group;
  absent_group.recorded = false;
  const u64 absent_digest = digest(absent_group);
  const size_t groups = group_specs().size();
  const DigestMessage* root = &digests.front();
  for (const DigestMessage& m : digests)
    if (m.rank < root->rank) root = &m;
  for (size_t g = 0; g < groups; g++) {
    std::map<u64, u32> holder;  // digest → lowest rank
    for (const DigestMessage& m : digests) {
      if (g >= m.digests.size() || m.digests[g] == absent_digest) continue;
      auto [it, fresh] = holder.emplace(m.digests[g], m.rank);
      if (!fresh) it->second = std::min(it->second, m.rank);
    }
    // Rank 0 has its own values; it needs the others' only where they
    // differ from its own.
    bool uniform_own =
        holder.size() == 1 && g < root->digests.size() && holder.begin()->first == root->digests[g];
    if (uniform_own) continue;
    for (const auto& [d, rank] : holder)
      if (rank != root->rank) plan.requests.push_back({rank, g});
  }
  std::sort(plan.requests.begin(), plan.requests.end());
  std::map<std::string, u32> leader;
  for (const DigestMessage& m : digests) {
    std::string key = m.node.key.empty() ? "\x01" + std::to_string(m.rank) : m.node.key;
    auto [it, fresh] = leader.emplace(key, m.rank);
    if (!fresh) it->second = std::min(it->second, m.rank);
  }
  for (const auto& [key, rank] : leader) plan.node_leaders.push_back(rank);
  std::sort(plan.node_leaders.begin(), plan.node_leaders.end());
  return plan;
}

std::string encode_plan(const FetchPlan& plan) {
  Writer w('P');
  w.u32v(static_cast<u32>(plan.requests.size()));
  for (const auto& [rank, group] : plan.requests) {
    w.u32v(rank);
    w.u32v(static_cast<u32>(group));
  }
  w.u32v(static_cast<u32>(plan.node_leaders.size()));
  for (u32 r : plan.node_leaders) w.u32v(r);
  return w.take();
}

FetchPlan decode_plan(std::string_view bytes) {
  Reader r(bytes, 'P', "fetch plan");
  FetchPlan plan;
  u32 n = r.count(8);
  for (u32 i = 0; i < n; i++) {
    u32 rank = r.u32v();
    u32 group = r.u32v();
    if (group >= group_specs().size())
      throw ReportError("fleet: a fetch plan asks for an unknown fact group");
    plan.requests.push_back({rank, group});
  }
  u32 leaders = r.count(4);
  for (u32 i = 0; i < leaders; i++) plan.node_leaders.push_back(r.u32v());
  r.end();
  return plan;
}

std::string encode_details(const FetchPlan& plan, u32 rank, const MemberFacts& facts) {
  std::vector<size_t> wanted;
  for (const auto& [r, g] : plan.requests)
    if (r == rank && g < facts.groups.size()) wanted.push_back(g);
  if (wanted.empty()) return {};
  Writer w('V');
  w.u32v(static_cast<u32>(wanted.size()));
  for (size_t g : wanted) {
    const FactGroup& fg = facts.groups[g];
    w.u32v(static_cast<u32>(g));
    w.u32v(fg.recorded ? 1 : 0);
    w.u32v(static_cast<u32>(fg.values.size()));
    for (const auto& [k, v] : fg.values) {
      w.str(k);
      w.str(v);
    }
  }
  return w.take();
}

std::vector<std::pair<size_t, FactGroup>> decode_details(std::string_view bytes) {
  std::vector<std::pair<size_t, FactGroup>> out;
  if (bytes.empty()) return out;
  Reader r(bytes, 'V', "details");
  u32 n = r.count(12);
  for (u32 i = 0; i < n; i++) {
    u32 g = r.u32v();
    if (g >= group_specs().size()) throw ReportError("fleet: details of an unknown fact group");
    FactGroup fg;
    fg.recorded = r.u32v() != 0;
    u32 values = r.count(8);
    for (u32 j = 0; j < values; j++) {
      std::string k = r.str();
      fg.values[std::move(k)] = r.str();
    }
    out.push_back({g, std::move(fg)});
  }
  r.end();
  return out;
}

Observations assemble(const std::vector<DigestMessage>& digests, const MemberFacts& own,
                      const std::vector<std::string>& answers) {
  Observations obs;
  std::vector<const DigestMessage*> by_rank;
  for (const DigestMessage& m : digests) by_rank.push_back(&m);
  std::sort(by_rank.begin(), by_rank.end(),
            [](const auto* a, const auto* b) { return a->rank < b->rank; });
  for (const DigestMessage* m : by_rank) {
    Member mem;
    mem.label = "rank " + std::to_string(m->rank);
    mem.rank = m->rank;
    mem.node = m->node;
    mem.tool_version = m->tool_version;
    obs.members.push_back(std::move(mem));
    obs.digests.push_back(m->digests);
  }
  obs.clock_offset.resize(obs.members.size());
  for (size_t g = 0; g < own.groups.size(); g++)
    obs.details[{g, digest(own.groups[g])}] = own.groups[g];
  for (size_t i = 0; i < answers.size(); i++) {
    for (auto& answer : decode_details(answers[i])) {
      const size_t g = answer.first;
      FactGroup& fg = answer.second;
      u64 d = digest(fg);
      // The values must be the ones the rank's digest announced.
      bool announced = std::any_of(digests.begin(), digests.end(), [&](const DigestMessage& m) {
        return g < m.digests.size() && m.digests[g] == d;
      });
      if (!announced) throw ReportError("fleet: a rank's details do not match its digests");
      obs.details[{g, d}] = std::move(fg);
    }
  }
  return obs;
}

std::optional<double> clock_offset(const std::vector<ClockSample>& samples) {
  const ClockSample* best = nullptr;
  for (const ClockSample& s : samples)
    if (s.t1 >= s.t0 && (!best || s.t1 - s.t0 < best->t1 - best->t0)) best = &s;
  if (!best) return std::nullopt;
  return best->remote - (best->t0 + best->t1) / 2;
}

}  // namespace mld::fleet
