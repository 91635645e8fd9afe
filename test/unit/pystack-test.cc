// pystack-test.cc — the Python stack reader's decoders against what CPython
// itself computes: each release's line table of one function (compiled by
// the interpreters under ~/.pyenv, 3.8–3.13, and Debian unstable's 3.14)
// with the line of every instruction as the interpreter reports it
// (dis.findlinestarts before 3.10, code.co_lines() since), and the
// _Py_DebugOffsets of the real libpython3.13.so.1.0 and of Debian's
// python3.14 against offsetof() in each one's own headers. The live
// reader is tested against faulthandler on real processes
// (test/e2e/stacks-interpreters.py).
#include "pystack/pystack.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "pystack/pystack-internal.h"

using namespace mld;
using pystack::LineTableFormat;

namespace {

std::string unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

struct Release {
  const char* version;
  LineTableFormat format;
  int first_line;
  const char* table;
  std::vector<int> lines;  // of each 2-byte instruction, from offset 0
};

// def f(a):                       (line 2)
//     x = a + 1
//     if x > 2:
//         for i in range(3):
//             x += i
//     try:
//         y = 1 / x
//     except ZeroDivisionError:
//         y = 0
//     return [z for z in (x,
//                         y)]
const std::vector<Release>& releases() {
  static const std::vector<Release> r = {
      {"3.8",
       LineTableFormat::Lnotab,
       2,
       "0001080108010c010a0102010c010e010a01080102ff",
       {3, 3, 3, 3, 4, 4, 4, 4, 5, 5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  7,  8,  8,  8, 8,
        8, 8, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11, 11, 12, 11, 11, 11, 11}},
      {"3.9",
       LineTableFormat::Lnotab,
       2,
       "0001080108010c010a0102010c010c010a01080102ff",
       {3, 3, 3, 3, 4, 4, 4, 4, 5, 5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  7,  8,  8,  8,
        8, 8, 8, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11, 11, 12, 11, 11, 11, 11}},
      {"3.10",
       LineTableFormat::Linetable310,
       2,
       "080108010c010a0102010c010c01080102ff0802020108ff",
       {3, 3, 3, 3, 4, 4, 4, 4, 5, 5,  5,  5,  5,  5, 6,  6,  6,  6,  6,  7,  8,  8,  8,
        8, 8, 8, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 9, 11, 11, 11, 11, 12, 11, 11, 11, 11}},
      {"3.11",
       LineTableFormat::Locations311,
       2,
       "8000d80809884189058041d80708883182758075dd1116907191189418f000010913f0000109138841d80c0d90"
       "11894688418841f00203050ed80c0d9001894588018801f8dd0b1cf00001050ef00001050ef00001050ed80c"
       "0d880188018801f00301050ef8f8f8f004010c1cf000010c1c9801d81819f00301181bf000010c1cf100010c"
       "1cf400010c1cf00001051c",
       {2, 3, 3,  3,  3,  3,  4, 4, 4, 4, 4,  4,  5,  5,  5,  5,  5,  5,  5,  5,  5,  5,  5,  5, 5,
        5, 5, 5,  5,  6,  6,  6, 6, 6, 6, 7,  8,  8,  8,  8,  8,  8,  0,  9,  9,  9,  9,  9,  9, 9,
        9, 9, 10, 10, 10, 10, 9, 0, 0, 0, 11, 11, 11, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11}},
      {"3.12",
       LineTableFormat::Locations311,
       2,
       "8000d80809884189058041d8070888318275dc111690719318f2000109138841d80c0d901189468941f00301"
       "0913f00403050ed80c0d900189458801f00600191ad81819f00301181bf600010c1c90218a41f200010c1cf0"
       "0001051cf8f405000c1df20001050ed80c0d8a01f00301050efcf204010c1c",
       {2,  3,  3,  3,  3,  3,  4,  4,  4,  4,  4,  5,  5,  5,  5,  5,  5,  5, 5,  5,
        5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,  5,  7,  8,  8,  8,  8,  8, 11, 12,
        11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 0,  9, 9,  9,
        9,  9,  9,  9,  9,  10, 10, 10, 10, 9,  0,  0,  0,  0,  0,  11, 11, 11}},
      {"3.13",
       LineTableFormat::Locations311,
       2,
       "8000d80809884189058041d8070888318375dc1116907196188841d80c0d89468a41f10300121af00403050e"
       "d80c0d900189458801f00600191ad81819f10301181bf300010c1cf10001181b90218a41f10001181bf10001"
       "0c1cf00001051cf8f405000c1df30001050ed80c0d8a01f00301050efcf204010c1c",
       {2,  3,  3,  3,  3,  3,  4,  4,  4,  4,  4,  4,  5,  5,  5,  5,  5,  5,  5, 5,  5,
        5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,  5,  5,  7,  8,  8,  8,  8,  8, 11, 12,
        11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 0,  9, 9,  9,
        9,  9,  9,  9,  9,  9,  10, 10, 10, 10, 9,  0,  0,  0,  0,  0,  11, 11, 11}},
      {"3.14",
       LineTableFormat::Locations311,
       2,
       "8000d8080988418d058041d8070888318475dc1116907196188841d80c0d8d468a41f10300121af00403050e"
       "d80c0d90018d458801f00600191ad81819f10301181bf300010c1cf10001181b90218a41f10001181bf10001"
       "0c1cf00001051cf8f405000c1df40001050ed80c0d8a01f00301050efcf204010c1c",
       {2, 3, 3, 3, 3, 3,  3,  3,  3,  3,  4,  4,  4,  4,  4,  4,  4,  5,  5,  5,  5,  5,  5,  5,
        5, 5, 5, 5, 5, 5,  5,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  5,  5,  7,  8,  8,  8,  8,
        8, 8, 8, 8, 8, 11, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11,
        0, 9, 9, 9, 9, 9,  9,  9,  9,  9,  9,  10, 10, 10, 10, 9,  0,  0,  0,  0,  0,  11, 11, 11}},
  };
  return r;
}

TEST(LineTables, EveryInstructionOfEachReleaseOnTheLineTheInterpreterGives) {
  for (const Release& r : releases()) {
    const std::string table = unhex(r.table);
    for (size_t i = 0; i < r.lines.size(); i++) {
      EXPECT_EQ(pystack::line_at(r.format, ByteView(table), r.first_line, static_cast<i64>(2 * i)),
                r.lines[i])
          << "CPython " << r.version << ", instruction at byte " << 2 * i;
    }
  }
}

TEST(LineTables, AFrameThatHasNotStartedIsOnItsFirstLine) {
  for (const Release& r : releases()) {
    const std::string table = unhex(r.table);
    EXPECT_EQ(pystack::line_at(r.format, ByteView(table), r.first_line, -2), r.first_line)
        << r.version;
  }
}

TEST(LineTables, CutOrDamagedTablesGiveNoLineOrAWrongOneNeverARead) {
  for (const Release& r : releases()) {
    const std::string table = unhex(r.table);
    for (size_t cut = 0; cut < table.size(); cut++) {
      const std::string part = table.substr(0, cut);
      for (i64 off : {i64{0}, i64{10}, i64{1000}, i64{1} << 30})
        (void)pystack::line_at(r.format, ByteView(part), r.first_line, off);
    }
    // Past the end of the code: no line (3.10+), the last line (co_lnotab).
    const int past = pystack::line_at(r.format, ByteView(table), r.first_line, 100000);
    if (r.format == LineTableFormat::Lnotab)
      EXPECT_EQ(past, r.lines.back()) << r.version;
    else
      EXPECT_EQ(past, 0) << r.version;
  }
  // A varint that never ends stops at the table's end: the entry covers
  // the first instruction only, the next has no entry.
  const std::string endless = "\xf0" + std::string(64, '\x7f');
  (void)pystack::line_at(LineTableFormat::Locations311, ByteView(endless), 5, 0);
  EXPECT_EQ(pystack::line_at(LineTableFormat::Locations311, ByteView(endless), 5, 2), 0);
}

TEST(Layouts, TablesCoverExactly38To312) {
  for (int minor = 0; minor < 20; minor++)
    EXPECT_EQ(pystack::detail::table_layout(minor).has_value(), minor >= 8 && minor <= 12) << minor;
}

std::string debug_offsets(const char* release) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz" /
                    "corpus" / "pystack" / (std::string("debug-offsets-") + release);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes.size() > 5 ? bytes.substr(5) : "";  // the fuzz target's selector bytes
}

