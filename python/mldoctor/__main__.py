"""`python -m mldoctor ARGS` and the `mldoctor` console script: both replace
this Python process with the binary (os.execv), so the exit status, signals,
stdin/stdout/stderr and the terminal are the binary's own, exactly as if it
had been run directly. `python -m mldoctor` also names the interpreter that
runs it (`--python sys.executable`) to the commands that examine one, unless
the user named one: `venv/bin/python -m mldoctor check` checks that venv; the
console script does so for the environment it is installed in when none is
activated (`venv/bin/mldoctor check`). A binary that cannot start is exit
status 2 with the loader's message, before exec."""
from __future__ import annotations

import os
import signal
import sys
from typing import List, NoReturn, Optional, Sequence

from ._binary import find_binary, not_found_message, startup_error

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
    # exec hands the process over: a loader failure after it would exit 1,
    # the findings status. The binary is started once first (a few ms).
    error = startup_error(binary)
    if error is not None:
        sys.stderr.write(error + "\n")
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


def installed_environment() -> Optional[str]:
    """The interpreter of the virtual or conda environment this package is
    installed in, when no environment is activated and it is not a tool
    environment (pipx, uv tool), whose interpreter is nobody's job."""
    if os.environ.get("VIRTUAL_ENV") or os.environ.get("CONDA_PREFIX"):
        return None
    prefix = sys.prefix
    is_env = prefix != getattr(sys, "base_prefix", prefix) or os.path.isdir(os.path.join(prefix, "conda-meta"))
    tool = any(os.path.exists(os.path.join(prefix, n)) for n in ("pipx_metadata.json", "uv-receipt.toml"))
    return sys.executable if is_env and not tool and sys.executable else None


def console() -> NoReturn:
    """The `mldoctor` console script: the binary with the same arguments;
    `venv/bin/mldoctor check` (no environment activated) checks that venv."""
    executable = installed_environment()
    args = sys.argv[1:]
    _exec(sys.argv[0], with_python(args, executable) if executable else args)


def main() -> NoReturn:
    """`python -m mldoctor`."""
    _exec("mldoctor", with_python(sys.argv[1:], sys.executable))


if __name__ == "__main__":
    main()
