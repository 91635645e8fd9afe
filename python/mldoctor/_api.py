"""The typed Python API: each call runs the mldoctor binary with --json
(subprocess) and turns the document it prints into dataclasses whose fields
are the keys of docs/json-schema.md (the finding object, mldoctor.logs/1,
mldoctor.rules/1). Nothing is re-implemented here: the binary is the one
source of findings, and test/e2e/python-api.py checks that every key the
binary emits has its field, so the two cannot drift. The binary's own
errors ("mldoctor: error: ...", exit status 2) become MldoctorError.

Readers ignore keys they do not know (a newer binary may add fields); the
whole document stays available as Report.document."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._binary import cannot_start_message, find_binary, loader_failure, not_found_message

PathLike = Union[str, "os.PathLike[str]"]


class MldoctorError(Exception):
    """mldoctor itself failed: bad arguments, an unknown rule, unreadable
    input. `message` is the tool's own "mldoctor: error: ..." line,
    `exit_status` its exit status (None when it could not be run)."""

    def __init__(self, message: str, exit_status: Optional[int] = None, argv: Sequence[str] = (),
                 stderr: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status
        self.argv = list(argv)
        self.stderr = stderr


@dataclass(frozen=True)
class Evidence:
    """One fact behind a finding; `context` marks a line shown around it."""
    text: str
    file: Optional[str] = None
    line: Optional[int] = None
    context: bool = False

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> Evidence:
        return cls(text=o["text"], file=o.get("file"), line=o.get("line"), context=bool(o.get("context", False)))


@dataclass(frozen=True)
class Finding:
    """The finding object every command prints (docs/json-schema.md)."""
    rule: str
    severity: str
    subject: str
    message: str
    evidence: Tuple[Evidence, ...] = ()
    fix: str = ""
    env_fix: Tuple[str, ...] = ()
    count: int = 1
    last_line: Optional[int] = None
    ranks: Tuple[int, ...] = ()
    collect: str = ""  # logs: what to collect next to see the cause this evidence only wraps

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> Finding:
        return cls(rule=o["rule"], severity=o["severity"], subject=o["subject"], message=o["message"],
                   evidence=tuple(Evidence.from_json(e) for e in o.get("evidence", ())), fix=o.get("fix", ""),
                   env_fix=tuple(o.get("env_fix", ())), count=o.get("count", 1), last_line=o.get("last_line"),
                   ranks=tuple(o.get("ranks", ())), collect=o.get("collect", ""))


@dataclass(frozen=True)
class Incident:
    """logs: one failure reported several times; indices into the input's findings."""
    rule: str
    severity: str
    cause: int
    also: Tuple[int, ...] = ()
    context: Tuple[int, ...] = ()

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> Incident:
        return cls(rule=o["rule"], severity=o["severity"], cause=o["cause"], also=tuple(o.get("also", ())),
                   context=tuple(o.get("context", ())))


@dataclass(frozen=True)
class LogInput:
    """logs: one input (a file, or <stdin>) and what was found in it."""
    path: str
    bytes: Optional[int] = None
    lines: Optional[int] = None
    findings: Tuple[Finding, ...] = ()
    incidents: Tuple[Incident, ...] = ()
    error: Optional[str] = None
    encoding: Optional[str] = None  # "UTF-16LE"/"UTF-16BE" when the log was decoded

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> LogInput:
        return cls(path=o["path"], bytes=o.get("bytes"), lines=o.get("lines"),
                   findings=tuple(Finding.from_json(f) for f in o.get("findings", ())),
                   incidents=tuple(Incident.from_json(i) for i in o.get("incidents", ())), error=o.get("error"),
                   encoding=o.get("encoding"))


@dataclass(frozen=True)
class Report:
    """A command's document: its findings typed, the rest as printed.
    For logs, `findings` are every input's in order and `inputs` each one's.
    `exit_status` is 0, or 1 when a finding reached --fail-on."""
    schema: str
    version: str
    findings: Tuple[Finding, ...]
    exit_status: int
    inputs: Tuple[LogInput, ...] = ()
    document: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def python(self) -> Optional[Dict[str, Any]]:
        """check: the interpreter examined (`interpreter`, `chosen_by`,
        `version`, ...), or {"error": ...} without a usable one."""
        return self.document.get("python")

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], exit_status: int) -> Report:
        inputs = tuple(LogInput.from_json(i) for i in doc.get("inputs", ()) if isinstance(i, Mapping))
        if "findings" in doc:
            findings = tuple(Finding.from_json(f) for f in doc["findings"])
        else:
            findings = tuple(f for i in inputs for f in i.findings)
        return cls(schema=doc["schema"], version=doc["version"], findings=findings, exit_status=exit_status,
                   inputs=inputs, document=dict(doc))


