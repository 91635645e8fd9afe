// static-tls.cc — the static TLS area of a process as glibc's ld.so sizes it,
// lays it out at startup and hands it out to dlopen()ed modules.
//
// Every thread gets one contiguous static TLS block, sized once at startup:
// the TLS of the modules loaded at startup plus a fixed surplus. A module
// dlopen()ed later whose code uses the initial-exec TLS model (an
// R_X86_64_TPOFF64 or R_AARCH64_TLS_TPREL relocation) must be placed in that
// surplus, because the code adds a constant to the thread pointer; when the
// surplus is used up the dlopen fails with "cannot allocate memory in static
// TLS block" (the classic `import cv2` after `import torch` failure).
//
// Modelled on glibc:
//   * elf/dl-tls.c _dl_tls_static_surplus_init (2.32+): surplus =
//     (nns-1)*LIBC_IE_TLS + nns*OTHER_IE_TLS + optional + LEGACY_TLS with
//     nns = min(glibc.rtld.nns, DL_NNS) + naudit; up to 2.31 the constant
//     TLS_STATIC_SURPLUS = 64 + DL_NNS*100 = 1664.
//   * elf/dl-tls.c _dl_determine_tlsoffset: the startup layout, for
//     TLS_TCB_AT_TP (x86: blocks below the thread pointer, the TCB above)
//     and TLS_DTV_AT_TP (aarch64: a 16-byte tcbhead_t, then the blocks),
//     including the reuse of alignment gaps (freetop/freebottom) and, from
//     2.41, the rseq "extra TLS" block (sysdeps/unix/sysv/linux/dl-extra_tls.h).
//   * elf/dl-reloc.c _dl_try_allocate_static_tls: dlopen-time allocation
//     with the optional (TLSDESC) budget of 2.32+.
//   * elf/dl-close.c _dl_close_worker: reclaiming static TLS, which works
//     only for a chunk that ends exactly at GL(dl_tls_static_used).
//   * elf/dl-tunables.c parse_tunables: GLIBC_TUNABLES as each release
//     parses it (two parser generations: up to 2.38 and from 2.39).
//   * Distribution backports of 2.32's accounting to an older release: Debian
//     11's glibc 2.31 (debian/patches/any/git-surplus-tls-accounting.diff,
//     Debian bug #964141) has the nns/optional_static_tls surplus, the
//     audit modules' share, the TLSDESC budget and both tunables, as of
//     upstream ffb17e7ba3: LIBC_IE_TLS was still 192 there and there was no
//     LEGACY_TLS term (07ed32f920 made them 144 and 1664 - the formula
//     before 2.32 was released). Same 1664 bytes by default; 48 bytes more
//     per namespace above 4 and less below (nns or audit modules). Upstream's
//     release/2.31/master has none of it, so the release number cannot
//     tell: the analysed machine's own ld.so is read (see for_process).
//
// Unsigned arithmetic wraps exactly where glibc's size_t arithmetic wraps;
// alignments of 0 are read as 1 (glibc would divide by zero), so a malformed
// PT_TLS can give odd numbers but never a crash.
#include <algorithm>
#include <limits>

#include "loader/loader.h"

