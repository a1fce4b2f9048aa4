"""The launcher of a confined command, and the Landlock primitives (Linux, through ctypes).

Run as `<python> -I -S /abs/path/confine.py [options] -- <argv>`: a fresh interpreter that is
single-threaded, so the restrictions it applies to itself (no_new_privs, Landlock, rlimits,
capabilities) hold for the whole process when it execs the command. The server never runs
ctypes between a fork and an exec (a fork of a threaded process may deadlock there): it starts
this file through `runner._spawn`, with the argv that `sandbox.py` builds. The server imports
this module for its Landlock primitives: it builds the network ruleset once, in a worker
thread, and either passes its fd down or enforces it on one thread of its own that does
nothing but start confined commands (`restrict_this_thread`), which then inherit the domain.

Options, applied in this order (every one is optional; a failure prints one line on stderr,
`totem sandbox: <why>`, and exits with status 126 without running the command):

  --cgroup-fd N    write "0" into N (an open `cgroup.procs` of the command's own pids cgroup)
                   and close it: this process and everything it starts count against pids.max
  --nproc N        RLIMIT_NPROC: at most N more processes than this user has now (an ordinary
                   user; inside a new user namespace only that namespace's are counted)
  --drop-caps      drop every capability, bounding set included (root without bubblewrap)
  --ruleset-fd N   landlock_restrict_self(N), then close N (repeatable: each is a layer)
  --read P         Landlock alone: read and execute beneath P (repeatable)
  --write P        Landlock alone: read, write, make and remove beneath P (repeatable)
  --scope          with the rules of --read/--write, scope signals and abstract unix sockets
                   to this sandbox (Landlock ABI 6)
  --supervise      no PID namespace to end: stay as a subreaper around the command, and when
                   it ends, or on SIGTERM, SIGINT or SIGHUP, kill every process left below

The command's argv must start with an absolute path. Whatever restriction the server asked for
and the kernel refuses stops the launch: nothing runs less confined than the server said.

Imports nothing of totem and only the standard library: it runs outside the package (`-I -S`).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys

# Landlock (include/uapi/linux/landlock.h): syscall numbers are the same on every architecture.
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
# The file-system rights each ABI knows (1: the first thirteen; 2 REFER; 3 TRUNCATE; 5 IOCTL_DEV).
FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
                    5: (1 << 16) - 1}
NET_ABI = 4  # TCP bind and connect rules
SCOPE_ABI = 6  # signal and abstract unix socket scoping
READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# The rights a rule on a file (not a folder) may carry.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
MAX_PORT = 65535

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
SYS_CAPSET_X86_64 = 126
CAP_VERSION_3 = 0x20080522
FAILED = 126  # the exit status of a launch refused here, as a shell's "cannot execute"
SUPERVISED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class LandlockError(OSError):
    """A Landlock call the kernel refused."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"{what}: {os.strerror(errno)}")
    return result


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel; 0 where it has none (or it is off)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        result = _libc().syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                                 ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(result), 0)


def fs_rights(abi: int) -> int:
    """Every file-system right the ABI knows."""
    return FS_RIGHTS_BY_ABI.get(min(abi, max(FS_RIGHTS_BY_ABI)), 0) if abi > 0 else 0


def create_ruleset(fs: int = 0, net: int = 0, scoped: int = 0) -> int:
    """A new ruleset fd (close-on-exec) handling these rights. Raises LandlockError."""
    attr = _RulesetAttr(fs, net, scoped)
    return _check(_libc().syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr),
                                  ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)),
                  "landlock_create_ruleset")


