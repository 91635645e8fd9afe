#!/usr/bin/env python3
"""The man page and the shell completions the build generates from the option
table, checked against the binary itself: every option `mldoctor CMD --help`
prints is in mldoctor(1) under that command and in each shell's completion,
every rule `mldoctor rules --json` lists is in the man page and completes
after `explain`; groff renders the page without a warning; bash and fish
complete for real (bash through its programmable completion, fish with
`complete -C`), zsh parses the file and compinit registers it. Also
`--help` grouped by task and `--version`'s parts."""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

DOCS = os.path.join(os.environ["MLD_BUILD_DIR"], "generated", "cli-docs")


def run(args, **kw):
    return subprocess.run([MLDOCTOR] + args, capture_output=True, text=True, timeout=60, **kw)


def commands_and_options():
    """{command: [option names]} read off the binary's own --help."""
    top = run(["--help"]).stdout
    commands = re.findall(r"^  ([a-z]+)\s{2,}", top.split("Preflight")[1], re.M)
    out = {}
    for c in commands:
        h = run([c, "--help"]).stdout
        out[c] = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", h.split("Options:")[1])))
    return out


def bash_complete(line):
    """COMPREPLY of the generated bash completion for the words of `line`
    (a trailing space: completing a new, empty word)."""
    script = ('source %s\nCOMP_LINE=%s\nread -ra COMP_WORDS <<< "$COMP_LINE"\n'
              '[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")\n'
              'COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n_mldoctor\nprintf "%%s\\n" "${COMPREPLY[@]}"\n'
              % (os.path.join(DOCS, "mldoctor.bash"), "'" + line.replace("'", "'\\''") + "'"))
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PATH=os.path.dirname(MLDOCTOR) + ":" + os.environ["PATH"]))
    check_eq(p.returncode, 0, "bash completion of %r ran" % line)
    return [w for w in p.stdout.splitlines() if w]


def zsh_complete(line):
    """Candidates of the generated zsh completion, from a real interactive
    zsh in a pseudo-terminal (lib/zsh-complete.zsh)."""
    p = subprocess.run(["zsh", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "zsh-complete.zsh"),
                        DOCS, line], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PATH=os.path.dirname(MLDOCTOR) + ":" + os.environ["PATH"]))
    check_eq(p.returncode, 0, "zsh completion of %r ran: %s" % (line, p.stderr))
    return [w for w in p.stdout.splitlines() if w]


def fish_complete(line):
    p = subprocess.run(["fish", "-c", "source %s; complete -C %s" % (os.path.join(DOCS, "mldoctor.fish"),
                                                                   "'" + line.replace("'", "\\'") + "'")],
                       capture_output=True, text=True, timeout=60)
    check_eq(p.returncode, 0, "fish completion of %r ran" % line)
    return [w.split("\t")[0] for w in p.stdout.splitlines() if w]


