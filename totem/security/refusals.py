"""What the sandbox refused, read from a command's output: the notes the tool result ends with.

A confined program says only what the kernel told it ("Read-only file system", "Permission
denied", "No such file or directory", a failed name look-up, EACCES on connect); this module
reads those lines against the command's policy (sandbox.Policy) and names what the sandbox did:
a write outside the folders the command may write, a file of .git or .totem, a hidden place, the
network off, Totem's own port. It reads the output only, and lists at most MAX_NOTES notes.

Must not: decide anything about the policy (sandbox.py owns it), or read the disk but to tell a
new top-level file (Landlock alone) from an existing one.
"""

from __future__ import annotations

import os
import re
from typing import Protocol

from totem.security.boundary import is_inside


class Policy(Protocol):
    """What the notes read of a command's policy (sandbox.Policy has it): declared here so that
    the sandbox, which asks for the notes, is not imported back."""

    @property
    def root(self) -> str: ...
    @property
    def temp(self) -> str: ...
    @property
    def network(self) -> bool: ...
    @property
    def writable(self) -> tuple[str, ...]: ...
    @property
    def hidden(self) -> tuple[str, ...]: ...
    @property
    def read_only(self) -> tuple[str, ...]: ...
    @property
    def worktree_writable(self) -> tuple[str, ...]: ...
    @property
    def landlock_alone(self) -> bool: ...


MAX_NOTES = 4
PRIVATE_TMP = "/tmp"  # the command's own /tmp under bubblewrap: a path there is its own
# How many lines of the output's end are read.
MAX_LINES = 2000

_REFUSED = re.compile(r"(read-only file system|permission denied|operation not permitted|"
                      r"no such file or directory)", re.IGNORECASE)
_PATH = re.compile(r"""(?:^|[\s'"`(=:])((?:~|\.{0,2})?/[^\s'"`():,;]+|\.[A-Za-z0-9_][^\s'"`():,;]*)""")
# The name an error is about, right before it: "touch: cannot touch 'x': ", "bash: line 1: x: ".
_NAMED = re.compile(r"""(?:^|: |\s)['"`‘]?([^\s'"`’:]+)['"`’]?: $""")
_NO_NETWORK = re.compile(r"network is unreachable|could not resolve host|temporary failure in name resolution|"
                         r"name or service not known|no address associated with hostname|"
                         r"nodename nor servname", re.IGNORECASE)


def explain(output: str, policy: Policy, port: int | None, home: str) -> list[str]:
    """Lines that name what the sandbox refused, read from a command's output (the errors of
    programs that name a path: "Read-only file system", "Permission denied", ...; failed name
    look-ups with the network off; Totem's own port)."""
    notes: list[str] = []
    for line in output.splitlines()[-MAX_LINES:]:
        if len(notes) >= MAX_NOTES:
            break
        refused = _REFUSED.search(line)
        if refused:
            # The path the error is about: the last one before the error's words (a shell or a
            # program names itself first: "/bin/bash: line 1: /root/x: Read-only file system").
            before = line[:refused.start()]
            named = _NAMED.search(before)  # "...: <name>: Permission denied", the name quoted or not
            paths = [named.group(1)] if named else []
            paths = paths or [match.group(1) for match in _PATH.finditer(before)][-1:] or \
                [match.group(1) for match in _PATH.finditer(line[refused.end():])][:1]
            for text in paths:
                note = _path_note(text.rstrip("."), line, policy, home)
                if note and note not in notes:
                    notes.append(note)
        if not policy.network and _NO_NETWORK.search(line):
            note = ("[the sandbox has the network off for this command (settings network, unattendednetwork); "
                    "it may ask to run outside the sandbox]")
            if note not in notes:
                notes.append(note)
        if policy.network and port and re.search(rf"(?:port |:){port}\b", line) and re.search(
                r"permission denied|couldn't connect|connection refused|failed to connect", line, re.IGNORECASE):
            _add(notes, _own_port_note(port))
    # Landlock refuses a TCP connect with EACCES, which programs print without the port.
    if policy.network and port and re.search(r"connect", output, re.IGNORECASE) and \
            re.search(r"permission denied|errno 13\b|eacces", output, re.IGNORECASE) and \
            not any("refused writing" in note or "hides" in note for note in notes):
        _add(notes, _own_port_note(port))
    return notes[:MAX_NOTES]


def _own_port_note(port: int) -> str:
    return f"[the sandbox refuses connections to Totem's own port {port}, on every address]"


def _add(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _path_note(text: str, line: str, policy: Policy, home: str) -> str | None:
    if text.startswith("~"):
        path = home + text[1:]
    elif text.startswith("/"):
        path = text
    else:
        path = os.path.join(policy.root, text)
    path = os.path.normpath(path)
    if is_inside(PRIVATE_TMP, path):
        return None
    shown = text
    if any(is_inside(place, path) for place in policy.hidden):
        return f"[the sandbox hides {shown}: a secret place (or Totem's own data) that commands cannot read]"
    if "no such file" in line.lower():
        return None
    dot_git = os.path.join(policy.root, ".git")
    protected = any(is_inside(place, path) for place in policy.read_only) or is_inside(dot_git, path)
    if protected and any(is_inside(folder, path) for folder in (policy.root, *policy.writable)):
        return (f"[the sandbox refused writing {shown}: .git/hooks, .git/config and .totem/ are read-only "
                    "to commands; a git command that must write them may ask to run outside the sandbox]")
    writable = (policy.root, *policy.writable, policy.temp, *policy.worktree_writable)
    if policy.landlock_alone and os.path.dirname(path) == policy.root and not os.path.lexists(path):
        return (f"[the sandbox refused making {shown}: without bubblewrap (Landlock alone) a command cannot make "
                "a new file or folder at the top of the project, which keeps .git read-only; make it with the "
                "write tool, or inside a folder of the project]")
    if any(is_inside(folder, path) for folder in writable):
        return None
    return (f"[the sandbox refused writing {shown}: outside the folders this command may write "
            "(the project, its temp folder $TMPDIR and the setting writable)]")