namespace mld::loader {

namespace {

// elf/dl-tls.c (2.32+) and sysdeps/generic/ldsodefs.h.
constexpr u64 kDlNns = 16;               // DL_NNS
constexpr u64 kLibcIeTls = 144;          // LIBC_IE_TLS
constexpr u64 kOtherIeTls = 144;         // OTHER_IE_TLS
constexpr u64 kLegacySurplus = 1664;     // TLS_STATIC_SURPLUS up to 2.31
constexpr u64 kBackportLibcIeTls = 192;  // LIBC_IE_TLS in 0c7b002fac..ffb17e7ba3
// NO_TLS_OFFSET (include/link.h) is 0 on every architecture modelled here;
// dl-close.c uses it as the "no chunk yet" marker.
constexpr u64 kNoTlsOffset = 0;
// The rseq area appended to the startup layout from 2.41: at least
// RSEQ_AREA_SIZE_INITIAL (32) bytes aligned to RSEQ_MIN_ALIGN (32). Kernels
// that report a larger AT_RSEQ_FEATURE_SIZE get a larger block; 32 is what
// every kernel up to 6.x reports in practice.
constexpr u64 kExtraTlsSize = 32, kExtraTlsAlign = 32;

// sys/param.h roundup (division form: works for any y > 0).
u64 roundup(u64 x, u64 y) { return y == 0 ? x : (x + (y - 1)) / y * y; }
// libc-pointer-arith.h ALIGN_UP (mask form: power-of-two alignments).
u64 align_up(u64 x, u64 a) { return a == 0 ? x : (x + a - 1) & (0 - a); }
u64 align_of(const TlsBlock& b) { return b.align == 0 ? 1 : b.align; }

// sizeof (struct pthread) for x86 (TLS_TCB_SIZE there). It only moves
// static_size, never the room left for dlopen. 2.36 x86_64 measured on the
// project machine (_thread_db_sizeof_pthread = 2368, and static_size 4224 =
// 1856 + 2368); older values from compiler-rt's ThreadDescriptorSizeFallback.
u64 x86_tcb_size(u16 machine, GlibcVersion g) {
  bool is64 = machine == elf::EM_X86_64;
  if (g < GlibcVersion{2, 32}) return is64 ? 2304 : 1216;
  if (g < GlibcVersion{2, 35}) return is64 ? 2496 : 1344;
  return is64 ? 2368 : 1344;  // i386 2.35+: not measured, 2.32's value kept
}

// A tunable of the rtld namespace, and since when it exists.
struct RtldTunable {
  std::string_view name;
  GlibcVersion since;
};
constexpr RtldTunable kRtldTunables[] = {
    {"glibc.rtld.nns", {2, 32}},          {"glibc.rtld.optional_static_tls", {2, 32}},
    {"glibc.rtld.dynamic_sort", {2, 35}}, {"glibc.rtld.enable_secure", {2, 40}},
    {"glibc.rtld.execstack", {2, 41}},
};

}  // namespace

std::string to_string(GlibcVersion g) {
  return std::to_string(g.major) + "." + std::to_string(g.minor);
}

namespace {

// elf/dl-misc.c _dl_strtoul: blanks, a sign, then 0x.. hex, 0.. octal or
// decimal; stops at the first other character; saturates at UINT64_MAX; a
// minus sign negates modulo 2^64. `*end` is where it stopped.
u64 dl_strtoul(std::string_view s, size_t* end) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) i++;
  bool negative = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
  if (i >= s.size() || s[i] < '0' || s[i] > '9') {
    *end = i;
    return 0;
  }
  u64 base = 10;
  char max_digit = '9';
  if (s[i] == '0') {
    if (i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
      base = 16;
      i += 2;
    } else {
      base = 8;
      max_digit = '7';
    }
  }
  u64 result = 0;
  for (; i < s.size(); i++) {
    u64 digit;
    char c = s[i];
    if (c >= '0' && c <= max_digit) {
      digit = static_cast<u64>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = static_cast<u64>(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      digit = static_cast<u64>(c - 'A' + 10);
    } else {
      break;
    }
    if (result >= (std::numeric_limits<u64>::max() - digit) / base) {
      *end = i;
      return std::numeric_limits<u64>::max();
    }
    result = result * base + digit;
  }
  *end = i;
  return negative ? 0 - result : result;
}

// One name=value item of GLIBC_TUNABLES.
struct TunableItem {
  std::string_view name;
  std::string_view value;
};

// The program interpreter a machine's programs name (PT_INTERP).
std::string_view standard_interpreter(u16 e_machine) {
  switch (e_machine) {
    case elf::EM_X86_64: return "/lib64/ld-linux-x86-64.so.2";
    case elf::EM_AARCH64: return "/lib/ld-linux-aarch64.so.1";
    case elf::EM_386: return "/lib/ld-linux.so.2";
    default: return {};
  }
}

// Whether `glibc` (before 2.32) is the analysed machine's own release and its
// ld.so carries 2.32's static TLS accounting anyway (a distribution backport,
// as Debian 11's 2.31): that ld.so defines the glibc.rtld.optional_static_tls
// tunable, whose name is in its tunable list. A release given with --glibc
// that is not the machine's is modelled as upstream has it.
bool has_backported_surplus(const host::Host& host, u16 e_machine, GlibcVersion glibc) {
  std::string_view interp = standard_interpreter(e_machine);
  if (interp.empty()) return false;
  SearchConfig config = SearchConfig::for_host(host, e_machine, e_machine != elf::EM_386, glibc);
  if (detect_glibc_version(host, config.system_dirs) != glibc) return false;
  std::optional<std::string> ldso = host.read_file(interp, 8 << 20);
  return ldso && ldso->find("glibc.rtld.optional_static_tls") != std::string::npos;
}

}  // namespace

