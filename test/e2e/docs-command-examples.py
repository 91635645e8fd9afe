#!/usr/bin/env python3
# labels: slow
"""Issue 31, item 4: every `mldoctor` command a user is shown — in the
rules (rules/*.toml: fix.text, fix.commands, explanation), README.md and
docs/guide.md (prose, code blocks, the outputs shown) — is run in a sandbox,
and what its words claim is checked against what it did.

Each example is accounted for exactly once:

  run       run as written by bash in a sandbox (placeholders such as
            PATH/TO/EXTENSION.so replaced by PLACEHOLDERS), then
            * always: no tool error (exit 0 or 1; `run`: the child's status),
              and the sandbox unchanged but for what the command claims to
              change;
            * `mldoctor jit --fix`: removes at once every stale lock (a plain
              one, one behind a linked build directory, at its real path)
              and the outputs of a stale build; keeps a held lock, a lock
              behind another user's link, every link and directory, and the
              file a lock links to; prints the real path it removed;
            * `mldoctor jit --fix --dry-run`: removes nothing and prints, as
              "would remove", what --fix removes;
            * `mldoctor fix`: prints shell code that bash parses and changes
              nothing; evaluated, each finding it printed settings for is no
              longer reported as it was by `check` with the same options and
              environment (resolved, or, where no setting can resolve it,
              reported with the settings in place), and fix has nothing more
              to set;
            * `eval "$(mldoctor fix ...)"`: sets and unsets exactly what fix
              printed, with the same effect on check;
            * `mldoctor jit`: names the stale and the held lock, the holder's
              pid, the ages; `mldoctor explain ID`: prints rule ID;
            * the sentence around the example: a claim that the command
              previews ("dry-runs unless asked") when it removes, or that it
              removes a directory when it removed none, fails.
  golden    a command shown above an output in the guide (<!-- output:
            CASE -->): the golden case runs it and compares its output and
            exit status (e2e-golden-reports), and e2e-docs-guide-current
            checks the command shown is the case's; one that changes
            something (--fix, fix, snapshot) is also run here, in the case's
            own setup, and its effect checked. Commands inside such an
            output run in the case's setup.
  synopsis  `mldoctor jit [--path DIR...] [--fix [--dry-run]]`: the
            subcommand exists and `mldoctor SUB --help` has every option.
  skipped   NOT_RUNNABLE below, each with the reason; a new example that is
            in none of these fails the test.
"""
import glob
import hashlib
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from mldtest import CC, MLDOCTOR, check, check_eq, fail, finish, scratch  # noqa: E402

SOURCE = os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
MLDOCTOR = os.path.abspath(MLDOCTOR) if os.sep in MLDOCTOR else shutil.which(MLDOCTOR)
PY = "/usr/bin/python3"
GOLDEN = os.path.join(SOURCE, "test", "golden")
HOSTS = os.path.join(SOURCE, "test", "fixtures", "hosts")
TORCH_LIB = "/usr/lib/python3/dist-packages/torch/lib"
HAVE_TORCH = os.path.exists(os.path.join(TORCH_LIB, "libc10.so")) and subprocess.run(
    [PY, "-c", "import torch"], capture_output=True).returncode == 0

# ------------------------------------------------------------------ what cannot run

# Examples (as normalised) that need what a sandbox on one machine does not
# have, with the reason. An example listed here and no longer in the docs
# fails the test too, so the list stays the docs'.
NOT_RUNNABLE = {
    "mpirun -np 8 mldoctor fleet": "8 ranks on 3 nodes: a cluster (e2e-golden-reports runs fleet-three-nodes)",
    "mpirun -np 16 mldoctor fleet": "16 ranks across nodes: a cluster",
    "mpirun -np 64 mldoctor fleet": "64 ranks across nodes: a cluster",
    "mpirun -np N mldoctor fleet": "N ranks across nodes: a cluster",
    "mpirun -np <ranks> mldoctor fleet": "the job's ranks across nodes: a cluster",
    "srun --mpi=pmix mldoctor fleet": "a Slurm allocation",
    "mldoctor diff node-*.json": "reports saved on several nodes (e2e-golden-reports runs diff-three-nodes)",
    "mldoctor run -- torchrun --nproc_per_node=2 train.py": "a training script that binds GPUs over NCCL: two GPUs",
    "mldoctor stacks 9604 9603": "the pids of the golden run's own processes (e2e-golden-reports runs it with live ones)",
    "mldoctor libs --tree ./exe": "an illustration of another machine's /opt/x layout (e2e-golden-reports runs libs-missing-tree)",
    "venv/bin/mldoctor check": "needs the wheel installed in a venv (make wheel; e2e-python-api runs it)",
    "venv/bin/python -m mldoctor check": "needs the wheel installed in a venv (make wheel; e2e-python-api runs it)",
    "python -m mldoctor check": "needs the wheel installed in the interpreter (e2e-python-api runs it)",
    "mldoctor run --hang-timeout 300 -- python train.py": "waits 300 s for a hang (e2e-run-seed002-jit-hang runs the hang report)",
    "mldoctor run -- python3 -c \"a = [bytearray(1 << 20) for _ in range(1024)]\"":
        "the OOM kill it shows needs the job in a 96 MiB memory cgroup (e2e-run-deaths makes one)",
    "mldoctor run -- python3 train.py": "README's seed 003 illustration (e2e-golden-reports runs it as run-seed003-numba-torch)",
    "mldoctor run -- python3 launch.py": "two ranks against CUDA 13's libcudart and libnccl (e2e-run-device-binding runs it)",
    "mldoctor run --hang-timeout 10 --kill-on-hang -- python3 launch.py 2 1 rank.py":
        "two gloo ranks with rank 1 asleep before all_reduce, launch.py and rank.py written by the test "
        "(e2e-run-hang-report runs it and checks its report)",
    "mldoctor stacks 7509": "the pid of rank 1 in that hung run",
    "mldoctor run --hang-timeout 5 --kill-on-hang -- python3 repro.py libtiny0.so libtiny1.so ...":
        "the GIL/loader-lock deadlock, repro.py and its libraries built by the test "
        "(e2e-run-loader-lock-deadlock runs it and checks RUN007)",
    "mldoctor run --logs -- python3 job.py files.go files.pid":
        "a job that leaves a daemon holding its output, job.py written by the test "
        "(e2e-run-logs-daemon runs it and checks the exit after 2 s)",
}

