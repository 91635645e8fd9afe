// device-binding-test.cc — the device events of `mldoctor run` (written by
// src/trace/device-calls.c) read back into each process's DeviceCalls, and
// the findings drawn from them: a rank that made its NCCL communicator
// without binding a GPU (DIST001), two ranks of one communicator on one GPU
// (DIST002), a LOCAL_RANK device that CUDA_VISIBLE_DEVICES does not show
// (DIST003). The event lines are those the audit module wrote for the real
// libcudart.so.13 and libnccl.so.2 of CUDA 13 on a machine without a driver
// (cudaSetDevice = 35, ncclCommInitRank = 1), with ranks and devices varied.
#include <gtest/gtest.h>

#include <string>

#include "run/run.h"

using namespace mld;
using namespace mld::run;

namespace {

// One process's event lines, appended in call order (chained calls are
// sequenced; the operands of + are not).
struct Rank {
  long pid;
  std::string env;  // the event's environment fields
  long t = 0;
  std::string text;

  Rank& ev(const std::string& fields, long tid = 0) {
    text += "{\"ev\":\"device\",\"pid\":" + std::to_string(pid) +
            ",\"tid\":" + std::to_string(tid ? tid : pid) + ",\"t\":" + std::to_string(++t) + "," +
            fields + "}\n";
    return *this;
  }
  Rank& set_device(int d, int ret, long tid = 0) {
    return ev(
        "\"fn\":\"cudaSetDevice\",\"caller\":\"/job/rank\",\"lib\":\"/cuda/libcudart.so.13\","
        "\"device\":" +
            std::to_string(d) + ",\"ret\":" + std::to_string(ret) + "," + env,
        tid);
  }
  Rank& init(int rank, int nranks, const std::string& id, const std::string& device, int ret,
             long tid = 0) {
    ev("\"fn\":\"ncclCommInitRank\",\"state\":\"called\",\"caller\":\"/job/rank\","
       "\"lib\":\"/cuda/libnccl.so.2\",\"nranks\":" +
           std::to_string(nranks) + ",\"nccl_rank\":" + std::to_string(rank) + ",\"id\":\"" + id +
           "\"," + device + "," + env,
       tid);
    if (ret < 0) return *this;  // never returned
    return ev(
        "\"fn\":\"ncclCommInitRank\",\"state\":\"returned\",\"caller\":\"/job/rank\",\"lib\":\"/"
        "cuda/libnccl.so.2\",\"ret\":" +
            std::to_string(ret),
        tid);
  }
};

const std::string kUnknown =
    "\"cuda_device_unknown\":\"the program's last CUDA runtime call failed\"";

std::string env(const char* local, const char* rank, const char* cvd = nullptr) {
  auto s = [](const char* v) { return v ? "\"" + std::string(v) + "\"" : std::string("null"); };
  return "\"CUDA_VISIBLE_DEVICES\":" + s(cvd) + ",\"LOCAL_RANK\":" + s(local) +
         ",\"RANK\":" + s(rank) + ",\"WORLD_SIZE\":\"2\"";
}

std::vector<Finding> analyse_ranks(const std::vector<std::pair<long, std::string>>& ranks) {
  Trace trace;
  for (const auto& [pid, text] : ranks)
    trace.processes.emplace(pid, parse_process_events(text, pid));
  AnalysisContext ctx;
  ctx.child_pid = ranks.front().first;
  FindingList found;
  analyse(trace, ctx, found);
  std::vector<Finding> out;
  for (Finding& f : found.findings)
    if (f.rule != "RUN001") out.push_back(std::move(f));
  return out;
}

std::string all(const Finding& f) {
  std::string s = f.message + "\n";
  for (const Evidence& e : f.evidence) s += e.text + "\n";
  return s + f.fix;
}

}  // namespace