// One field of a Layout and the value it must have.
struct Expected {
  const char* field;
  u64 pystack::detail::Layout::*member;
  u64 value;
};

void expect_fields(const pystack::detail::Layout& l, std::initializer_list<Expected> fields) {
  for (const Expected& f : fields) EXPECT_EQ(l.*f.member, f.value) << f.field;
}

using L = pystack::detail::Layout;

TEST(Layouts, DebugOffsetsOfTheReal313AreItsHeadersOffsets) {
  const std::string bytes = debug_offsets("3.13");
  ASSERT_EQ(bytes.size(), pystack::detail::debug_offsets_bytes(0x030d00f0));
  ASSERT_EQ(bytes.size(), 584u);
  std::string why;
  const auto l = pystack::detail::debug_offsets_layout(ByteView(bytes), &why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->minor, 13);
  // offsetof() in CPython 3.13.0's Include/internal headers (Py_BUILD_CORE).
  expect_fields(*l, {{"interpreters.head", &L::runtime_interpreters_head, 632},
                     {"threads.head", &L::interp_threads_head, 7344},
                     {"tstate next", &L::tstate_next, 8},
                     {"current_frame", &L::tstate_frame, 72},
                     {"thread_id", &L::tstate_thread_id, 152},
                     {"native_thread_id", &L::tstate_native_thread_id, 160},
                     {"previous", &L::frame_previous, 8},
                     {"f_executable", &L::frame_code, 0},
                     {"instr_ptr", &L::frame_lasti, 56},
                     {"owner", &L::frame_owner, 70},
                     {"f_executable tags (a PyObject*)", &L::executable_tag_bits, 0},
                     {"co_filename", &L::code_filename, 112},
                     {"co_name", &L::code_name, 120},
                     {"co_qualname", &L::code_qualname, 128},
                     {"co_linetable", &L::code_linetable, 136},
                     {"co_firstlineno", &L::code_firstlineno, 68},
                     {"co_code_adaptive", &L::code_adaptive, 200},
                     {"sizeof(PyASCIIObject)", &L::unicode_ascii_size, 40},
                     {"sizeof(PyCompactUnicodeObject)", &L::unicode_compact_size, 56}});
}