# Bare mentions of a command or option that takes arguments ("watch it with
# `mldoctor run`"): the subcommand and options must exist (--help).
REFERENCES = {"mldoctor run", "mldoctor run --hang-timeout", "mldoctor libs", "mldoctor logs", "mldoctor stacks", "mldoctor diff", "mldoctor explain",
              "mldoctor libs --load-order"}

# Placeholders of the rule texts, replaced by what the sandbox has.
PLACEHOLDERS = [
    ("PATH/TO/EXTENSION.so", "{ext_so}"), ("PATH/TO/REQUIRER.so", "{ext_so}"), ("EXTENSION.so", "{ext_so}"),
    ("REQUIRER.so", "{ext_so}"), ("FILE.so", "{ext_so}"), ("--tree PATH", "--tree {ext_so}"),
    ("PYTHON --load-order LIB1.so,LIB2.so,...", "{python} --load-order {ext_so},{ext_so2}"),
    ("explain ID", "explain JIT001"), ("stacks PID", "stacks {holder_pid}"), ("-- CMD", "-- python train.py"),
    ("snapshot OUT.tar.gz", "snapshot out.tar.gz"),
    ("--root DIR --python PY", "--root {snap} --python /usr/bin/python3"),
]

# ------------------------------------------------------------------ extraction

CMD_IN_TEXT = re.compile(r"(?:^|[\s/(])mldoctor\s+[-a-z]")
# A command inside a shown output: a suggestion the tool prints.
CMD_IN_OUTPUT = re.compile(r'eval "\$\(mldoctor [^)]*\)"|(?:mkdir \S+ && tar -xzf \S+ -C \S+ && )?'
                           r'(?<![\w/.-])mldoctor (?:explain|jit|check|fix|stacks|libs|logs|run|fleet|diff|snapshot|rules)'
                           r'\b(?: (?!·|/(?:\s|$))[^\s();·`]+)*')


class Example:
    """A command as a document shows it: where, the words around it, the
    golden case whose output shows it (shown: inside that output), and the
    variables the shown command line sets (for a command inside its output)."""

    def __init__(self, where, command, sentence, case=None, shown=False, env_words=(), block=None):
        self.where, self.command, self.sentence, self.case, self.shown = where, command, sentence, case, shown
        self.env_words, self.block = list(env_words), block
        self.norm = normalise(command)

    def __repr__(self):
        return "%s: %s" % (self.where, self.command)


def normalise(cmd):
    cmd = cmd.strip()
    if cmd.startswith("$ "):
        cmd = cmd[2:]
    cmd = re.sub(r"\s{2,}#.*$", "", cmd)          # a trailing comment
    return re.sub(r"\s+", " ", cmd).strip()


def clause(text, span):
    """The clause of TEXT holding SPAN: between the nearest '.', ';' or ':'
    outside backticks on either side (a sentence when there is none)."""
    at = text.find(span)
    if at < 0:
        return text
    ticks, cuts = 0, [0]
    for i, ch in enumerate(text):
        if ch == "`":
            ticks ^= 1
        elif not ticks and (ch in ";:" or (ch == "." and (i + 1 == len(text) or text[i + 1] in " \n"))):
            cuts.append(i + 1)
    cuts.append(len(text))
    start = max(c for c in cuts if c <= at)
    end = min(c for c in cuts if c >= at + len(span))
    return " ".join(text[start:end].split())