TEST(DeviceEvents, CallsAndAnInitFromItsStartAndReturn) {
  Rank r{200, env("1", "1", "0,1")};
  r.set_device(1, 35)
      .ev("\"fn\":\"cudaGetDevice\",\"caller\":\"/job/rank\",\"lib\":\"/cuda/"
          "libcudart.so.13\",\"device\":1,\"ret\":0," +
          r.env)
      .ev("\"fn\":\"cuDevicePrimaryCtxRetain\",\"caller\":\"/job/rank\",\"lib\":\"/"
          "usr/lib/libcuda.so.1\",\"device\":1,\"ctx\":94000,\"ret\":0," +
          r.env)
      .init(1, 2, "492c764d0babd70a", "\"cuda_device\":1", 0)
      .ev("\"fn\":\"ncclCommInitAll\",\"state\":\"called\",\"caller\":\"/job/"
          "rank\",\"lib\":\"/cuda/libnccl.so.2\",\"nranks\":2,\"devices\":\"0,1\"," +
          r.env)
      .ev("\"fn\":\"ncclCommSplit\",\"state\":\"called\",\"caller\":\"/job/rank\","
          "\"lib\":\"/cuda/libnccl.so.2\",\"parent\":5000,\"color\":3,\"key\":-1," +
          r.env);
  const std::string& t = r.text;
  TracedProcess p = parse_process_events(t, 200);
  ASSERT_EQ(p.device_calls.size(), 6u);
  const DeviceCall& set = p.device_calls[0];
  EXPECT_EQ(set.fn, "cudaSetDevice");
  EXPECT_EQ(set.device, 1);
  EXPECT_EQ(set.ret, 35);
  EXPECT_EQ(set.lib, "/cuda/libcudart.so.13");
  EXPECT_EQ(set.cuda_visible_devices, "0,1");
  EXPECT_EQ(set.local_rank, "1");
  EXPECT_EQ(set.world_size, "2");
  EXPECT_EQ(p.device_calls[1].device, 1);
  EXPECT_EQ(p.device_calls[2].ctx, 94000u);
  const DeviceCall& init = p.device_calls[3];
  EXPECT_EQ(init.fn, "ncclCommInitRank");
  EXPECT_EQ(init.nccl_rank, 1);
  EXPECT_EQ(init.nranks, 2);
  EXPECT_EQ(init.comm_id, "492c764d0babd70a");
  EXPECT_EQ(init.cuda_device, 1);
  EXPECT_EQ(init.ret, 0);  // from its "returned" event
  EXPECT_EQ(p.device_calls[4].devices, (std::vector<long long>{0, 1}));
  EXPECT_FALSE(p.device_calls[4].ret);  // never returned
  EXPECT_EQ(p.device_calls[5].key, -1);
  EXPECT_EQ(p.device_calls[5].parent, 5000u);
  EXPECT_EQ(p.bad_lines, 0u);
}

TEST(DeviceEvents, UnsetVariablesAndAReturnWithoutItsStart) {
  Rank r{201, env(nullptr, nullptr)};
  const std::string& t =
      r.set_device(0, 0).ev("\"fn\":\"ncclCommInitRank\",\"state\":\"returned\",\"ret\":0").text;
  TracedProcess p = parse_process_events(t, 201);
  ASSERT_EQ(p.device_calls.size(), 1u);
  EXPECT_FALSE(p.device_calls[0].local_rank);
  EXPECT_FALSE(p.device_calls[0].cuda_visible_devices);
}

// (i) rank 1 never binds: its communicator is on device 0, LOCAL_RANK 1.
TEST(DeviceAnalysis, UnboundRankIsNamedWithTheFix) {
  Rank r0{300, env("0", "0")}, r1{301, env("1", "1")};
  std::vector<Finding> f =
      analyse_ranks({{300, r0.set_device(0, 35).init(0, 2, "aa", kUnknown, 1).text},
                     {301, r1.init(1, 2, "aa", kUnknown, 1).text}});
  const Finding* a = nullptr;
  for (const Finding& x : f)
    if (x.rule == "DIST001") a = &x;
  ASSERT_TRUE(a);
  EXPECT_NE(a->message.find("rank 1 (pid 301) created its NCCL communicator (ncclCommInitRank) on "
                            "device 0 without binding a GPU first, while its LOCAL_RANK is 1"),
            std::string::npos)
      << all(*a);
  EXPECT_NE(a->fix.find("torch.cuda.set_device(local_rank)"), std::string::npos);
  EXPECT_NE(a->fix.find("device_id=torch.device('cuda', local_rank)"), std::string::npos);
  EXPECT_NE(a->fix.find("here local_rank is 1"), std::string::npos);
  EXPECT_NE(all(*a).find("ncclCommInitRank(nranks 2, rank 1) = 1 (ncclUnhandledCudaError, failed)"),
            std::string::npos)
      << all(*a);
  // Both ended on device 0 of one communicator.
  int dup = 0;
  for (const Finding& x : f) dup += x.rule == "DIST002";
  EXPECT_EQ(dup, 1);
}

// Rank 0 with LOCAL_RANK 0 needs no call: device 0 is its own.
TEST(DeviceAnalysis, LocalRankZeroWithoutACallIsFine) {
  Rank r0{310, env("0", "0")}, r1{311, env("1", "1")};
  std::vector<Finding> f =
      analyse_ranks({{310, r0.init(0, 2, "bb", kUnknown, 0).text},
                     {311, r1.set_device(1, 0).init(1, 2, "bb", "\"cuda_device\":1", 0).text}});
  EXPECT_TRUE(f.empty()) << all(f.front());
}

// A binding on another thread does not bind the thread that makes the
// communicator.
TEST(DeviceAnalysis, BindingOnAnotherThreadDoesNotCount) {
  Rank r1{321, env("1", "1")};
  std::vector<Finding> f = analyse_ranks(
      {{321, r1.set_device(1, 0, 999).init(1, 2, "cc", "\"cuda_device\":0", 0).text}});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "DIST001");
  EXPECT_NE(all(f[0]).find("another thread"), std::string::npos) << all(f[0]);
}

