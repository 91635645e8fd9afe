// text.cc — what a log line looks like to a human and to the matcher: ANSI
// escapes removed (a coloured "[31mNCCL WARN" must still match), the '\r'
// segment of a progress bar that holds the message, bytes that are not
// printable UTF-8 shown as \xNN so a report never carries terminal controls,
// and the rank prefix that launchers (torchrun --tee, srun --label) add.
#include <cstring>
#include <memory>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "logs/logs-internal.h"

namespace mld::logs {

size_t strip_ansi_to(ByteView in, char* out) {
  const char* p = reinterpret_cast<const char*>(in.data());
  const char* end = p + in.size();
  // Runs between escapes are copied straight into the caller's room: a
  // coloured log has a few escapes per line, and a string append per run
  // cost more than the bytes it copied.
  char* w = out;
  while (p < end) {
    const char* esc = static_cast<const char*>(std::memchr(p, 0x1b, static_cast<size_t>(end - p)));
    const char* stop = esc ? esc : end;
    std::memcpy(w, p, static_cast<size_t>(stop - p));
    w += stop - p;
    if (!esc) break;
    p = esc + 1;
    if (p >= end) break;
    if (*p == '[') {  // CSI: parameters 0x30-0x3f, intermediates 0x20-0x2f, final 0x40-0x7e
      p++;
      while (p < end && *p >= 0x20 && *p <= 0x3f) p++;
      if (p < end && *p >= 0x40 && *p <= 0x7e) p++;
    } else if (*p == ']') {  // OSC: up to BEL or ESC backslash, never past a newline
      p++;
      while (p < end && *p != '\a' && *p != '\n' && !(*p == 0x1b && p + 1 < end && p[1] == '\\'))
        p++;
      if (p < end && *p == '\a')
        p++;
      else if (p < end && *p == 0x1b)
        p += 2;
    } else {
      // nF (intermediates 0x20-0x2f, then a final byte: tput sgr0's
      // "ESC ( B") and two-byte escapes ("ESC 7").
      while (p < end && *p >= 0x20 && *p <= 0x2f) p++;
      if (p < end && *p >= 0x30 && *p <= 0x7e) p++;
    }
  }
  return static_cast<size_t>(w - out);
}

void strip_ansi(ByteView in, std::string& out) {
  std::unique_ptr<char[]> room(new char[in.size()]);
  out.append(room.get(), strip_ansi_to(in, room.get()));
}

u64 count_newlines(std::string_view data) {
  const char* p = data.data();
  const char* end = p + data.size();
  u64 n = 0;
#if defined(__SSE2__)
  // Byte counters: subtracting the 0xff of each match, at most 255 rounds,
  // then summed with SAD. No popcount instruction needed (baseline x86-64).
  // Four vectors per round, so the loop's own instructions are paid once
  // per 64 bytes: this runs over every byte of the log.
  const __m128i nl = _mm_set1_epi8('\n');
  const __m128i zero = _mm_setzero_si128();
  auto matches = [&](const char* at) {
    return _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)), nl);
  };
  while (end - p >= 16) {
    __m128i acc = zero;
    int rounds = 0;
    while (end - p >= 64 && rounds < 252) {
      acc = _mm_sub_epi8(acc, matches(p));
      acc = _mm_sub_epi8(acc, matches(p + 16));
      acc = _mm_sub_epi8(acc, matches(p + 32));
      acc = _mm_sub_epi8(acc, matches(p + 48));
      p += 64;
      rounds += 4;
    }
    while (end - p >= 16 && rounds < 255) {
      acc = _mm_sub_epi8(acc, matches(p));
      p += 16;
      rounds++;
    }
    __m128i sums = _mm_sad_epu8(acc, zero);
    n += static_cast<u64>(_mm_cvtsi128_si64(sums)) +
         static_cast<u64>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  for (; p < end; p++) n += *p == '\n';
  return n;
}

std::optional<u32> line_rank(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') i++;
  auto digits = [&](size_t at, size_t* after) -> std::optional<u32> {
    u64 v = 0;
    size_t j = at;
    while (j < line.size() && j - at < 7 && line[j] >= '0' && line[j] <= '9')
      v = v * 10 + static_cast<u64>(line[j++] - '0');
    if (j == at) return std::nullopt;
    *after = j;
    return static_cast<u32>(v);
  };
  size_t after = 0;
  std::string_view rest = line.substr(i);
  for (std::string_view prefix : {"[rank", "[default", "rank"}) {
    if (rest.starts_with(prefix)) {
      auto r = digits(i + prefix.size(), &after);
      if (!r) return std::nullopt;
      if (prefix[0] == '[') {
        if (after < line.size() && line[after] == ']' && after + 1 < line.size() &&
            line[after + 1] == ':')
          return r;
        return std::nullopt;
      }
      return after < line.size() && line[after] == ':' ? r : std::nullopt;
    }
  }
  // srun --label: "3: text"
  if (auto r = digits(i, &after);
      r && after + 1 < line.size() && line[after] == ':' && line[after + 1] == ' ')
    return r;
  return std::nullopt;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_length(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  if (n == 2 && b < 0xc2) return 0;  // overlong
  return n;
}

}  // namespace

std::string printable_line(std::string_view line, size_t focus, size_t max_bytes) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (focus > line.size()) focus = line.size();
  // The '\r' segment holding the focus; a focus on an empty tail segment
  // (a bar that ended with '\r') falls back to the last non-empty one.
  size_t seg_start = 0;
  if (focus > 0) {
    size_t cr = line.rfind('\r', focus - 1);
    if (cr != std::string_view::npos) seg_start = cr + 1;
  }
  size_t seg_end = line.find('\r', focus);
  if (seg_end == std::string_view::npos) seg_end = line.size();
  std::string_view seg = line.substr(seg_start, seg_end - seg_start);
  focus -= seg_start;
  // At most max_bytes, keeping the focus (the end of the match) visible.
  size_t from = 0;
  bool cut_front = false, cut_back = false;
  if (seg.size() > max_bytes) {
    if (focus > max_bytes * 3 / 4) {
      from = focus - max_bytes * 3 / 4;
      cut_front = true;
    }
    if (seg.size() - from > max_bytes) cut_back = true;
    seg = seg.substr(from, std::min(max_bytes, seg.size() - from));
  }
  std::string out;
  out.reserve(seg.size() + 8);
  if (cut_front) out += "…";
  // Skip continuation bytes a cut left at the front.
  size_t i = 0;
  if (cut_front)
    while (i < seg.size() && (static_cast<unsigned char>(seg[i]) & 0xc0) == 0x80) i++;
  static const char hex[] = "0123456789abcdef";
  while (i < seg.size()) {
    auto b = static_cast<unsigned char>(seg[i]);
    if (b == '\t') {
      out += ' ';
      i++;
      continue;
    }
    size_t n = utf8_length(seg, i);
    if (n == 0 || (n == 1 && (b < 0x20 || b == 0x7f))) {
      if (cut_back && seg.size() - i < 4 && b >= 0x80) break;  // a sequence the cut split
      // A run of one byte (a file's NUL padding after a crash) is shown
      // once with its length, not as hundreds of escapes.
      size_t run = 1;
      while (i + run < seg.size() && static_cast<unsigned char>(seg[i + run]) == b) run++;
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
      if (run >= 4) out += "\u00d7" + std::to_string(run);  // "\x00×1000"
      i += run >= 4 ? run : 1;
      continue;
    }
    out.append(seg.substr(i, n));
    i += n;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (cut_back) out += "…";
  return out;
}

}  // namespace mld::logs