def extract():
    out = []
    for path in sorted(glob.glob(os.path.join(SOURCE, "rules", "*.toml"))):
        rule = tomllib.load(open(path, "rb"))
        where = "rules/%s.toml" % rule["id"]
        for key, text in (("fix.text", rule.get("fix", {}).get("text", "")), ("explanation", rule.get("explanation", ""))):
            for span in re.findall(r"`([^`]+)`", text):
                if CMD_IN_TEXT.search(" " + span):
                    out.append(Example(where + " " + key, span, clause(text, "`%s`" % span)))
        for c in rule.get("fix", {}).get("commands", []):
            if CMD_IN_TEXT.search(" " + c):
                out.append(Example(where + " fix.commands", c, ""))
    for md in ("README.md", "docs/guide.md"):
        text = open(os.path.join(SOURCE, md)).read()
        pos = 0
        for m in re.finditer(r"(<!-- output: ([\w.-]+) -->\n)?```(\w*)\n(.*?)```\n", text, re.S):
            prose = text[pos:m.start()]
            line0 = text.count("\n", 0, pos) + 1
            for span in re.finditer(r"`([^`\n]+)`", prose):
                if CMD_IN_TEXT.search(" " + span.group(1)):
                    line = line0 + prose.count("\n", 0, span.start())
                    out.append(Example("%s:%d" % (md, line), span.group(1), clause(prose, span.group(0))))
            pos = m.end()
            case, lang, body = m.group(2), m.group(3), m.group(4)
            line = text.count("\n", 0, m.start()) + (3 if case else 2)
            lines = body.splitlines()
            if lang == "console" or (lines and lines[0].startswith("$ ")):
                output = "\n".join(lines[1:])
                block = "%s:%d" % (md, line)
                out.append(Example(block, lines[0], output, case=case, block=block))
                env_words = re.match(r"\$ ((?:[A-Z_][A-Z0-9_]*=\S+ )*)", lines[0]).group(1).split()
                for i, l in enumerate(lines[1:]):
                    for c in CMD_IN_OUTPUT.finditer(l):
                        header = c.start() == 0 and re.match(r" ·|:", l[c.end():])
                        if not header:
                            out.append(Example("%s:%d (output)" % (md, line + 1 + i), c.group(0),
                                               clause(l, c.group(0)), case=case, shown=True, env_words=env_words,
                                               block=block))
            else:
                for i, l in enumerate(lines):
                    if CMD_IN_TEXT.search(" " + l):
                        out.append(Example("%s:%d" % (md, line + i), l, l))
        prose = text[pos:]
        line0 = text.count("\n", 0, pos) + 1
        for span in re.finditer(r"`([^`\n]+)`", prose):
            if CMD_IN_TEXT.search(" " + span.group(1)):
                out.append(Example("%s:%d" % (md, line0 + prose.count("\n", 0, span.start())), span.group(1),
                                   clause(prose, span.group(0))))
    return out


# ------------------------------------------------------------------ sandbox

def tree_state(root):
    """Every entry under ROOT (links not followed): kind, link target, owner,
    content digest. tmp/ (scratch of the commands) is left out."""
    state = {}
    for d, dirs, files in os.walk(root):
        rel_d = os.path.relpath(d, root)
        if rel_d == "tmp" or rel_d.startswith("tmp/"):
            dirs[:] = []
            continue
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(p), st.st_uid)
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir", None, st.st_uid)
            else:
                with open(p, "rb") as f:
                    state[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), st.st_uid)
    return state


def diff_state(before, after):
    removed = sorted(set(before) - set(after))
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    return removed, added, changed


HOLDER = r"""
import os, signal, sys, time
signal.alarm(900)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL)   # exactly torch's FileBaton.try_acquire
print("ready", flush=True)
time.sleep(900)
"""

_holders = []
_dirs = []


def cleanup():
    for p in _holders:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)


def build_stale_module(directory):
    """A build the installed torch cannot load (JIT004): it needs a c10
    symbol no torch defines; the real loader refuses it (e2e-jit-stale-build)."""
    os.makedirs(directory)
    missing = "_ZN3c104impl22symbol_of_another_torchEv"
    so = os.path.join(directory, "stalebuild.so")
    subprocess.run([CC, "-shared", "-fPIC", "-O0", "-o", so, "-xc", "-", "-xnone", "-L" + TORCH_LIB,
                    "-Wl,--no-as-needed", "-lc10"], input=("void %s(void);\nvoid e(void) { %s(); }\n"
                                                         % (missing, missing)).encode(), check=True)
    open(os.path.join(directory, "stalebuild.o"), "w").write("object")
    open(os.path.join(directory, "build.ninja"), "w").write("rule cxx\n")