def add_path_rule(ruleset: int, path: str, rights: int) -> None:
    """Allow `rights` beneath `path` (a folder) or on it (a file: only FILE_RIGHTS count).

    The path is opened following links, so the rule lands on what it leads to. Raises OSError
    (a missing path) and LandlockError."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= FILE_RIGHTS
        attr = _PathBeneath(rights, fd)
        _check(_libc().syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset),
                               ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
               f"landlock_add_rule {path}")
    finally:
        os.close(fd)


# syscall(2) with landlock_add_rule's argument types declared, so that a call takes plain ints
# and converts nothing: a network ruleset is 65,534 calls, and their Python side was two thirds
# of its cost with a ctypes object made per argument and call.
_ADD_RULE_TYPE = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                  ctypes.c_uint32, use_errno=True)


def add_port_rules(ruleset: int, ports, rights: int = NET_CONNECT_TCP) -> None:
    """Allow `rights` on each TCP port of `ports`. Raises LandlockError."""
    add_rule = _ADD_RULE_TYPE(("syscall", _libc()))
    attr = _NetPort(rights, 0)
    address = ctypes.addressof(attr)
    for port in ports:
        attr.port = port
        if add_rule(SYS_ADD_RULE, ruleset, RULE_NET_PORT, address, 0) < 0:
            _check(-1, f"landlock_add_rule port {port}")


def _ports_except(refused) -> itertools.chain:
    """Every TCP port but the refused ones, as ranges (iterated without a test per port)."""
    edges = [-1, *sorted(set(refused)), MAX_PORT + 1]
    return itertools.chain.from_iterable(range(low + 1, high) for low, high in itertools.pairwise(edges))


def network_ruleset(abi: int, refused_ports=(), all_tcp: bool = False) -> int:
    """A ruleset that refuses TCP connect to `refused_ports` (every other port allowed) or, with
    `all_tcp`, every TCP connect and bind; with ABI 6, signals and abstract unix sockets are
    scoped to the sandbox too. 65,534 rules take about a tenth of a second: build it once.
    Raises LandlockError (ABI under 4 included)."""
    if abi < NET_ABI:
        raise LandlockError(0, f"Landlock ABI {abi} has no network rules (4 or newer needed)")
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= SCOPE_ABI else 0
    ruleset = create_ruleset(net=NET_CONNECT_TCP | (NET_BIND_TCP if all_tcp else 0), scoped=scoped)
    try:
        if not all_tcp:
            add_port_rules(ruleset, _ports_except(refused_ports))
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def restrict_self(ruleset: int) -> None:
    """Enforce a ruleset on this process from now on (no_new_privs must be set). Raises
    LandlockError."""
    _check(_libc().syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
           "landlock_restrict_self")


def restrict_this_thread(ruleset: int) -> None:
    """no_new_privs, then the ruleset, for the calling thread alone (and what it forks from
    now on). The server calls it in a thread of its own that only starts confined commands
    (sandbox.py), never between a fork and an exec. Raises LandlockError."""
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    restrict_self(ruleset)


# -- the launcher ----------------------------------------------------------------------------

class LaunchError(Exception):
    """A restriction that could not be applied: the command must not run."""


class _Options:
    def __init__(self) -> None:
        self.cgroup_fd: int | None = None
        self.nproc: int | None = None
        self.drop_caps = False
        self.ruleset_fds: list[int] = []
        self.read: list[str] = []
        self.write: list[str] = []
        self.scope = False
        self.supervise = False
        self.command: list[str] = []


def parse(argv: list[str]) -> _Options:
    """The options and the command. Raises LaunchError."""
    options = _Options()
    index = 0
    valued = {"--cgroup-fd", "--nproc", "--ruleset-fd", "--read", "--write"}
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            options.command = argv[index + 1:]
            break
        if arg in valued:
            if index + 1 >= len(argv):
                raise LaunchError(f"{arg} needs a value")
            value = argv[index + 1]
            index += 2
            if arg in ("--read", "--write"):
                getattr(options, arg[2:]).append(value)
                continue
            try:
                number = int(value)
            except ValueError:
                raise LaunchError(f"{arg} needs a number, not {value!r}") from None
            if arg == "--cgroup-fd":
                options.cgroup_fd = number
            elif arg == "--nproc":
                options.nproc = number
            else:
                options.ruleset_fds.append(number)
            continue
        if arg == "--drop-caps":
            options.drop_caps = True
        elif arg == "--scope":
            options.scope = True
        elif arg == "--supervise":
            options.supervise = True
        else:
            raise LaunchError(f"unknown option {arg!r}")
        index += 1
    if not options.command or not os.path.isabs(options.command[0]):
        raise LaunchError("the command must be given after -- with an absolute path")
    return options


def _join_cgroup(fd: int) -> None:
    try:
        os.write(fd, b"0")
    except OSError as exc:
        raise LaunchError(f"cannot join the command's process cgroup: {exc.strerror}") from None
    finally:
        os.close(fd)


def _own_processes() -> int:
    """How many processes of this user this process can see (itself included)."""
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                continue
    return count


def _limit_processes(extra: int) -> None:
    import resource  # a small extension module; only this option needs it

    limit = _own_processes() + extra
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot limit the processes: {exc}") from None


def _drop_capabilities(libc) -> None:
    """Empty the bounding set (no exec can give a capability back), then the current sets."""
    last = 0
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
            last = int(handle.read().strip())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: unknown cap
            raise LaunchError(f"cannot drop capability {cap}: {os.strerror(ctypes.get_errno())}")
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if os.uname().machine != "x86_64":
        raise LaunchError("dropping capabilities is only built for x86_64")
    if libc.syscall(ctypes.c_long(SYS_CAPSET_X86_64), header, data) != 0:
        raise LaunchError(f"cannot drop capabilities: {os.strerror(ctypes.get_errno())}")


def _file_rules(options: _Options, abi: int) -> int:
    """A ruleset of --read and --write (the write rules win on the same path)."""
    rights = fs_rights(abi)
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if options.scope and abi >= SCOPE_ABI else 0
    if options.scope and not scoped:
        raise LaunchError(f"Landlock ABI {abi} cannot scope signals (6 or newer needed)")
    ruleset = create_ruleset(fs=rights, scoped=scoped)
    for paths, allowed in ((options.read, READ_RIGHTS), (options.write, rights)):
        for path in paths:
            try:
                add_path_rule(ruleset, path, allowed & rights)
            except FileNotFoundError:
                continue  # gone since the server listed it: nothing to allow
    return ruleset


def apply(options: _Options) -> None:
    """Apply every restriction the options name to this process. Raises LaunchError."""
    libc = _libc()
    if options.cgroup_fd is not None:
        _join_cgroup(options.cgroup_fd)
    if options.nproc is not None:
        _limit_processes(options.nproc)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise LaunchError(f"cannot set no_new_privs: {os.strerror(ctypes.get_errno())}")
    if options.drop_caps:
        _drop_capabilities(libc)
    try:
        if options.read or options.write:
            abi = landlock_abi()
            if abi < 1:
                raise LaunchError("this kernel has no Landlock")
            ruleset = _file_rules(options, abi)
            try:
                restrict_self(ruleset)
            finally:
                os.close(ruleset)
        for fd in options.ruleset_fds:
            try:
                restrict_self(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise LaunchError(str(exc)) from None


def _descendants(root: int) -> list[int]:
    """Every process below `root`, read from /proc (children after their parents)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            found.append(child)
            queue.append(child)
    return found