TEST(Layouts, DebugOffsetsOfTheReal314AreItsHeadersOffsets) {
  // The .PyRuntime section of Debian unstable's /usr/bin/python3.14
  // (3.14.10), where the compiler wrote offsetof() of each field of the
  // headers it shipped (python3.14-dev's include/python3.14/internal).
  const std::string bytes = debug_offsets("3.14");
  ASSERT_EQ(bytes.size(), pystack::detail::debug_offsets_bytes(0x030e0af0));
  ASSERT_EQ(bytes.size(), 760u);
  std::string why;
  const auto l = pystack::detail::debug_offsets_layout(ByteView(bytes), &why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->minor, 14);
  EXPECT_EQ(l->lines, LineTableFormat::Locations311);
  EXPECT_TRUE(l->interpreter_frames);
  expect_fields(*l, {{"interpreters.head", &L::runtime_interpreters_head, 808},
                     {"interp next", &L::interp_next, 7272},
                     {"threads.head", &L::interp_threads_head, 7344},
                     {"tstate next", &L::tstate_next, 8},
                     {"tstate interp", &L::tstate_interp, 16},
                     {"current_frame", &L::tstate_frame, 72},
                     {"thread_id", &L::tstate_thread_id, 152},
                     {"native_thread_id", &L::tstate_native_thread_id, 160},
                     {"previous", &L::frame_previous, 8},
                     {"f_executable", &L::frame_code, 0},
                     {"instr_ptr", &L::frame_lasti, 56},
                     {"owner", &L::frame_owner, 74},
                     {"Py_TAG_BITS of a build with the GIL", &L::executable_tag_bits, 3},
                     {"co_filename", &L::code_filename, 112},
                     {"co_name", &L::code_name, 120},
                     {"co_qualname", &L::code_qualname, 128},
                     {"co_linetable", &L::code_linetable, 136},
                     {"co_firstlineno", &L::code_firstlineno, 68},
                     {"co_code_adaptive", &L::code_adaptive, 208},
                     {"ob_type", &L::object_type, 8},
                     {"bytes ob_size", &L::bytes_size, 16},
                     {"ob_sval", &L::bytes_data, 32},
                     {"unicode state", &L::unicode_state, 32},
                     {"unicode length", &L::unicode_length, 16},
                     {"sizeof(PyASCIIObject)", &L::unicode_ascii_size, 40},
                     {"sizeof(PyCompactUnicodeObject)", &L::unicode_compact_size, 56}});
}