// ─── Parameters ─────────────────────────────────────────────────────────────

std::optional<StaticTlsParams> StaticTlsParams::for_process(const host::Host& host, u16 e_machine,
                                                            GlibcVersion glibc,
                                                            std::vector<std::string>* notes) {
  std::optional<StaticTlsParams> params = for_machine(e_machine, glibc);
  if (!params) return params;
  // A backport keeps the release's own TCB size and follows 2.32 in the
  // budget, the tunables and a tunables fix to offer; surplus() has its
  // constants.
  if (glibc < GlibcVersion{2, 32} && has_backported_surplus(host, e_machine, glibc))
    params->surplus_backport = true;
  if (std::optional<std::string> t = host.getenv("GLIBC_TUNABLES")) {
    std::vector<std::string> n = params->apply_tunables(*t);
    if (notes) notes->insert(notes->end(), n.begin(), n.end());
  }
  // One audit module per non-empty ':'-separated LD_AUDIT entry.
  if (std::optional<std::string> a = host.getenv("LD_AUDIT")) {
    for (size_t i = 0; i < a->size();) {
      size_t j = a->find(':', i);
      if (j == std::string::npos) j = a->size();
      if (j > i) params->naudit++;
      i = j + 1;
    }
  }
  return params;
}

std::optional<StaticTlsParams> StaticTlsParams::for_machine(u16 e_machine, GlibcVersion glibc) {
  StaticTlsParams p;
  p.glibc = glibc;
  switch (e_machine) {
    case elf::EM_X86_64:
    case elf::EM_386:
      // sysdeps/x86_64|i386/nptl/tls.h: TLS_TCB_AT_TP, TLS_TCB_SIZE =
      // sizeof (struct pthread); sysdeps/x86/nptl/pthreaddef.h:
      // TCB_ALIGNMENT 64 (before 2.35 the code used TLS_TCB_ALIGN =
      // __alignof__ (struct pthread), which is the same 64).
      p.abi = TlsAbi::TcbAtTp;
      p.tcb_size = x86_tcb_size(e_machine, glibc);
      p.tcb_alignment = 64;
      return p;
    case elf::EM_AARCH64:
      // sysdeps/aarch64/nptl/tls.h: TLS_DTV_AT_TP, TLS_TCB_SIZE =
      // sizeof (tcbhead_t) = 16. TCB_ALIGNMENT was 16 until 2.34 and is the
      // generic 32 from 2.35 (23c77f6018, for the rseq area).
      p.abi = TlsAbi::DtvAtTp;
      p.tcb_size = 16;
      p.tcb_alignment = glibc >= GlibcVersion{2, 35} ? 32 : 16;
      return p;
    default: return std::nullopt;
  }
}

