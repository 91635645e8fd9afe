// ENV002 — an OpenMP setting the runtime does not accept: OMP_PROC_BIND,
// OMP_PLACES, OMP_DYNAMIC, OMP_WAIT_POLICY, GOMP_SPINCOUNT,
// GOMP_CPU_AFFINITY, KMP_BLOCKTIME, KMP_AFFINITY. libgomp and LLVM OpenMP
// warn once and ignore the value, so binding or waiting is not what it says
// (rules/ENV002.toml). hostfacts parses each as libgomp's env.c and LLVM's
// kmp_settings.cpp do.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV002) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  struct Setting {
    const char* name;
    std::string expected;
  };
  for (const Setting& s : {
           Setting{"OMP_PROC_BIND", "true, false, or a list of primary, close, spread"},
           Setting{"OMP_PLACES",
                   "threads, cores, sockets, ll_caches, numa_domains (optionally \"(n)\") or {..} "
                   "lists"},
           Setting{"OMP_DYNAMIC", "true or false"},
           Setting{"OMP_WAIT_POLICY", "active or passive"},
           Setting{"GOMP_SPINCOUNT", "a count with an optional k/M/G/T suffix, or infinite"},
           Setting{"GOMP_CPU_AFFINITY", "CPU numbers and ranges such as \"0 2-5 8-15:2\""},
           Setting{"KMP_BLOCKTIME", "milliseconds or infinite"},
           Setting{"KMP_AFFINITY",
                   "a type (compact, scatter, balanced, explicit, none, disabled) with modifiers; "
                   "\"" +
                       e.kmp_affinity_bad_item + "\" is not one"},
       }) {
    const std::string* value = e.value_of(s.name);
    if (!value || !e.rejects(s.name)) continue;
    const std::string name = s.name;
    Detection d = detect::env_detection("ENV002", name, *value);
    d.message = name + "=\"" + *value +
                "\" is not a value the OpenMP runtime accepts; it is ignored (expected " +
                s.expected + ")";
    d.fix = "Set " + name + " to " + s.expected + ", or unset it.";
    out.push_back(std::move(d));
  }
}
