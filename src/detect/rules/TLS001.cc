// TLS001 — a dlopen() that fails, or would fail, because the static TLS area
// has no room left for the module's initial-exec TLS block. Predicted by the
// loader's static TLS model for check's import set and libs' load order, or
// seen by run and replayed through the same model (rules/TLS001.toml).
#include "detect/detect.h"

namespace {

using mld::detect::StaticTlsAccount;
using mld::detect::StaticTlsFailure;

void add_account(const StaticTlsAccount& a, mld::Detection& d) {
  d.evidence.push_back({a.tls_module + " needs " + std::to_string(a.bytes_needed) +
                            " bytes of static TLS; " + std::to_string(a.bytes_left) +
                            " are left after the objects loaded before it",
                        "", std::nullopt});
  d.evidence.push_back({"static TLS area " + std::to_string(a.static_size) +
                            " bytes: " + std::to_string(a.startup_used) +
                            " used at startup, surplus " + std::to_string(a.surplus),
                        "", std::nullopt});
}

std::string base(const std::string& p) { return p.substr(p.rfind('/') + 1); }

}  // namespace

MLD_DETECTOR(TLS001) {
  using namespace mld;
  for (const StaticTlsFailure& f : facts.static_tls) {
    Detection d;
    d.rule = "TLS001";
    d.subject = f.object;
    switch (f.source) {
      case StaticTlsFailure::Source::Import:
        d.message =
            "`import " + f.import_name + "` would fail loading " + f.module + ": " + f.error;
        d.evidence.push_back({"import order: " + f.import_order, "", std::nullopt});
        if (f.model) add_account(*f.model, d);
        if (f.tunables)
          d.fix = "export GLIBC_TUNABLES=" + *f.tunables +
                  " (a larger static TLS surplus, glibc 2.32+)";
        break;
      case StaticTlsFailure::Source::LoadOrder:
        d.message = "dlopen(" + f.object + ") fails: " + f.error;
        if (f.model) add_account(*f.model, d);
        if (f.tunables)
          d.fix = "export GLIBC_TUNABLES=" + *f.tunables + " (more static TLS surplus), or load " +
                  f.object + " before the others";
        else
          d.fix = "load " + f.object +
                  " first (before the libraries that use static TLS), or "
                  "preload it with LD_PRELOAD so it is placed at startup";
        break;
      case StaticTlsFailure::Source::Trace:
        d.message = "dlopen(" + f.object + ") in " + f.process + " failed: " + f.error;
        if (!f.requester.empty())
          d.evidence.push_back({"called from " + f.requester, "", std::nullopt});
        if (!f.replay_error.empty()) {
          d.evidence.push_back({"the loader model could not replay this process: " + f.replay_error,
                                "", std::nullopt});
        } else {
          if (f.model) {
            add_account(*f.model, d);
            d.evidence.push_back(
                {"mldoctor's loader model of this process fails at the same dlopen: " +
                     f.model->error,
                 "", std::nullopt});
          } else {
            d.evidence.push_back(
                {"mldoctor's loader model of this process loads it (" +
                     std::to_string(f.replayed_calls) +
                     " dlopen calls replayed); the failure may depend on objects the model does "
                     "not see",
                 "", std::nullopt});
          }
          if (f.loads_without_audit && !*f.loads_without_audit)
            d.evidence.push_back({"it fails without mldoctor run too", "", std::nullopt});
          else if (f.loads_without_audit)
            d.evidence.push_back(
                {"without the audit module of mldoctor run it would load: auditing costs static "
                 "TLS",
                 "", std::nullopt});
        }
        if (f.rounding)
          d.evidence.push_back(
              {"this dlopen needs " + f.rounding->tunable +
                   " >= " + std::to_string(f.rounding->exact) + "; the fix rounds it up to " +
                   std::to_string(f.rounding->rounded) + " for the modules the job loads after it",
               "", std::nullopt});
        if (f.tunables)
          d.fix = "export GLIBC_TUNABLES=" + *f.tunables +
                  " (a larger static TLS surplus, glibc 2.32+; enough "
                  "with and without mldoctor run), or import " +
                  base(f.object) + " before the modules that use static TLS";
        else
          d.fix =
              "raise the static TLS surplus: GLIBC_TUNABLES=glibc.rtld.optional_static_tls=<bytes> "
              "(glibc "
              "2.32+), or load " +
              base(f.failing_module) + " first";
        break;
    }
    if (f.tunables) d.env_fix = {"GLIBC_TUNABLES=" + *f.tunables};
    out.push_back(std::move(d));
  }
}
