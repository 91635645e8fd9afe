"""`python -m mldoctor ARGS` and the `mldoctor` console script: both replace
this Python process with the binary (os.execv), so the exit status, signals,
stdin/stdout/stderr and the terminal are the binary's own, exactly as if it
had been run directly. `python -m mldoctor` also names the interpreter that
runs it (`--python sys.executable`) to the commands that examine one, unless
the user named one: `venv/bin/python -m mldoctor check` checks that venv."""
from __future__ import annotations

import os
import signal
import sys
from typing import List, NoReturn, Sequence

from ._binary import find_binary, not_found_message

# The subcommands that take --python (`mldoctor COMMAND --help`).
TAKES_PYTHON = frozenset(("check", "fix", "fleet", "jit", "snapshot"))


def with_python(args: Sequence[str], executable: str) -> List[str]:
    """args with `--python EXECUTABLE` after the subcommand when it takes
    --python and none is given. The subcommand is the first argument that is
    not an option (the global options, --help and --version, take no value)."""
    args = list(args)
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith("-"):
            continue
        if a not in TAKES_PYTHON:
            break
        rest = args[i + 1:]
        given = any(r == "--python" or r.startswith("--python=") for r in rest)
        if not given and executable:
            return args[:i + 1] + ["--python", executable] + rest
        break
    return args


def _exec(argv0: str, args: Sequence[str]) -> NoReturn:
    binary = find_binary()
    if binary is None:
        sys.stderr.write(not_found_message() + "\n")
        sys.exit(2)
    # Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal
    # stays ignored across exec: give the binary (and the jobs `run`
    # starts) the defaults a shell would have given them.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execv(binary, [argv0] + list(args))
    except OSError as e:
        sys.stderr.write("mldoctor: error: cannot execute %s: %s\n" % (binary, e.strerror))
        sys.exit(2)


def console() -> NoReturn:
    """The `mldoctor` console script: the binary with the same arguments."""
    _exec(sys.argv[0], sys.argv[1:])


def main() -> NoReturn:
    """`python -m mldoctor`."""
    _exec("mldoctor", with_python(sys.argv[1:], sys.executable))


if __name__ == "__main__":
    main()
