"""faulthandler's dump of a process's threads, the oracle of the stacks
tests (not a test itself): its text parsed, and mldoctor's frames written
as faulthandler writes them, so the two compare frame for frame.
"""
import re

FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')
# 3.14 adds the thread's name: "Thread 0x00007f... [w3] (most recent call first):".
HEADER = re.compile(r'^(?:Current thread|Thread) (0x[0-9a-f]+)(?: \[.*\])? \(most recent call first\):$')


def faulthandler_text(s):
    """A string as faulthandler writes it: ASCII as is, others escaped."""
    out = []
    for ch in s:
        c = ord(ch)
        if 32 <= c < 127:
            out.append(ch)
        elif c <= 0xff:
            out.append("\\x%02x" % c)
        elif c <= 0xffff:
            out.append("\\u%04x" % c)
        else:
            out.append("\\U%08x" % c)
    return "".join(out)


# Where faulthandler stopped a thread's dump at a frame it took for invalid:
# 3.14.10's stops after the trampoline under a specialised __init__.
INVALID = ("<invalid frame>", 0, "")


def parse_dump(text):
    """{thread ident: [(file, line, function), ...]} innermost first; line 0
    where faulthandler wrote ???; INVALID last where it wrote
    "<invalid frame>"."""
    threads, current = {}, None
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            current = threads.setdefault(int(m.group(1), 16), [])
            continue
        m = FRAME.match(line)
        if m and current is not None:
            current.append((m.group(1), 0 if m.group(2) == "???" else int(m.group(2)), m.group(3)))
        elif line == "  <invalid frame>" and current is not None:
            current.append(INVALID)
    return threads


def json_frames(thread):
    """The Python frames of one thread of `mldoctor stacks --json`, in
    parse_dump's form."""
    return [(faulthandler_text(f["file"]), f["line"] or 0, faulthandler_text(f["function"]))
            for f in thread["python"]]