def _end_everything_below() -> None:
    """SIGKILL every descendant until none is left, reaping what comes back to this subreaper."""
    me = os.getpid()
    while True:
        below = _descendants(me)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap_all()
        if not below:
            return


def _reap_all() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def supervise(command: list[str], libc) -> int:
    """Run the command as a child of this subreaper; when it ends (or a stop signal comes),
    end every process below, then report its status as our own. Returns the exit status."""
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise LaunchError(f"cannot become a subreaper: {os.strerror(ctypes.get_errno())}")
    stopping: list[int] = []

    def stop(signum, _frame) -> None:
        stopping.append(signum)

    for signum in SUPERVISED_SIGNALS:
        signal.signal(signum, stop)
    pid = os.fork()
    if pid == 0:
        for signum in SUPERVISED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execv(command[0], command)
        except OSError as exc:
            print(f"totem sandbox: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
    status = None
    while status is None:
        if stopping:
            _end_everything_below()
            return 128 + stopping[0]
        try:
            waited, raw = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            break
        if waited == pid:
            status = raw
    _end_everything_below()
    if status is None:
        return 0
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))  # our parent sees the same signal
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    try:
        options = parse(argv)
        apply(options)
        if options.supervise:
            return supervise(options.command, _libc())
        os.execv(options.command[0], options.command)
    except LaunchError as exc:
        print(f"totem sandbox: {exc}", file=sys.stderr)
        return FAILED
    except OSError as exc:
        print(f"totem sandbox: cannot run {argv[-1] if argv else ''}: {exc.strerror or exc}", file=sys.stderr)
        return FAILED
    return FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