// Sets the u64 word `index` (the cookie is word 0) of a _Py_DebugOffsets.
void set_word(std::string& bytes, size_t index, u64 value) {
  std::memcpy(bytes.data() + 8 * index, &value, 8);
}

TEST(Layouts, DebugOffsetsOfAnotherReleaseOrAFreeThreadedBuildAreRefused) {
  const std::string bytes = debug_offsets("3.13");
  ASSERT_EQ(bytes.size(), 584u);
  std::string why;
  std::string other = bytes;
  set_word(other, 1, 0x030f02f0);  // 3.15.2: a struct this reader does not know
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(other), &why));
  EXPECT_NE(why.find("CPython 3.15.2"), std::string::npos) << why;
  EXPECT_NE(why.find("it reads 3.8–3.14"), std::string::npos) << why;
  EXPECT_EQ(pystack::detail::debug_offsets_bytes(0x030f02f0), 0u);
  EXPECT_EQ(pystack::detail::debug_offsets_bytes(0x030c00f0), 0u);  // 3.12 has none
  EXPECT_EQ(pystack::detail::debug_offsets_bytes(0x040d00f0), 0u);
  std::string threaded = bytes;
  set_word(threaded, 2, 1);
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(threaded), &why));
  EXPECT_NE(why.find("free-threaded"), std::string::npos) << why;
  std::string threaded14 = debug_offsets("3.14");
  set_word(threaded14, 2, 1);
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(threaded14), &why));
  EXPECT_NE(why.find("a free-threaded (no-GIL) build of CPython 3.14.10"), std::string::npos)
      << why;
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(bytes.substr(0, 100)), &why));
  EXPECT_NE(why.find("cut short (100 of 584 bytes)"), std::string::npos) << why;
  std::string wild = bytes;
  wild[8 * 9 + 5] = 1;  // threads_head 2^40 bytes in
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(wild), &why));
}

