// encoding.cc — the text encodings logs arrive in. Linux programs write
// UTF-8 (or any 8-bit text, which the scanner takes as bytes), but a log a
// Windows user attaches was often written by PowerShell 5's `>` or
// `Out-File`, which write UTF-16LE with a byte-order mark, and some tools
// write UTF-16 without one. Scanned as bytes, every ASCII character of such a
// log is followed by a NUL and no signature can match: a silent "no
// findings" on a log that names its failure. So the scanner looks at the
// first bytes: a UTF-16 byte-order mark, or ASCII-range text with a NUL in
// every other byte, is decoded to UTF-8 on the way in (line numbers hold:
// each U+000A stays one '\n'); anything else passes through untouched, at no
// cost but one branch per block.
#include <algorithm>

#include "logs/logs-internal.h"

namespace mld::logs {
namespace {

// Bytes looked at to recognise UTF-16 without a byte-order mark.
constexpr size_t kSniff = 64;

constexpr u32 kReplacement = 0xfffd;

// UTF-16 without a byte-order mark: text whose characters are mostly in the
// ASCII range has a NUL as every high byte and almost no NUL low byte.
// Returns the encoding, or Bytes.
TextDecoder::Encoding sniff_utf16(std::string_view head) {
  size_t pairs = head.size() / 2, zero_even = 0, zero_odd = 0;
  if (pairs < 8) return TextDecoder::Encoding::Bytes;
  for (size_t i = 0; i < pairs * 2; i += 2) {
    zero_even += head[i] == '\0';
    zero_odd += head[i + 1] == '\0';
  }
  if (zero_odd * 10 >= pairs * 9 && zero_even * 10 <= pairs) return TextDecoder::Encoding::Utf16LE;
  if (zero_even * 10 >= pairs * 9 && zero_odd * 10 <= pairs) return TextDecoder::Encoding::Utf16BE;
  return TextDecoder::Encoding::Bytes;
}

}  // namespace

const char* TextDecoder::name() const {
  switch (encoding_) {
    case Encoding::Utf16LE: return "UTF-16LE";
    case Encoding::Utf16BE: return "UTF-16BE";
    default: return nullptr;
  }
}

TextDecoder::Text TextDecoder::decode(std::string_view in) {
  if (encoding_ == Encoding::Undecided) {
    // Only the first bytes are looked at, and only as many are copied: the
    // rest of the block is passed on as it lies (a mapped log's first block
    // is 16 MiB).
    const size_t take = std::min(in.size(), kSniff - std::min(kSniff, held_.size()));
    held_.append(in.substr(0, take));
    in.remove_prefix(take);
    const std::string_view head = held_;
    if (head.size() >= 2 && static_cast<u8>(head[0]) == 0xff && static_cast<u8>(head[1]) == 0xfe)
      encoding_ = Encoding::Utf16LE, bom_ = true;
    else if (head.size() >= 2 && static_cast<u8>(head[0]) == 0xfe &&
             static_cast<u8>(head[1]) == 0xff)
      encoding_ = Encoding::Utf16BE, bom_ = true;
    else if (head.size() >= kSniff)
      encoding_ = sniff_utf16(head);
    else
      return {};  // too little to tell yet
    std::string first = std::move(held_);
    held_.clear();
    if (encoding_ == Encoding::Bytes) {
      out_ = std::move(first);
      return {out_, in};
    }
    out_.clear();
    transcode(std::string_view(first).substr(bom_ ? 2 : 0));
    transcode(in);
    return {out_, {}};
  }
  if (encoding_ == Encoding::Bytes) return {in, {}};
  out_.clear();
  transcode(in);
  return {out_, {}};
}

std::string_view TextDecoder::finish() {
  out_.clear();
  if (encoding_ == Encoding::Undecided) {
    // A log shorter than the sniffing window.
    encoding_ = sniff_utf16(held_);
    if (encoding_ == Encoding::Bytes) {
      out_ = std::move(held_);
      held_.clear();
      return out_;
    }
    std::string all = std::move(held_);
    held_.clear();
    transcode(all);
  }
  if (encoding_ == Encoding::Bytes) return {};
  if (!held_.empty() || high_surrogate_) append_utf8(out_, kReplacement);  // cut mid-character
  held_.clear();
  high_surrogate_ = 0;
  return out_;
}

void TextDecoder::transcode(std::string_view in) {
  out_.reserve(out_.size() + in.size() / 2 + 4);
  size_t i = 0;
  auto unit_at = [&](u8 a, u8 b) -> u32 {
    return encoding_ == Encoding::Utf16LE ? static_cast<u32>(a | (b << 8))
                                          : static_cast<u32>((a << 8) | b);
  };
  if (!held_.empty() && !in.empty()) {  // an odd byte left by the last block
    u32 unit = unit_at(static_cast<u8>(held_[0]), static_cast<u8>(in[0]));
    held_.clear();
    i = 1;
    put_unit(unit);
  }
  for (; i + 1 < in.size(); i += 2)
    put_unit(unit_at(static_cast<u8>(in[i]), static_cast<u8>(in[i + 1])));
  if (i < in.size()) held_.assign(1, in[i]);
}

void TextDecoder::put_unit(u32 unit) {
  if (high_surrogate_) {
    if (unit >= 0xdc00 && unit <= 0xdfff) {
      append_utf8(out_, 0x10000 + ((high_surrogate_ - 0xd800) << 10) + (unit - 0xdc00));
      high_surrogate_ = 0;
      return;
    }
    append_utf8(out_, kReplacement);  // a high surrogate alone
    high_surrogate_ = 0;
  }
  if (unit >= 0xd800 && unit <= 0xdbff)
    high_surrogate_ = unit;
  else if (unit >= 0xdc00 && unit <= 0xdfff)
    append_utf8(out_, kReplacement);  // a low surrogate alone
  else
    append_utf8(out_, unit);
}

}  // namespace mld::logs
