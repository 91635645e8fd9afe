// The standard library headers that most of mldoctor's translation units
// include, precompiled once per build and used by every C++ library and the
// binary (CMakeLists.txt, mld_use_precompiled_headers). Parsing libstdc++
// was about 60% of a small file's compile time and the build is compiled
// three times in CI (release, sanitizers, fuzzers). Each source still
// includes what it uses: the fuzz build (-DMLD_FUZZ=ON) compiles without
// this header, so a missing #include fails there.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