def main():
    for f in ("mldoctor.1", "mldoctor.bash", "_mldoctor", "mldoctor.fish"):
        check(os.path.isfile(os.path.join(DOCS, f)), "generated " + f)
    man_src = open(os.path.join(DOCS, "mldoctor.1")).read()
    bash_src = open(os.path.join(DOCS, "mldoctor.bash")).read()
    zsh_src = open(os.path.join(DOCS, "_mldoctor")).read()
    fish_src = open(os.path.join(DOCS, "mldoctor.fish")).read()
    table = commands_and_options()
    check_eq(sorted(table), sorted(["check", "fix", "fleet", "diff", "run", "logs", "jit", "snapshot", "stacks", "libs", "rules", "explain"]), "commands in --help")

    # --help grouped by the task a person comes with.
    top = run(["--help"]).stdout
    groups = re.findall(r"^(\S[^\n]*):$", top, re.M)
    check_eq(groups[1:], ["Preflight: a node or a fleet before a job",
                                         "Diagnose: a job that failed, hangs or runs slowly",
                                         "Inspect: native libraries", "Knowledge base"], "help groups")
    check_in("Exit status: 0 nothing at or above --fail-on", top, "exit statuses in --help")

    # The man page renders cleanly and has every command and option.
    if shutil.which("groff"):
        g = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", os.path.join(DOCS, "mldoctor.1")],
                           capture_output=True, text=True)
        check_eq(g.stderr, "", "groff warnings")
    page = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", os.path.join(DOCS, "mldoctor.1")],
                          capture_output=True, text=True).stdout if shutil.which("groff") else man_src
    page = re.sub(r"\s+", " ", page)
    every = set.intersection(*(set(o) for o in table.values()))
    for cmd, options in table.items():
        check_in("mldoctor %s [OPTIONS]" % cmd, page, "man: mldoctor %s" % cmd)
        section = page.split(" COMMANDS ", 1)[1].split("mldoctor %s [OPTIONS]" % cmd, 1)[1]
        ends = [section.find("mldoctor %s [OPTIONS]" % c) for c in table] + [section.find("OPTIONS OF EVERY")]
        section = section[:min(e for e in ends if e >= 0)]
        for o in options:
            if o in every:
                check_in(o, page.split("OPTIONS OF EVERY COMMAND")[1], "man: %s in the options of every command" % o)
            elif o != "--":
                check_in(o, section, "man: %s %s" % (cmd, o))
            if o.startswith("--"):
                check_in(o, bash_src, "bash knows %s %s" % (cmd, o))
                check_in(o, zsh_src, "zsh knows %s %s" % (cmd, o))
                check_in("-l " + o[2:], fish_src, "fish knows %s %s" % (cmd, o))
    rules = [r["id"] for r in json.loads(run(["rules", "--json"]).stdout)["rules"]]
    check(len(rules) > 50, "rules listed")
    for r in rules:
        check_in(" " + r + " ", page, "man: rule " + r)
    check_in("mldoctor " + run(["--version"]).stdout.split()[1], page, "version in the man page")

    # bash completes for real.
    check_eq(bash_complete("mldoctor ch"), ["check"], "bash: commands")
    check_eq(bash_complete("mldoctor check --fa"), ["--fail-on"], "bash: options")
    check_eq(bash_complete("mldoctor check --fail-on w"), ["warning"], "bash: choices")
    check_eq(bash_complete("mldoctor fix --shell "), ["bash", "fish"], "bash: fix shells")
    check_eq(sorted(bash_complete("mldoctor explain TLS00")), sorted(r for r in rules if r.startswith("TLS00")), "bash: rule ids")
    check_in("/usr", bash_complete("mldoctor check --root /us"), "bash: directories for --root")
    check_in("bash", bash_complete("mldoctor run -- bas"), "bash: the job's command after run --")
    check_eq(bash_complete("mldoctor logs -j"), ["-j"], "bash: logs short option")
    check_in("/usr", bash_complete("mldoctor check --root=/us"), "bash: --root=DIR in one word")
    t = scratch()
    open(os.path.join(t, "my run.log"), "w").close()
    check_eq(bash_complete("mldoctor logs %s/my" % t), [t + "/my run.log"], "bash: a file name with a space stays whole")

    # fish completes for real.
    if shutil.which("fish"):
        check_eq(subprocess.run(["fish", "-n", os.path.join(DOCS, "mldoctor.fish")]).returncode, 0, "fish: syntax")
        check_in("check", fish_complete("mldoctor ch"), "fish: commands")
        check_eq(sorted(fish_complete("mldoctor check --fail-on ")), ["error", "info", "warning"], "fish: choices")
        check_eq(sorted(fish_complete("mldoctor explain TLS00")), sorted(r for r in rules if r.startswith("TLS00")), "fish: rule ids")
        check_in("--kill-on-hang", fish_complete("mldoctor run --ki"), "fish: options")
        check_in("bash", fish_complete("mldoctor run --report r.txt -- bas"), "fish: the job's command after --")
        check("--json" not in fish_complete("mldoctor run -- ls --js"), "fish: run's options not offered after --")
    else:
        print("fish not installed: its completion only checked by content")

    # zsh parses it and compinit registers it for mldoctor.
    if shutil.which("zsh"):
        check_eq(subprocess.run(["zsh", "-n", os.path.join(DOCS, "_mldoctor")]).returncode, 0, "zsh: syntax")
        t = scratch()
        z = subprocess.run(["zsh", "-fc", "fpath=(%s $fpath); autoload -Uz compinit; compinit -u -d %s/zcd; "
                                          "print -r -- $_comps[mldoctor]" % (DOCS, t)],
                           capture_output=True, text=True, timeout=60)
        check_eq(z.stdout.strip(), "_mldoctor", "zsh: compdef")
        check_in("check", zsh_complete("mldoctor ch"), "zsh: commands")
        for cmd in table:
            if "--fail-on" in table[cmd]:
                check_eq(zsh_complete("mldoctor %s --fa" % cmd), ["--fail-on"], "zsh: options of " + cmd)
        check_eq(zsh_complete("mldoctor check --fail-on w"), ["warning"], "zsh: choices")
        check_eq(sorted(zsh_complete("mldoctor explain TLS00")), sorted(r for r in rules if r.startswith("TLS00")),
                 "zsh: rule ids")
        check_in("bash", zsh_complete("mldoctor run -- bas"), "zsh: the job's command after run --")
        check_in("bash", zsh_complete("mldoctor run --report r.txt -- bas"), "zsh: the job's command after options")
        check_in("bash", zsh_complete("mldoctor check --python bas"), "zsh: programs for --python")
    else:
        print("zsh not installed: its completion only checked by content")

    # --version: build identity, glibc, parts.
    v = run(["--version"])
    check_eq(v.returncode, 0, "--version exit")
    check(re.match(r"mldoctor \d+\.\d+\.\d+ \(git ([0-9a-f]{12}(-dirty)?|unknown), ", v.stdout), "--version first line")
    for key in ("compiler", "glibc", "libdw", "MPI", "shims"):
        check_in("\n" + key, "\n" + v.stdout, "--version says " + key)
    finish("cli-docs")


if __name__ == "__main__":
    main()
