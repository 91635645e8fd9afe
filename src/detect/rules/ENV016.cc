// ENV016 — the installed torch asks for the libuv TCPStore by default (2.4 and
// later) but was built without libuv (the string only such builds compile in,
// read by check from libtorch_cpu's .rodata): the first init_process_group
// fails with DIST023's message unless USE_LIBUV=0, and torchrun fails either
// way because its own rendezvous does not read the variable
// (rules/ENV016.toml; checked against Debian's torch 2.6 and 2.14 by
// test/e2e/scenario-dist023-libuv.py).
#include "detect/detect.h"

MLD_DETECTOR(ENV016) {
  using namespace mld;
  if (!facts.torch_store) return;
  const detect::TorchStore& s = *facts.torch_store;
  if (!s.libuv_by_default || !s.built_without_libuv) return;
  const std::string* use_libuv = facts.host ? facts.host->env.value_of("USE_LIBUV") : nullptr;
  // rendezvous.py and torchrun's worker store read USE_LIBUV as "1" or not.
  const bool disabled = use_libuv && *use_libuv != "1";
  Detection d;
  d.rule = "ENV016";
  d.subject = "torch " + s.version;
  const std::string lib = s.libtorch_cpu.substr(s.libtorch_cpu.rfind('/') + 1);
  d.evidence.push_back(
      {"\"LibUV TCPStore implementation missing\" in " + lib + "'s .rodata: built without libuv",
       s.libtorch_cpu, std::nullopt});
  d.evidence.push_back(
      {"torch " + s.version + ": TCPStore asks for libuv by default (torch >= 2.4)", "",
       std::nullopt});
  if (use_libuv) d.evidence.push_back({"USE_LIBUV=" + *use_libuv, "environment", std::nullopt});
  if (disabled) {
    d.message =
        "torch " + s.version + " was built without libuv: USE_LIBUV=" + *use_libuv +
        " lets init_process_group start under python, but torchrun still fails at its store";
    d.fix =
        "Start the ranks without torchrun: one process per rank with RANK, LOCAL_RANK, WORLD_SIZE, "
        "MASTER_ADDR, MASTER_PORT and USE_LIBUV=" +
        *use_libuv +
        " set (a shell loop, srun, mpirun or torch.multiprocessing.spawn), or install a torch "
        "built with libuv.";
  } else {
    d.message = "torch " + s.version +
                " was built without libuv but its TCPStore asks for libuv: init_process_group "
                "(env://, tcp://) and torchrun fail before any rank connects";
    d.env_fix.push_back("USE_LIBUV=0");
  }
  out.push_back(std::move(d));
}