@dataclass(frozen=True)
class RuleFix:
    text: str = ""
    env: Tuple[str, ...] = ()
    commands: Tuple[str, ...] = ()

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> RuleFix:
        return cls(text=o.get("text", ""), env=tuple(o.get("env", ())), commands=tuple(o.get("commands", ())))


@dataclass(frozen=True)
class Signature:
    """A log rule's pattern (docs/rule-format.md)."""
    pattern: str
    message: str = ""
    followed_by: Optional[str] = None
    within: Optional[int] = None
    at_end: bool = False
    case_insensitive: bool = False

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> Signature:
        return cls(pattern=o["pattern"], message=o.get("message", ""), followed_by=o.get("followed_by"),
                   within=o.get("within"), at_end=bool(o.get("at_end", False)),
                   case_insensitive=bool(o.get("case_insensitive", False)))


@dataclass(frozen=True)
class StackWait:
    """A wait a rule recognises in stack dumps (`stacks`)."""
    frame: str
    under: Optional[str] = None
    message: str = ""

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> StackWait:
        return cls(frame=o["frame"], under=o.get("under"), message=o.get("message", ""))


@dataclass(frozen=True)
class RuleSource:
    """Where an emitter prints a log rule's message (`[[source]]`): the
    format string at `line` of `path` in `repository` at `tag`, or, for a
    closed-source emitter, in the binary `path` of the Debian `package` at
    version `tag` (then `repository` is "" and `line` 0)."""
    repository: str
    path: str
    line: int
    tag: str
    format: str
    syntax: str = "printf"
    values: Tuple[str, ...] = ()
    url: str = ""
    package: str = ""

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> RuleSource:
        return cls(repository=o.get("repository", ""), path=o["path"], line=int(o.get("line", 0)), tag=o["tag"],
                   format=o["format"], syntax=o.get("syntax", "printf"), values=tuple(o.get("values", ())),
                   url=o.get("url", ""), package=o.get("package", ""))


@dataclass(frozen=True)
class Rule:
    """One rule of the knowledge base (mldoctor.rules/1, `explain --json`)."""
    id: str
    severity: str
    title: str
    explanation: str = ""
    fix: RuleFix = field(default_factory=RuleFix)
    references: Tuple[str, ...] = ()
    builtin: bool = True
    detector: Optional[str] = None
    signatures: Tuple[Signature, ...] = ()
    stacks: Tuple[StackWait, ...] = ()
    sources: Tuple[RuleSource, ...] = ()
    envelope: bool = False
    replaces: Tuple[str, ...] = ()
    withdrawn: bool = False
    collect: str = ""

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> Rule:
        return cls(id=o["id"], severity=o["severity"], title=o["title"], explanation=o.get("explanation", ""),
                   fix=RuleFix.from_json(o.get("fix", {})), references=tuple(o.get("references", ())),
                   builtin=bool(o.get("builtin", True)), detector=o.get("detector"),
                   signatures=tuple(Signature.from_json(s) for s in o.get("signatures", ())),
                   stacks=tuple(StackWait.from_json(s) for s in o.get("stacks", ())),
                   sources=tuple(RuleSource.from_json(s) for s in o.get("sources", ())),
                   envelope=bool(o.get("envelope", False)), replaces=tuple(o.get("replaces", ())),
                   withdrawn=bool(o.get("withdrawn", False)), collect=o.get("collect", ""))


def _option_args(options: Mapping[str, Any]) -> List[str]:
    """Keyword options as the command line's: ranks_per_node=4 is
    `--ranks-per-node 4`, no_builtin_rules=True `--no-builtin-rules`, a list
    repeats the option; False and None leave it out. The binary checks them
    (an unknown one is its error, raised as MldoctorError)."""
    out: List[str] = []
    for key, value in options.items():
        if key in ("json", "markdown"):
            raise TypeError("mldoctor: the API always reads --json output; %s= is not an option here" % key)
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            out += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return out