class Sandbox:
    """A scratch machine corner: HOME with a torch extension cache holding a
    stale lock, a stale lock behind a linked build directory, a lock a live
    process holds (as torch's builder holds it), a lock behind a link of
    another user (as root), a stale build (with torch), a fresh build
    directory; a file a lock links to outside the cache; mldoctor and
    `python` on PATH; the host fixture trees by name in the working
    directory; a train.py that exits 3."""

    def __init__(self, case=None):
        self.root = scratch()
        _dirs.append(self.root)
        r = self.root
        self.home, self.work, self.bin = r + "/home", r + "/work", r + "/bin"
        for d in (self.home, self.work, self.bin, r + "/tmp", r + "/store", r + "/outside"):
            os.makedirs(d)
        os.symlink(MLDOCTOR, self.bin + "/mldoctor")
        os.symlink(PY, self.bin + "/python")
        self.env = {"HOME": self.home, "PATH": self.bin + ":/usr/bin:/bin", "TMPDIR": r + "/tmp", "NO_COLOR": "1",
                    "LANG": "C.UTF-8", "MLDOCTOR": MLDOCTOR, "MLD_SOURCE_DIR": SOURCE}
        self.case = case
        self.holder_pid = None
        self.snap = None
        self.ext_so = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
        with open(self.work + "/train.py", "w") as f:
            f.write("import sys\nsys.exit(3)\n")
        for name in ("train.log", "rank0.log", "rank1.log"):
            with open(os.path.join(self.work, name), "w") as f:
                f.write("epoch 1\n[rank3]:OMP: Error #15: Initializing libiomp5.so, but found libomp.so already "
                        "initialized.\n")
        if case:
            self.setup_case(case)
        for name in os.listdir(HOSTS):
            if os.path.isdir(os.path.join(HOSTS, name)) and not os.path.exists(os.path.join(self.work, name)):
                os.symlink(os.path.join(HOSTS, name), os.path.join(self.work, name))
        if case:
            return
        # Settings `fix` resolves (ENV003; THR001: 64 threads for one rank
        # beyond the CPUs), so its claims are exercised on any machine.
        self.env.update(KMP_DUPLICATE_LIB_OK="TRUE", LOCAL_WORLD_SIZE="1", OMP_NUM_THREADS="64")
        tag = subprocess.run([PY, "-c", "import sys; print('py%d%d' % sys.version_info[:2])"], capture_output=True,
                             text=True).stdout.strip() + "_cpu"
        if HAVE_TORCH:
            tag = subprocess.run([PY, "-c", "import sys, torch; c = torch.version.cuda; print('py%d%d_' % "
                                  "sys.version_info[:2] + ('cpu' if c is None else 'cu' + c.replace('.', '')))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        cache = self.cache = os.path.join(self.home, ".cache", "torch_extensions", tag)
        self.stale = self.lock(cache + "/stale")
        os.makedirs(r + "/store/linked")
        os.symlink(r + "/store/linked", cache + "/linked")
        self.linked_real = self.lock(r + "/store/linked")
        self.linked = cache + "/linked/lock"
        os.makedirs(cache + "/fresh")
        open(cache + "/fresh/build.ninja", "w").write("rule cxx\n")
        with open(r + "/outside/victim", "w") as f:
            f.write("not a lock\n")
        os.makedirs(cache + "/tolink")
        os.symlink(r + "/outside/victim", cache + "/tolink/lock")
        self.planted = None
        if os.geteuid() == 0:
            os.makedirs(r + "/app")
            self.lock(r + "/app")
            os.symlink(r + "/app", cache + "/planted")
            os.lchown(cache + "/planted", 65534, 65534)
            self.planted = cache + "/planted/lock"
        self.stale_build = None
        if HAVE_TORCH and shutil.which(CC):
            build_stale_module(cache + "/stalebuild")
            self.stale_build = [cache + "/stalebuild/stalebuild.so", cache + "/stalebuild/stalebuild.o"]
        if self.stale_build:
            self.ext_so = self.stale_build[0]
        os.makedirs(cache + "/held")
        self.held = cache + "/held/lock"
        p = subprocess.Popen([PY, "-c", HOLDER, self.held], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        _holders.append(p)
        ready, _, _ = select.select([p.stdout], [], [], 60)
        check(bool(ready) and p.stdout.readline().startswith("ready"), "the sandbox's lock holder started")
        self.holder_pid = p.pid

    def lock(self, d):
        os.makedirs(d, exist_ok=True)
        open(d + "/lock", "w").close()
        return d + "/lock"

    def setup_case(self, case):
        """The golden case's own setup in the working directory, its env."""
        cdir = os.path.join(GOLDEN, case)
        env = dict(self.env, T=self.work, CASE=cdir, LIB=os.path.join(HERE, "lib"))
        env_file = os.path.join(cdir, "env")
        if os.path.exists(env_file):
            for line in open(env_file).read().splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    env[k] = v
        env["PATH"] = self.bin + ":" + env["PATH"]   # the case's own PATH, mldoctor first
        self.env = env
        if os.path.exists(os.path.join(cdir, "setup.sh")):
            subprocess.run(["bash", "-e", os.path.join(cdir, "setup.sh")], env=env, cwd=self.work, check=True)

    def run(self, command, timeout=300):
        """bash -c COMMAND in the working directory; (CompletedProcess,
        removed, added, changed) relative to the sandbox root."""
        before = tree_state(self.root)
        try:
            p = subprocess.run(["bash", "-c", command], env=self.env, cwd=self.work, capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            p = subprocess.CompletedProcess(command, -9, e.stdout or "", "timed out after %d s" % timeout)
        return (p,) + diff_state(before, tree_state(self.root))

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def substitute(self, cmd):
        for old, new in PLACEHOLDERS:
            cmd = cmd.replace(old, new)
        if "{snap}" in cmd and not self.snap:
            # An unpacked snapshot of this machine, made outside the sandbox's tree.
            self.snap = scratch()
            _dirs.append(self.snap)
            subprocess.run([MLDOCTOR, "snapshot", self.snap + "/s.tar.gz", "--python", PY], env=self.env,
                           capture_output=True, check=True)
            os.makedirs(self.snap + "/tree")
            subprocess.run(["tar", "-xzf", self.snap + "/s.tar.gz", "-C", self.snap + "/tree"], check=True)
        return cmd.format(ext_so=self.ext_so, ext_so2="/usr/lib/x86_64-linux-gnu/libgomp.so.1", python=PY,
                          holder_pid=self.holder_pid, snap=(self.snap or "") + "/tree")


_sandboxes = {}


def shared_sandbox(case=None):
    """One sandbox per golden case (and one without) for the commands that
    change nothing: each run is checked to leave it as it was."""
    if case not in _sandboxes:
        _sandboxes[case] = Sandbox(case)
    return _sandboxes[case]


# ------------------------------------------------------------------ claims

PREVIEW_WORDS = re.compile(r"\bdry[- ]runs?\b|\bpreviews?\b|without acting|removes nothing|changes nothing", re.I)
DIR_REMOVAL = re.compile(r"\b(?:delet|remov)\w*\s+(?:(?:the|its|a|every|whole)\s+)*(?:[\w'-]+\s+)?(?:build\s+)?"
                         r"director(?:y|ies)", re.I)
CACHE_REMOVAL = re.compile(r"\b(?:delet|remov)\w*\s+(?:the\s+)?cached\s+(?:\w+\s+)?builds", re.I)

# The wordings issue 31 found (rules/*.toml before it), each with what the
# real `mldoctor jit --fix` contradicts: the claim checks must flag them all.
KNOWN_BAD = [
    ("JIT019", "then remove only the stale lock file: `mldoctor jit --fix` does exactly that, and dry-runs unless asked."),
    ("JIT023", "then remove only the stale lock: `mldoctor jit --fix` does exactly that and dry-runs unless asked."),
    ("JIT011", "Rebuild afterwards: delete the extension's build directory (`mldoctor jit --fix`)."),
    ("CUDA014", "every GPU type the job runs on; delete cached JIT builds first (`mldoctor jit --fix`)."),
    ("JIT016", "Delete the failed build directory before retrying (`mldoctor jit --fix`)."),
    ("JIT020", "If no compiler process is alive, the build died: remove the build directory (`mldoctor jit --fix`) and "
               "rerun with `MAX_JOBS` set."),
    ("JIT014", "Remove the half-finished build directory first (`mldoctor jit --fix`)."),
    ("JIT013", "Delete the stale build directory named in the message and let the next run rebuild it for the current "
               "torch (`mldoctor jit --fix` does it for every stale entry, after checking no running process uses "
               "it)."),
]


def claims_problems(ex, removed_any, removed_dirs, previewed, removed_cached_builds=False):
    """What EX's clause claims that contradicts the run: a preview by a
    command that removed, the removal of a directory by one that removed
    none."""
    words = ex.sentence
    problems = []
    if not words:
        return problems
    if removed_any and "--dry-run" not in ex.norm and PREVIEW_WORDS.search(words) and "--dry-run" not in words:
        problems.append("says it previews (%r), but it removed at once" % PREVIEW_WORDS.search(words).group(0))
    if not removed_dirs and DIR_REMOVAL.search(words.replace("`%s`" % ex.command, "")):
        problems.append("says it removes a directory (%r), but it removed none" % DIR_REMOVAL.search(words).group(0))
    if not removed_cached_builds and CACHE_REMOVAL.search(words):
        problems.append("says it removes cached builds (%r), but a fresh build stayed" % CACHE_REMOVAL.search(words).group(0))
    if previewed and re.search(r"\bremoves? (?:at once|each|every|the stale)", words) and "--dry-run" in ex.norm:
        problems.append("a --dry-run example said to remove")
    return problems


def report(ex, problems):
    for p in problems:
        fail("%s\n    `%s`: %s\n    its words: %s" % (ex.where, ex.command, p, ex.sentence[:400]))
    if not problems:
        check(True, "")


def jit_fix_effects(sb, p, removed, added, changed, dry_run):
    """What `jit --fix` must have done in SB; a list of problems."""
    problems = []
    out = p.stdout
    must_go = [sb.stale, sb.linked_real] + (sb.stale_build or [])
    must_stay = [sb.held, sb.root + "/outside/victim", sb.cache + "/linked", sb.root + "/store/linked",
                 sb.cache + "/fresh/build.ninja"] + ([sb.root + "/app/lock", sb.cache + "/planted"] if sb.planted else [])
    gone = set(removed)
    for path in must_go:
        if dry_run and sb.rel(path) in gone:
            problems.append("--dry-run removed %s" % path)
        if not dry_run and sb.rel(path) not in gone:
            problems.append("did not remove %s" % path)
    for path in must_stay:
        if sb.rel(path) in gone:
            problems.append("removed %s, which must stay" % path)
    allowed = {sb.rel(x) for x in must_go} | {sb.rel(sb.cache + "/tolink/lock")}
    extra = [x for x in removed if x not in allowed] + added + changed
    if extra:
        problems.append("changed what it should not: %s" % extra)
    if dry_run and removed:
        problems.append("--dry-run removed %s" % removed)
    verb = "would remove" if dry_run else "removed"
    for lock in (sb.stale, sb.linked_real):
        if "%s stale lock %s" % (verb, lock) not in out:
            problems.append("does not print '%s stale lock %s'" % (verb, lock))
    if "kept %s: held by pid %d" % (sb.held, sb.holder_pid) not in out:
        problems.append("does not say it kept the held lock %s (pid %d)" % (sb.held, sb.holder_pid))
    if p.returncode not in (0, 1):
        problems.append("exit status %d\n%s%s" % (p.returncode, out, p.stderr))
    return problems


def jit_read_claims(ex, sb, p):
    problems = []
    out, words = p.stdout, ex.sentence
    if re.search(r"(shows|names) the holder|whether a live process holds", words) and \
            "pid %d" % sb.holder_pid not in out:
        problems.append("does not name the holder, pid %d" % sb.holder_pid)
    if re.search(r"\block\b", words) and not (sb.stale in out and sb.held in out):
        problems.append("does not name the stale lock %s and the held one %s" % (sb.stale, sb.held))
    if re.search(r"\bage\b", words) and not re.search(r"lock \d+ s old", out):
        problems.append("does not give the lock's age")
    if re.search(r"shows the build directory", words) and "build directory %s" % os.path.dirname(sb.held) not in out:
        problems.append("does not show the build directory %s" % os.path.dirname(sb.held))
    if re.search(r"lists? every build directory|build directories", words):
        if "--json" in ex.norm:
            try:
                paths = {e["path"] for e in json.loads(out)["extensions"]}
            except (ValueError, KeyError):
                paths = set()
            want = {sb.cache + "/" + n for n in ("stale", "linked", "fresh", "held", "tolink")}
            if not want <= paths:
                problems.append("lists the build directories %s, not all of %s" % (sorted(paths), sorted(want)))
        else:
            problems.append("the text output lists only the build directories with a finding; say `--json`")
    return problems


def fix_settings(sb, cmd):
    """Runs the fix command CMD (it may start with VAR=value words): bash
    parses what it prints, and it changes nothing. (problems, process)."""
    p, removed, added, changed = sb.run(cmd)
    if p.returncode not in (0, 1):
        return ["exit status %d: %s" % (p.returncode, p.stderr)], None
    problems = []
    if removed or added or changed:
        problems.append("changed files: %s" % (removed + added + changed))
    if subprocess.run(["bash", "-n"], input=p.stdout, text=True).returncode != 0:
        problems.append("prints what bash cannot parse:\n" + p.stdout)
    return problems, p


def in_bash(sb, words, prelude, command):
    """COMMAND run by bash after exporting WORDS (VAR=value) and PRELUDE."""
    script = "\n".join(["export " + w for w in words] + [prelude, command])
    return subprocess.run(["bash", "-c", script], env=sb.env, cwd=sb.work, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def check_findings(sb, words, args, prelude=""):
    """{(rule, message)} of `mldoctor check ARGS --json` after PRELUDE."""
    p = in_bash(sb, words, prelude, "mldoctor check %s --json" % args)
    try:
        return {(f["rule"], f["message"]) for f in json.loads(p.stdout)["findings"]}
    except (ValueError, KeyError):
        fail("check %s: not a JSON report: %s%s" % (args, p.stdout[-500:], p.stderr[-500:]))
        return set()


def settings_act(sb, fix_cmd, output):
    """What fix's settings claim: evaluated (the OUTPUT of FIX_CMD), each of
    the rules it printed settings for is no longer reported as it was
    (resolved, or — where no setting can resolve it, more ranks than CPUs —
    reported as it is with the settings in place), and fix then prints
    nothing more to set. (problems, the rules printed)."""
    words = re.match(r"((?:[A-Z_][A-Z0-9_]*=\S+ )*)", fix_cmd).group(1).split()
    args = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S+ )*mldoctor fix ?", "", fix_cmd)
    args = re.sub(r"--shell \S+", "", args)
    rules = set(re.findall(r"^# ([A-Z]+\d+) ", output, re.M))
    before = check_findings(sb, words, args)
    after = check_findings(sb, words, args, prelude=output)
    problems = []
    if not rules <= {r for r, _ in before}:
        problems.append("prints settings for %s, which check does not report" % sorted(rules - {r for r, _ in before}))
    unchanged = sorted(r for r, m in before & after if r in rules)
    if unchanged:
        problems.append("after the eval check still reports %s exactly as before" % unchanged)
    again = in_bash(sb, words, output, "mldoctor fix %s" % args).stdout
    if re.search(r"^(export|unset|set) ", again, re.M):
        problems.append("after the eval, fix still prints settings:\n" + again)
    return problems, rules


def eval_sets(sb, ex):
    """`eval "$(mldoctor fix ...)"`: every export and unset fix prints is what
    the shell has afterwards, and the settings act (settings_act)."""
    inner = re.match(r'eval "\$\((.*)\)"', ex.norm).group(1)
    fix_cmd = " ".join(ex.env_words + [inner])
    problems, p = fix_settings(sb, fix_cmd)
    if p is None:
        return problems
    q = in_bash(sb, ex.env_words, "", ex.norm + "\nenv -0")
    shell = dict(kv.split("=", 1) for kv in q.stdout.split("\0") if "=" in kv)
    for name, value in re.findall(r"^export (\w+)='([^']*)'$", p.stdout, re.M):
        if shell.get(name) != value:
            problems.append("%s is %r after the eval, fix printed %r" % (name, shell.get(name), value))
    for name in re.findall(r"^unset (\w+)$", p.stdout, re.M):
        if name in shell:
            problems.append("%s is still set after the eval" % name)
    more, rules = settings_act(sb, fix_cmd, p.stdout)
    if not rules:
        problems.append("fix printed no settings here, so the claim is not exercised:\n" + p.stdout)
    return problems + more


def shown_output_problems(ex, p):
    """A command shown with its output outside the golden cases (README):
    the report rows and the rules the output shows are what it prints here."""
    if ex.case or ex.shown or not ex.command.startswith("$ "):
        return []
    text = p.stdout + p.stderr
    problems = []
    for line in ex.sentence.splitlines():
        label = re.match(r"^([A-Z][A-Za-z]+) {2,}", line)
        if label and not re.search(r"^%s\s" % label.group(1), text, re.M):
            problems.append("shows a row %r the command does not print" % label.group(1))
        rule = re.search(r"\s([A-Z]+\d{3})$", line)
        if rule and not re.search(r"\b%s\b" % rule.group(1), text):
            problems.append("shows rule %s, which it does not report here" % rule.group(1))
    return problems


def explain_claims(ex, p):
    rule = ex.norm.split()[-1]
    path = os.path.join(SOURCE, "rules", rule + ".toml")
    if not os.path.exists(path):
        return ["no rule %s" % rule]
    title = tomllib.load(open(path, "rb"))["title"]
    return [] if rule in p.stdout and title in p.stdout else ["does not print rule %s (%s)" % (rule, title)]


# ------------------------------------------------------------------ main

def synopsis_problems(norm):
    words = norm.split()
    sub = words[words.index("mldoctor") + 1]
    p = subprocess.run([MLDOCTOR, sub, "--help"], capture_output=True, text=True)
    if p.returncode != 0:
        return ["`mldoctor %s --help` fails: %s" % (sub, p.stderr)]
    return ["option %s is not in `mldoctor %s --help`" % (o, sub)
            for o in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", norm) if o not in p.stdout]


def is_synopsis(norm):
    """`mldoctor jit [--path DIR...] [--fix [--dry-run]]`, `mldoctor logs FILE...`."""
    return bool(re.search(r"\s\[(-|[A-Z])|\s[A-Z]+\.\.\.", norm))


def main():
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    examples = EXAMPLES
    print("%d command examples" % len(examples))
    listed = set(NOT_RUNNABLE)
    for key in sorted(listed - {e.norm for e in examples}):
        fail("NOT_RUNNABLE lists %r, which no document shows any more" % key)
    results = {}   # (case, command as run) -> (p, removed, added, changed)
    kinds = {}
    for ex in examples:
        norm = ex.norm
        if norm in NOT_RUNNABLE:
            kinds[ex] = "skipped"
            print("skip %s: %s" % (ex, NOT_RUNNABLE[norm]))
            continue
        if norm in REFERENCES:
            kinds[ex] = "reference"
            report(ex, synopsis_problems(norm))
            continue
        if is_synopsis(norm):
            kinds[ex] = "synopsis"
            report(ex, synopsis_problems(norm))
            continue
        if ex.case and not ex.shown:
            mutating = re.search(r"mldoctor (jit .*--fix|fix|snapshot)\b", norm)
            if not mutating:
                kinds[ex] = "golden"
                check(os.path.isdir(os.path.join(GOLDEN, ex.case)), "%s: golden case %s" % (ex, ex.case))
                continue
        kinds[ex] = "run"
        run_example(ex, results)
    counts = {}
    for k in kinds.values():
        counts[k] = counts.get(k, 0) + 1
    print("examples: %s" % ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())))
    check_eq(len(kinds), len(examples), "every example accounted for")


_blocks = {}   # a shown command's block -> the sandbox it changed, for the commands in its output
_fresh = {}    # (case, command) -> the fresh sandbox a command that changes things ran in
_known_bad_checked = []


def run_example(ex, results):
    norm = ex.norm
    fresh = re.search(r"mldoctor (jit .*--fix|fix|snapshot)\b", norm) and "--dry-run" not in norm and \
        not norm.startswith("eval ")
    # The jit commands of a rule's fix text shown in a log's output make
    # their claims about a cache: the sandbox with one.
    case = None if ex.shown and re.match(r"mldoctor jit\b", norm) else ex.case
    if case and ex.shown and ex.block in _blocks:
        sb = _blocks[ex.block]          # after the command it is shown under
    elif fresh and ex.block and not ex.shown:
        sb = _blocks[ex.block] = Sandbox(case)
    elif fresh:
        # One fresh sandbox per command changing things: every example of
        # it is judged against that run.
        sb = _fresh.get((case, norm)) or _fresh.setdefault((case, norm), Sandbox(case))
    else:
        sb = shared_sandbox(case)
    cmd = sb.substitute(norm)
    key = (id(sb), cmd)
    if key not in results:
        results[key] = sb.run(cmd)
        print("ran %s\n  as: %s  (exit %d)" % (ex, cmd, results[key][0].returncode))
    else:
        print("judged %s against the run above" % ex)
    p, removed, added, changed = results[key]
    problems = []
    if norm.startswith("eval "):
        problems = eval_sets(sb, ex)
    elif sb.case is None and re.fullmatch(r"mldoctor jit (--fix --dry-run|--dry-run --fix)", norm):
        problems = jit_fix_effects(sb, p, removed, added, changed, dry_run=True)
        problems += claims_problems(ex, bool(removed), False, True)
    elif sb.case is None and re.fullmatch(r"mldoctor jit --fix", norm):
        problems = jit_fix_effects(sb, p, removed, added, changed, dry_run=False)
        dirs = [r for r in removed if not os.path.splitext(r)[1] and not r.endswith("lock")]
        fresh_gone = sb.rel(sb.cache + "/fresh/build.ninja") in removed
        problems += claims_problems(ex, bool(removed), dirs, False, fresh_gone)
        if not _known_bad_checked:
            _known_bad_checked.append(True)
            for rule, words in KNOWN_BAD:
                bad = Example("rules/%s.toml before issue 31" % rule, "mldoctor jit --fix", words)
                check(bool(claims_problems(bad, bool(removed), dirs, False, fresh_gone)),
                      "the claim checks flag the old %s wording: %s" % (rule, words))
    elif case and re.search(r"mldoctor jit .*--fix", norm):
        # The golden case's stale lock (its setup.sh) goes, and is named.
        locks = [r for r in removed if r.endswith("/lock")]
        if not locks or any("removed stale lock %s" % os.path.join(sb.root, r) not in p.stdout for r in locks):
            problems.append("removed %s; printed:\n%s" % (removed, p.stdout))
        problems += claims_problems(ex, bool(removed), [], False)
    elif re.match(r"^(\w+=\S+ )*mldoctor fix\b", norm):
        problems, q = fix_settings(sb, cmd)
        if q is not None:
            more, rules = settings_act(sb, cmd, q.stdout)
            problems += more
            if not rules:
                problems.append("fix printed no settings here, so its claims are not exercised:\n" + q.stdout)
    elif re.search(r"mldoctor snapshot (\S+)", cmd):
        out = re.search(r"mldoctor snapshot (\S+)", cmd).group(1)
        want = [os.path.relpath(os.path.join(sb.work, out), sb.root)]
        if added != want or removed or changed:
            problems.append("wrote %s, removed %s, changed %s; it claims to write %s only" % (added, removed, changed,
                                                                                            want))
        elif subprocess.run(["tar", "-tzf", os.path.join(sb.work, out)], capture_output=True).returncode != 0:
            problems.append("%s is not a tar.gz archive" % out)
    else:
        made = ["work/" + d for d in re.findall(r"mkdir (\S+) &&", cmd)]   # what the command's own mkdir makes
        added = [a for a in added if not any(a == m or a.startswith(m + "/") for m in made)]
        if removed or added or changed:
            problems.append("changed the sandbox: removed %s, added %s, changed %s" % (removed, added, changed))
        want_rc = (0, 1)
        if re.match(r"mldoctor run\b", norm):
            want_rc = (3,)     # train.py's own exit status, passed through
        if p.returncode not in want_rc:
            problems.append("exit status %d, expected one of %s\n%s%s" % (p.returncode, want_rc, p.stdout[-1500:],
                                                                          p.stderr[-1500:]))
        problems += shown_output_problems(ex, p)
        if re.fullmatch(r"mldoctor jit( --json)?", norm) and not case:
            problems += jit_read_claims(ex, sb, p)
        if re.fullmatch(r"mldoctor explain \w+", norm) or norm == "mldoctor explain ID":
            problems += explain_claims(ex if norm != "mldoctor explain ID" else Example(ex.where, "mldoctor explain JIT001",
                                                                                      ""), p)
    report(ex, problems)


EXAMPLES = extract()

if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
    finish("docs-command-examples")