// (ii) both ranks asked for device 0; the calls failed (no driver).
TEST(DeviceAnalysis, TwoRanksAskedForTheSameDevice) {
  Rank r0{330, env("0", "0")}, r1{331, env("1", "1")};
  std::vector<Finding> f =
      analyse_ranks({{330, r0.set_device(0, 35).init(0, 2, "dd", kUnknown, 1).text},
                     {331, r1.set_device(0, 35).init(1, 2, "dd", kUnknown, 1).text}});
  ASSERT_EQ(f.size(), 1u) << all(f.front());
  EXPECT_EQ(f[0].rule, "DIST002");
  EXPECT_NE(f[0].message.find("rank 0 (pid 330), rank 1 (pid 331) created one NCCL communicator on "
                              "the same GPU 0"),
            std::string::npos)
      << f[0].message;
  EXPECT_NE(f[0].message.find("failed"), std::string::npos);
  EXPECT_NE(all(f[0]).find("device 0 (asked with cudaSetDevice(0), which failed)"),
            std::string::npos)
      << all(f[0]);
  EXPECT_NE(f[0].fix.find("rank 1 → cuda:1"), std::string::npos) << f[0].fix;
}

// Ordinal 0 of two different CUDA_VISIBLE_DEVICES is two GPUs; two
// communicators (different ids) may share one.
TEST(DeviceAnalysis, SameOrdinalOtherGpuOrOtherCommunicatorIsNoDuplicate) {
  Rank r0{340, env("0", "0", "2")}, r1{341, env("0", "1", "3")};
  EXPECT_TRUE(
      analyse_ranks({{340, r0.set_device(0, 0).init(0, 2, "ee", "\"cuda_device\":0", 0).text},
                     {341, r1.set_device(0, 0).init(1, 2, "ee", "\"cuda_device\":0", 0).text}})
          .empty());
  Rank a{350, env("0", "0")}, b{351, env("0", "0")};
  EXPECT_TRUE(analyse_ranks({{350, a.init(0, 1, "f1", "\"cuda_device\":0", 0).text},
                             {351, b.init(0, 1, "f2", "\"cuda_device\":0", 0).text}})
                  .empty());
}

// (c) the launcher gave each rank one GPU, the script binds LOCAL_RANK.
TEST(DeviceAnalysis, LocalRankPastTheVisibleDevices) {
  Rank r1{361, env("1", "1", "1")};
  std::vector<Finding> f =
      analyse_ranks({{361, r1.set_device(1, 101).init(1, 2, "gg", kUnknown, 1).text}});
  const Finding* c = nullptr;
  for (const Finding& x : f)
    if (x.rule == "DIST003") c = &x;
  ASSERT_TRUE(c);
  EXPECT_NE(c->message.find("rank 1 (pid 361) asked for device 1 (its LOCAL_RANK), but "
                            "CUDA_VISIBLE_DEVICES=1 makes 1 device (0) visible"),
            std::string::npos)
      << c->message;
  EXPECT_NE(all(*c).find("cudaSetDevice(1) = 101 (cudaErrorInvalidDevice, failed)"),
            std::string::npos)
      << all(*c);
  EXPECT_NE(c->fix.find("torch.cuda.set_device(0)"), std::string::npos);
  // Within the list: no finding.
  Rank ok{362, env("1", "1", "4,5")};
  EXPECT_TRUE(
      analyse_ranks({{362, ok.set_device(1, 0).init(1, 2, "hh", "\"cuda_device\":1", 0).text}})
          .empty());
  // A list cut short by an invalid entry hides what follows it.
  Rank cut{363, env("2", "2", "0,1,-1,3")};
  std::vector<Finding> g =
      analyse_ranks({{363, cut.set_device(2, 101).init(2, 4, "ii", kUnknown, 1).text}});
  bool found = false;
  for (const Finding& x : g)
    if (x.rule == "DIST003") found = x.message.find("2 devices (0–1)") != std::string::npos;
  EXPECT_TRUE(found);
}

// cuCtxSetCurrent of a retained primary context binds that context's device.
TEST(DeviceAnalysis, DriverContextBindsItsDevice) {
  Rank r{370, env("1", "1")};
  const std::string& t =
      r.ev("\"fn\":\"cuDevicePrimaryCtxRetain\",\"caller\":\"/job/rank\","
           "\"lib\":\"/usr/lib/libcuda.so.1\",\"device\":1,\"ctx\":77,\"ret\":0," +
           r.env)
          .ev("\"fn\":\"cuCtxSetCurrent\",\"caller\":\"/job/rank\",\"lib\":\"/"
              "usr/lib/libcuda.so.1\",\"ctx\":77,\"ret\":0," +
              r.env)
          .init(1, 2, "jj", kUnknown, 0)
          .text;
  EXPECT_TRUE(analyse_ranks({{370, t}}).empty());
}
