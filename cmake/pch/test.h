// The unit tests' precompiled header: the library one (std.h) plus
// GoogleTest and nlohmann::json, which every test file includes or reaches
// (test/CMakeLists.txt).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "std.h"