std::vector<std::string> StaticTlsParams::apply_tunables(std::string_view value) {
  std::vector<std::string> notes;
  if (glibc < GlibcVersion{2, 26}) {
    if (!value.empty())
      notes.push_back("glibc " + to_string(glibc) +
                      " has no GLIBC_TUNABLES (added in 2.26); ignored");
    return notes;
  }
  const bool new_parser = glibc >= GlibcVersion{2, 39};
  // Split the string the way parse_tunables does. A name runs to '=', ':'
  // or the end; a name ended by ':' is skipped; a name that reaches the end
  // stops the parse (2.39+: the whole string is then invalid). The value
  // runs to ':' (2.39+: also to '=', which makes the string invalid).
  std::vector<TunableItem> items;
  size_t p = 0;
  bool invalid = false;
  while (!value.empty()) {
    size_t name_start = p;
    while (p < value.size() && value[p] != '=' && value[p] != ':') p++;
    if (p >= value.size()) {
      if (new_parser) {
        invalid = true;
      } else if (p > name_start) {
        notes.push_back("GLIBC_TUNABLES: `" + std::string(value.substr(name_start)) +
                        "' has no value; glibc stops reading here");
      }
      break;
    }
    if (value[p] == ':') {
      p++;
      continue;
    }
    std::string_view name = value.substr(name_start, p - name_start);
    size_t value_start = ++p;
    while (p < value.size() && value[p] != ':' && !(new_parser && value[p] == '=')) p++;
    if (p < value.size() && value[p] == '=') {
      invalid = true;
      break;
    }
    items.push_back({name, value.substr(value_start, p - value_start)});
    if (p >= value.size()) break;
    p++;
  }
  if (invalid) {
    notes.push_back("GLIBC_TUNABLES is malformed; glibc " + to_string(glibc) +
                    " prints \"invalid GLIBC_TUNABLES\" and ignores all of it");
    return notes;
  }
  // 2.40+ keeps only the last occurrence of each tunable (the array is
  // indexed by tunable); earlier releases apply every occurrence in order.
  if (glibc >= GlibcVersion{2, 40}) {
    std::vector<TunableItem> last;
    for (size_t i = 0; i < items.size(); i++) {
      bool later = false;
      for (size_t j = i + 1; j < items.size(); j++) later |= items[j].name == items[i].name;
      if (!later) last.push_back(items[i]);
    }
    items = std::move(last);
  }
  for (const TunableItem& it : items) {
    std::string item = std::string(it.name) + "=" + std::string(it.value);
    const RtldTunable* known = nullptr;
    for (const RtldTunable& t : kRtldTunables)
      if (t.name == it.name) known = &t;
    if (!known) {
      if (it.name.substr(0, 11) == "glibc.rtld.")
        notes.push_back(item + ": not a tunable of glibc " + to_string(glibc) + "; ignored");
      continue;
    }
    const bool backported = surplus_backport && known->since == GlibcVersion{2, 32};
    if (glibc < known->since && !backported) {
      notes.push_back(item + ": " + std::string(it.name) + " exists only from glibc " +
                      to_string(known->since) + "; ignored");
      continue;
    }
    bool is_nns = it.name == "glibc.rtld.nns";
    if (!is_nns && it.name != "glibc.rtld.optional_static_tls") continue;
    size_t end = 0;
    u64 v = dl_strtoul(it.value, &end);
    if (new_parser && end != it.value.size()) {
      notes.push_back(item + ": not a number; glibc warns and ignores it");
      continue;
    }
    if (is_nns) {
      // dl-tunables.list: nns is SIZE_T with minval 1, maxval 16.
      if (v < 1 || v > kDlNns) {
        notes.push_back(
            item + ": outside 1..16; glibc ignores it and keeps nns=" + std::to_string(rtld_nns));
        continue;
      }
      rtld_nns = v;
    } else {
      // optional_static_tls: SIZE_T, minval 0, no maxval: every value fits.
      optional_static_tls = v;
      if (v > 0x7fffffffu - 2048)
        notes.push_back(item + ": glibc adds this in int arithmetic; the surplus becomes " +
                        std::to_string(static_cast<i64>(surplus())) + " bytes");
    }
    if (end != it.value.size())
      notes.push_back(item + ": glibc reads only the leading number (" + std::to_string(v) + ")");
  }
  return notes;
}

u64 StaticTlsParams::surplus() const {
  if (!surplus_accounting()) return kLegacySurplus;
  if (surplus_backport) {
    // ffb17e7ba3's _dl_tls_static_surplus_init, in size_t arithmetic.
    const u64 nns = std::min(rtld_nns, kDlNns) + naudit;
    return (nns - 1) * kBackportLibcIeTls + nns * kOtherIeTls + optional_static_tls;
  }
  // _dl_tls_static_surplus_init. glibc aborts the process when DL_NNS - nns
  // < naudit ("Failed loading N audit modules"); the number is still the
  // formula's. tls_static_surplus() computes in int, so a huge
  // optional_static_tls wraps there exactly as modelled here.
  u64 nns = std::min(rtld_nns, kDlNns) + naudit;
  auto tls_static_surplus = [](u64 n, u64 opt) {
    u32 v = static_cast<u32>((n - 1) * kLibcIeTls + n * kOtherIeTls + static_cast<u32>(opt));
    return static_cast<i64>(static_cast<i32>(v));
  };
  const i64 legacy = static_cast<i64>(kLegacySurplus) - tls_static_surplus(4, 512);  // 144
  i64 total = static_cast<i64>(
      static_cast<i32>(static_cast<u32>(tls_static_surplus(nns, optional_static_tls) + legacy)));
  return static_cast<u64>(total);
}