def _error_message(stderr: str, status: int) -> str:
    for line in stderr.splitlines():
        if line.startswith("mldoctor: error:"):
            return line
    text = stderr.strip()
    return text if text else "mldoctor: error: exited with status %d and no message" % status


def run_json(args: Sequence[str], input: Optional[bytes] = None,
             timeout: Optional[float] = None) -> Tuple[Dict[str, Any], int]:
    """Runs `mldoctor ARGS` (ARGS holds --json) and returns (document, exit
    status). Exit statuses other than 0 and 1 raise MldoctorError, and so
    does a run longer than timeout seconds (the binary is killed)."""
    binary = find_binary()
    if binary is None:
        raise MldoctorError(not_found_message(), None, args)
    argv = [binary] + list(args)
    try:
        p = subprocess.run(argv, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise MldoctorError("mldoctor: error: %s did not answer within %g s" % (" ".join(argv), timeout), None,
                            argv) from e
    except OSError as e:
        raise MldoctorError("mldoctor: error: cannot execute %s: %s" % (binary, e.strerror), None, argv) from e
    stderr = p.stderr.decode("utf-8", "replace")
    failure = loader_failure(stderr) if p.returncode != 0 and not p.stdout else None
    if failure is not None:
        raise MldoctorError(cannot_start_message(binary, failure), p.returncode, argv, stderr)
    if p.returncode not in (0, 1):
        raise MldoctorError(_error_message(stderr, p.returncode), p.returncode, argv, stderr)
    try:
        doc = json.loads(p.stdout.decode("utf-8"))
    except ValueError as e:
        raise MldoctorError("mldoctor: error: the output of %s is not JSON: %s" % (" ".join(args), e),
                            p.returncode, argv, stderr) from e
    return doc, p.returncode


def check(imports: Union[None, str, Sequence[str]] = None, python: Optional[PathLike] = None,
          **options: Any) -> Report:
    """`mldoctor check --json`. imports: the import order to simulate
    (a list or "a,b,c"); python: the interpreter to examine (default: the one
    running this code, sys.executable, as `python -m mldoctor check` does);
    options: check's other options (ranks_per_node=4, glibc="2.35",
    root="/mnt/image", rules_dir=..., fail_on="error")."""
    args = ["check", "--json"]
    if imports is not None:
        args += ["--import", imports if isinstance(imports, str) else ",".join(imports)]
    interpreter = os.fspath(python) if python is not None else sys.executable
    if interpreter:
        args += ["--python", interpreter]
    args += _option_args(options)
    doc, status = run_json(args)
    return Report.from_json(doc, status)


def logs(path_or_text: Union[PathLike, bytes], **options: Any) -> Report:
    """`mldoctor logs --json`. A path (os.PathLike, or a str naming an
    existing file and holding no newline) is read by the binary (gzip too);
    other text or bytes are the log itself, given on standard input.
    options: context=N (-C), threads=N, rules_dir=..., fail_on=..."""
    data: Optional[bytes] = None
    if isinstance(path_or_text, bytes):
        data = path_or_text
    elif isinstance(path_or_text, os.PathLike):
        target = os.fspath(path_or_text)
    elif "\n" not in path_or_text and os.path.isfile(path_or_text):
        target = path_or_text
    else:
        data = path_or_text.encode("utf-8")
    args = ["logs", "--json"] + _option_args(options)
    args.append("-" if data is not None else "--")
    if data is None:
        args.append(target)
    doc, status = run_json(args, input=data)
    return Report.from_json(doc, status)


def explain(rule_id: str, **options: Any) -> Rule:
    """`mldoctor explain ID --json`: one rule; an unknown id raises
    MldoctorError with the tool's message."""
    doc, _ = run_json(["explain", "--json"] + _option_args(options) + ["--", rule_id])
    return Rule.from_json(doc)


def rules(**options: Any) -> List[Rule]:
    """`mldoctor rules --json`: every rule of the knowledge base."""
    doc, _ = run_json(["rules", "--json"] + _option_args(options))
    return [Rule.from_json(r) for r in doc["rules"]]