TEST(Layouts, AStructReadWithAnotherReleasesGroupsIsRefused) {
  // 3.13's struct (padded to 3.14's length) labelled 3.14, and 3.14's
  // labelled 3.13: the groups fall on the wrong words, and some offset
  // lands outside the size its group gives.
  std::string why;
  std::string as14 = debug_offsets("3.13") + std::string(760 - 584, '\0');
  set_word(as14, 1, 0x030e00f0);
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(as14), &why));
  EXPECT_NE(why.find("do not hold together"), std::string::npos) << why;
  std::string as13 = debug_offsets("3.14");
  set_word(as13, 1, 0x030d00f0);
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(as13), &why));
  EXPECT_NE(why.find("do not hold together"), std::string::npos) << why;
  // A frame whose owner byte would lie past the frame's size.
  std::string owner = debug_offsets("3.14");
  set_word(owner, 31 + 5, 88);  // interpreter_frame.owner at sizeof(_PyInterpreterFrame)
  EXPECT_FALSE(pystack::detail::debug_offsets_layout(ByteView(owner), &why));
}

TEST(Versions, HexVersionsReadAsPeopleWriteThem) {
  EXPECT_EQ(pystack::version_text(0x030b02f0), "3.11.2");
  EXPECT_EQ(pystack::version_text(0x030d00f0), "3.13.0");
  EXPECT_EQ(pystack::version_text(0x030e0af0), "3.14.10");
}

}  // namespace

// ─── Processes with no stacks at all ────────────────────────────────────────
// A zombie and a kernel thread have no memory to read: they are named as
// what they are, and root is never told to run as root.

TEST(WithoutStacks, ZombieAndKernelThreadFromTheirStatLines) {
  // proc_pid_stat(5) lines as the kernel writes them (fields 3, 9 and 20:
  // state, flags, num_threads), one with a command holding ") Z (".
  const std::string zombie =
      "4242 (python3) Z 4200 4242 4200 0 -1 4227084 1 0 0 0 3 1 0 0 20 0 1 0 9 0 0 "
      "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
  const std::string kthreadd =
      "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 19 0 0 "
      "18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
  const std::string sleeping =
      "77 (a ) Z (b) S 1 77 77 0 -1 4194560 100 0 0 0 1 1 0 0 20 0 1 0 50 1000 100 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
  // A leader that called pthread_exit while 3 threads run: Z, but not dead.
  const std::string leader_gone =
      "90 (train) Z 1 90 90 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 4 0 9 0 0 "
      "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
  EXPECT_EQ(pystack::without_stacks(4242, zombie),
            "pid 4242 is a zombie: it has exited and its parent has not reaped it; there are no "
            "stacks to read");
  EXPECT_EQ(pystack::without_stacks(2, kthreadd), "pid 2 is a kernel thread: it runs no Python");
  EXPECT_EQ(pystack::without_stacks(77, sleeping), "");
  EXPECT_EQ(pystack::without_stacks(90, leader_gone), "");
  EXPECT_EQ(pystack::without_stacks(1, "garbage"), "");
  EXPECT_EQ(pystack::without_stacks(1, "1 (init) S 0"), "");
}

TEST(WithoutStacks, TheReaderNamesARealZombieAndKernelThread) {
  // A child that exits and is not waited for.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  std::string state;
  for (int i = 0; i < 500 && state != "Z"; i++) {
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(in, line);
    state = line.size() > line.rfind(')') + 2 ? line.substr(line.rfind(')') + 2, 1) : "";
    if (state != "Z") usleep(10000);
  }
  ASSERT_EQ(state, "Z");
  const pystack::Process z = pystack::read_stacks(child);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(z.error, "pid " + std::to_string(child) +
                         " is a zombie: it has exited and its parent has not reaped it; there "
                         "are no stacks to read");
  // A kernel thread: the first pid whose flags have PF_KTHREAD (none is
  // visible inside a PID namespace).
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string line;
    std::getline(in, line);
    const long pid = std::stol(name);
    if (pystack::without_stacks(pid, line).find("kernel thread") == std::string::npos) continue;
    const pystack::Process k = pystack::read_stacks(pid);
    EXPECT_EQ(k.error, "pid " + name + " is a kernel thread: it runs no Python");
    EXPECT_EQ(k.error.find("root"), std::string::npos);
    return;
  }
  GTEST_SKIP() << "no kernel thread visible here (a PID namespace)";
}