// ─── The arena ──────────────────────────────────────────────────────────────

StaticTlsArena::StaticTlsArena(const StaticTlsParams& params,
                               const std::vector<TlsBlock>& startup_modules)
    : params_(params) {
  u64 max_align = params.tcb_alignment;
  u64 freetop = 0, freebottom = 0;
  const bool extra_tls = params.glibc >= GlibcVersion{2, 41};
  u64 offset = 0;
  u64 nmods = 0;
  if (params.abi == TlsAbi::TcbAtTp) {
    // Blocks grow downwards from the TCB; `off` is each block's distance
    // below the thread pointer. An alignment gap left above a block
    // ([freetop, freebottom)) is offered to later, smaller blocks.
    for (const TlsBlock& b : startup_modules) {
      if (b.blocksize == 0) continue;
      nmods++;
      const u64 align = align_of(b);
      const u64 firstbyte = (0 - b.firstbyte_offset) & (align - 1);
      max_align = std::max(max_align, b.align);
      if (freebottom - freetop >= b.blocksize) {
        u64 off = roundup(freetop + b.blocksize - firstbyte, align) + firstbyte;
        if (off <= freebottom) {
          freetop = off;
          continue;
        }
      }
      u64 off = roundup(offset + b.blocksize - firstbyte, align) + firstbyte;
      if (off > offset + b.blocksize + (freebottom - freetop)) {
        freetop = offset;
        freebottom = off - b.blocksize;
      }
      offset = off;
    }
    if (extra_tls) {
      max_align = std::max(max_align, kExtraTlsAlign);
      offset = roundup(offset, kExtraTlsAlign) + kExtraTlsSize;
    }
    used_ = offset;
    static_size_ = roundup(offset + params.surplus(), max_align) + params.tcb_size;
  } else {
    // Blocks grow upwards after the TCB; a gap before a block
    // ([freebottom, freetop)) is offered to later blocks.
    offset = params.tcb_size;
    for (const TlsBlock& b : startup_modules) {
      if (b.blocksize == 0) continue;
      nmods++;
      const u64 align = align_of(b);
      const u64 firstbyte = (0 - b.firstbyte_offset) & (align - 1);
      max_align = std::max(max_align, b.align);
      if (b.blocksize <= freetop - freebottom) {
        u64 off = roundup(freebottom, align);
        if (off - freebottom < firstbyte) off += align;
        if (off + b.blocksize - firstbyte <= freetop) {
          freebottom = off + b.blocksize - firstbyte;
          continue;
        }
      }
      u64 off = roundup(offset, align);
      if (off - offset < firstbyte) off += align;
      if (off - firstbyte - offset > freetop - freebottom) {
        freebottom = offset;
        freetop = off - firstbyte;
      }
      offset = off + b.blocksize - firstbyte;
    }
    if (extra_tls) {
      max_align = std::max(max_align, kExtraTlsAlign);
      offset = roundup(offset, kExtraTlsAlign) + kExtraTlsSize;
    }
    used_ = offset;
    static_size_ = roundup(offset + params.surplus(), params.tcb_alignment);
  }
  static_align_ = max_align;
  // Up to 2.31 there is no optional budget: TLSDESC may take everything.
  optional_left_ =
      params.surplus_accounting() ? params.optional_static_tls : std::numeric_limits<u64>::max();
  next_modid_ = nmods + 1;
}

u64 StaticTlsArena::bytes_left() const {
  if (static_size_ < used_) return 0;
  u64 free = static_size_ - used_;
  if (params_.abi == TlsAbi::TcbAtTp) return free < params_.tcb_size ? 0 : free - params_.tcb_size;
  return free;
}

std::optional<u64> StaticTlsArena::bytes_needed(const TlsBlock& block) const {
  if (block.align > static_align_) return std::nullopt;
  if (params_.abi == TlsAbi::TcbAtTp) return block.blocksize + block.firstbyte_offset;
  u64 offset = align_up(used_ - block.firstbyte_offset, align_of(block)) + block.firstbyte_offset;
  return offset + block.blocksize - used_;
}

