#!/usr/bin/env python3
"""`mldoctor run`'s own errors and the cases where it cannot see inside.

  * no command: exit 2, nothing run;
  * --trace-dir that is not private (0755) or that holds an earlier run's
    events: exit 2 before the command runs (the marker file is not created);
  * a statically linked command: it runs (same output, same status) and the
    report's RUN001 says why nothing inside it was seen;
  * the shims missing (MLDOCTOR_SHIM_DIR pointing nowhere): the command
    still runs unchanged, and RUN001 says the shims were not found;
  * --json goes to --report FILE, never into the command's stdout;
  * a nested `mldoctor run` does not load the shims twice;
  * a traced command that execs a program the shims cannot load in (a static
    program, `env -i`, a chroot where the shims are not): the program runs
    unchanged, the report's process shows the untraced exec, and RUN001
    names the program and the cause the exec call recorded; an exec that
    fails (a shell searching PATH) and one into a traced program are not
    reported. With the preload interposer (forced) too.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import CC, MLDOCTOR, check, check_in, finish  # noqa: E402

with tempfile.TemporaryDirectory() as t:
    marker = os.path.join(t, "ran")

    def run(args, env=None, **kw):
        return subprocess.run([MLDOCTOR, "run"] + args, capture_output=True, text=True, env=env, timeout=120, **kw)

    p = run([])
    check(p.returncode == 2 and "no command" in p.stderr, "no command: exit 2 (%d) %s" % (p.returncode, p.stderr))

    public = os.path.join(t, "public")
    os.makedirs(public)
    os.chmod(public, 0o755)
    p = run(["--trace-dir", public, "--", "touch", marker])
    check(p.returncode == 2 and "private" in p.stderr and not os.path.exists(marker),
          "a 0755 trace dir is refused before the command runs: %d %s" % (p.returncode, p.stderr))

    used = os.path.join(t, "used")
    p = run(["--trace-dir", used, "--report", os.devnull, "--", "true"])
    check(p.returncode == 0 and any(n.endswith(".jsonl") for n in os.listdir(used)), "--trace-dir keeps the events")
    p = run(["--trace-dir", used, "--", "touch", marker])
    check(p.returncode == 2 and "earlier run" in p.stderr and not os.path.exists(marker),
          "a trace dir with an earlier run's events is refused: %d %s" % (p.returncode, p.stderr))

    report = os.path.join(t, "report.json")
    if CC:
        src = os.path.join(t, "static.c")
        exe = os.path.join(t, "static")
        with open(src, "w") as f:
            f.write('#include <stdio.h>\nint main(void){puts("static says hi");return 3;}\n')
        if subprocess.run([CC, "-static", "-o", exe, src], capture_output=True).returncode == 0:
            p = run(["--json", "--report", report, "--", exe])
            check(p.returncode == 3 and p.stdout == "static says hi\n", "the static program runs unchanged")
            with open(report) as f:
                doc = json.load(f)
            run001 = [x for x in doc["findings"] if x["rule"] == "RUN001"]
            check(run001 and "statically linked" in json.dumps(run001), "RUN001 names the static binary: %r" % run001)
            # Traced first (sh), then exec'd into the static program.
            for force in ("0", "1"):
                env = dict(os.environ, MLDOCTOR_FORCE_PRELOAD=force)
                p = run(["--json", "--report", report, "--", "sh", "-c", "exec " + exe], env=env)
                with open(report) as f:
                    doc = json.load(f)
                run001 = [x for x in doc["findings"] if x["rule"] == "RUN001"]
                procs = doc["processes"]
                check(p.returncode == 3 and p.stdout == "static says hi\n",
                      "preload=%s: exec'd from sh, the static program runs unchanged: %d %r" % (force, p.returncode, p.stdout))
                check(len(procs) == 1 and (procs[0].get("untraced_exec") or {}).get("path") == exe,
                      "preload=%s: the process shows the untraced exec: %r" % (force, procs))
                check(len(run001) == 1 and exe in run001[0]["message"] and "statically linked" in json.dumps(run001),
                      "preload=%s: RUN001 names the static program exec'd from sh: %r" % (force, run001))

            # A chroot where the shims are not: only the static program is there.
            if os.geteuid() == 0 and shutil.which("chroot"):
                jail = os.path.join(t, "jail")
                os.makedirs(jail)
                shutil.copy(exe, os.path.join(jail, "static"))
                p = run(["--json", "--report", report, "--", "chroot", jail, "/static"])
                with open(report) as f:
                    doc = json.load(f)
                run001 = [x for x in doc["findings"] if x["rule"] == "RUN001"]
                lost = [q.get("unseen_after_chroot") for q in doc["processes"] if q.get("unseen_after_chroot")]
                check(p.returncode == 3 and p.stdout == "static says hi\n", "chroot: the job runs unchanged")
                check(lost and lost[0]["path"] == jail,
                      "chroot: the process's last event is the chroot into the jail: %r" % lost)
                text = json.dumps(run001)
                check(len(run001) == 1 and "changed its root directory to " + jail in text
                      and "trace directory" in text and "shims" in text,
                      "chroot: RUN001 says the jail lacks the trace directory and the shims: %r" % run001)
            else:
                print("SKIP chroot case: not root")
        else:
            print("SKIP static case: gcc -static failed")

    env = dict(os.environ, MLDOCTOR_SHIM_DIR=os.path.join(t, "nowhere"))
    p = run(["--json", "--report", report, "--", "sh", "-c", "echo out; exit 4"], env=env)
    check(p.returncode == 4 and p.stdout == "out\n", "without shims the command still runs: %d %r" % (p.returncode, p.stdout))
    with open(report) as f:
        doc = json.load(f)
    check_in("were not found", json.dumps(doc["findings"]), "RUN001 says the shims were not found")

    # exec keeps the pid: one process with two images, sh then python.
    p = run(["--json", "--report", report, "--", "sh", "-c", "exec /usr/bin/python3 -c 'print(5)'"])
    with open(report) as f:
        doc = json.load(f)
    images = [[os.path.basename(i["exe"]) for i in q["images"]] for q in doc["processes"]]
    check(p.stdout == "5\n" and len(images) == 1 and len(images[0]) == 2 and images[0][0] in ("dash", "sh", "bash")
          and images[0][1].startswith("python3"), "exec: two images in one process: %r" % images)

    # A setuid program of another user: ld.so's secure mode drops the shims.
    suid = os.path.join(t, "suid-true")
    shutil.copy("/bin/true", suid)
    try:
        os.chown(suid, 65534, 65534)
        os.chmod(suid, 0o4755)
        os.chmod(t, 0o755)
    except PermissionError:
        suid = None
        print("SKIP setuid case: cannot chown (not root)")
    if suid:
        p = run(["--json", "--report", report, "--", suid])
        with open(report) as f:
            doc = json.load(f)
        run001 = [x for x in doc["findings"] if x["rule"] == "RUN001"]
        check(p.returncode == 0 and run001 and "setuid" in json.dumps(run001),
              "RUN001 names the setuid program: %d %r" % (p.returncode, run001))

    # env -i drops LD_AUDIT and MLDOCTOR_TRACE_DIR: python3 runs unseen.
    p = run(["--json", "--report", report, "--", "env", "-i", "PATH=/usr/bin:/bin", "python3", "-c", "print(7)"])
    with open(report) as f:
        doc = json.load(f)
    run001 = [x for x in doc["findings"] if x["rule"] == "RUN001"]
    check(p.returncode == 0 and p.stdout == "7\n", "env -i: the job runs unchanged: %d %r" % (p.returncode, p.stdout))
    check(len(run001) == 1 and "python3" in run001[0]["message"] and "no longer names" in json.dumps(run001),
          "env -i: RUN001 says the environment passed on dropped the shims: %r" % run001)
    # A shell's PATH search fails several execs before the one that works, and
    # the program it runs is traced: no RUN001, no untraced exec.
    p = run(["--json", "--report", report, "--", "sh", "-c", "exec python3 -c 'print(8)'"],
            env=dict(os.environ, PATH="/nonexistent:" + os.environ.get("PATH", "/usr/bin:/bin")))
    with open(report) as f:
        doc = json.load(f)
    check(p.stdout == "8\n" and not [x for x in doc["findings"] if x["rule"] == "RUN001"]
          and not [q for q in doc["processes"] if q.get("untraced_exec")],
          "a traced exec after failed ones is not reported: %r" % [(q["pid"], q.get("untraced_exec")) for q in doc["processes"]])

    nested_dir = os.path.join(t, "nested")
    p = run(["--trace-dir", nested_dir, "--report", os.devnull, "--", MLDOCTOR, "run", "--report", os.devnull, "--",
             "sh", "-c", "echo $LD_AUDIT"])
    check(p.returncode == 0 and p.stdout.count("libmldoctor-audit.so") == 1,
          "the inner run does not add the audit module twice: %r" % p.stdout)
    # The libc calls through the audit module (glibc 2.35+), and through the
    # LD_PRELOAD interposer that older glibc needs (forced here): the same
    # events either way, and LD_PRELOAD is the user's own in the first case.
    code = ("import ctypes, os\n"
            "try: ctypes.CDLL('libnothere.so')\n"
            "except OSError as e: print(e)\n"
            "os.environ['OMP_NUM_THREADS'] = '3'\n"
            "print('LD_PRELOAD', os.environ.get('LD_PRELOAD'))\n")
    for force in ("0", "1"):
        env = dict(os.environ, MLDOCTOR_FORCE_PRELOAD=force)
        env.pop("LD_PRELOAD", None)
        p = run(["--json", "--report", report, "--", "/usr/bin/python3", "-c", code], env=env)
        with open(report) as f:
            doc = json.load(f)
        proc = doc["processes"][0] if doc["processes"] else {}
        failed = [x for x in proc.get("failed_loads", []) if x["name"] == "libnothere.so"]
        check(failed and "cannot open shared object file" in failed[0]["message"],
              "preload=%s: the dlerror text of the failed dlopen: %r" % (force, failed))
        envs = [(x["op"], x["name"], x["value"]) for x in proc.get("env_changes", [])]
        check(("setenv", "OMP_NUM_THREADS", "3") in envs, "preload=%s: the setenv: %r" % (force, envs))
        check(("libmldoctor-preload.so" in p.stdout) == (force == "1"),
              "preload=%s: LD_PRELOAD gets the interposer only when needed: %r" % (force, p.stdout))
finish(os.path.basename(__file__))
