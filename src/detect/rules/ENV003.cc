// ENV003 — KMP_DUPLICATE_LIB_OK set to a value LLVM/Intel OpenMP reads as
// true: it silences the "OMP: Error #15" check, so two OpenMP runtimes can
// run in one process unnoticed (rules/ENV003.toml). hostfacts reads the value
// as the runtime's __kmp_str_match_true does.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV003) {
  using namespace mld;
  if (!facts.host || !facts.host->env.kmp_duplicate_lib_ok) return;
  const std::string* value = facts.host->env.value_of("KMP_DUPLICATE_LIB_OK");
  if (!value) return;
  Detection d = detect::env_detection("ENV003", "KMP_DUPLICATE_LIB_OK", *value);
  d.message = "KMP_DUPLICATE_LIB_OK=" + *value +
              " silences LLVM/Intel OpenMP's \"Error #15\" check, so two OpenMP runtimes may run "
              "in one process unnoticed";
  d.fix =
      "Unset KMP_DUPLICATE_LIB_OK and make the packages share one OpenMP runtime (`mldoctor "
      "check` lists them); the variable hides the conflict, it does not resolve it.";
  out.push_back(std::move(d));
}