std::optional<u64> StaticTlsArena::try_allocate(const TlsBlock& block, bool optional) {
  // The alignment test comes first, before any room is considered.
  if (block.align > static_align_) return std::nullopt;
  const bool budget = optional && params_.surplus_accounting();
  const u64 align = align_of(block);
  if (params_.abi == TlsAbi::TcbAtTp) {
    // Place the block as high (as close to the TCB's side of the free
    // space) as its alignment allows: `use` is blocksize plus the
    // alignment slack, and the new used() is the block's offset.
    u64 freebytes = static_size_ - used_;
    if (static_size_ < used_ || freebytes < params_.tcb_size) return std::nullopt;
    freebytes -= params_.tcb_size;
    std::optional<u64> blsize = checked_add(block.blocksize, block.firstbyte_offset);
    if (!blsize || freebytes < *blsize) return std::nullopt;
    u64 n = (freebytes - *blsize) / align;
    u64 use = freebytes - n * align - block.firstbyte_offset;
    if (budget) {
      if (use > optional_left_) return std::nullopt;
      optional_left_ -= use;
    }
    used_ += use;
    return used_;
  }
  u64 offset = align_up(used_ - block.firstbyte_offset, align) + block.firstbyte_offset;
  std::optional<u64> new_used = checked_add(offset, block.blocksize);
  if (!new_used || *new_used > static_size_) return std::nullopt;
  u64 use = *new_used - used_;
  if (budget) {
    if (use > optional_left_) return std::nullopt;
    optional_left_ -= use;
  }
  used_ = *new_used;
  return offset;
}

void StaticTlsArena::release(const TlsBlock& block, u64 offset, u64 used_before) {
  release_all({Released{block, offset, used_before}});
}

void StaticTlsArena::release_all(const std::vector<Released>& freed) {
  // _dl_close_worker collects one contiguous chunk [tls_free_start,
  // tls_free_end) over the removed modules, trying to free a block that is
  // not contiguous right away when it ends at used(); at the end the chunk
  // is reclaimed if it ends at used(). On x86 a chunk is [offset-blocksize,
  // offset): the alignment slack below a block is never given back. On
  // aarch64 l_tls_firstbyte_offset holds used() from before the allocation,
  // so the slack is given back with the block.
  u64 start = kNoTlsOffset, end = kNoTlsOffset;
  bool any = false;
  for (const Released& r : freed) {
    if (r.block.blocksize == 0) continue;
    any = true;
    if (params_.abi == TlsAbi::TcbAtTp) {
      const u64 off = r.offset, bs = r.block.blocksize;
      if (start == kNoTlsOffset || off == start) {
        start = off - bs;
        if (end == kNoTlsOffset) end = off;
      } else if (off - bs == end) {
        end = off;
      } else if (end == used_) {
        used_ = start;
        end = off;
        start = end - bs;
      } else if (off == used_) {
        used_ = off - bs;
      } else if (end < off) {
        end = off;
        start = end - bs;
      }
    } else {
      const u64 lo = r.used_before, hi = r.offset + r.block.blocksize;
      if (start == kNoTlsOffset) {
        start = lo;
        end = hi;
      } else if (lo == end) {
        end = hi;
      } else if (hi == start) {
        start = lo;
      } else if (hi == used_) {
        used_ = lo;
      } else if (end == used_) {
        used_ = start;
        start = lo;
        end = hi;
      } else if (end < lo) {
        start = lo;
        end = hi;
      }
    }
  }
  if (any && end == used_) used_ = start;
}

// GLIBC_TUNABLES with the static TLS item of the fix in place of any it had.
std::string merge_glibc_tunables(const std::optional<std::string>& current,
                                 const std::string& item) {
  if (!current || current->empty()) return item;
  const std::string key = item.substr(0, item.find('='));
  std::string out;
  size_t i = 0;
  while (i <= current->size()) {
    size_t j = current->find(':', i);
    if (j == std::string::npos) j = current->size();
    std::string part = current->substr(i, j - i);
    if (!part.empty() && part.substr(0, part.find('=')) != key)
      out += (out.empty() ? "" : ":") + part;
    i = j + 1;
  }
  return out + (out.empty() ? "" : ":") + item;
}

}  // namespace mld::loader
