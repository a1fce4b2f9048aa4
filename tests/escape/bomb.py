"""A bounded fork bomb (`python3 bomb.py COUNTFILE LIMIT fan|tree`), copied into the project by
the escape suite: a hostile command runs it.

It tries to hold more than LIMIT processes alive at once and never more than 2 * LIMIT + 1, so it
is safe to run without any sandbox (the control run, even as root, where RLIMIT_NPROC does not
hold): `fan` forks from one process as fast as it can, `tree` forks two children from each
process, level after level. Every process appends one byte to COUNTFILE, then blocks until the
first one knows that all have started; then all end
together and are reaped. A fork the kernel refuses ends the growth of that branch. An alarm ends
the first one, and so all of them, if something hangs.
"""

import os
import signal
import sys

ALARM_S = 60


class Bomb:
    def __init__(self, path: str, limit: int):
        self.path = path
        self.limit = limit
        self.hold_r, self.hold_w = os.pipe()  # only the first process keeps hold_w: its close releases all
        # "+" before each fork, "-" for one the kernel refused, "." when a process made all its
        # children: a process is announced before it exists, so all announced ones reporting
        # means all have started.
        self.done_r, self.done_w = os.pipe()
        self.first = True
        self.depth = 0
        while 2 ** (self.depth + 1) - 1 <= limit:
            self.depth += 1

    def mark(self) -> None:
        handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(handle, b"x")
        os.close(handle)

    def fork(self) -> int | None:
        """Fork (None: the kernel refused). The child marks the count file."""
        os.write(self.done_w, b"+")
        try:
            pid = os.fork()
        except OSError:
            os.write(self.done_w, b"-")
            return None
        if pid == 0:
            if self.first:  # what only the first process keeps
                os.close(self.hold_w)
                os.close(self.done_r)
                self.first = False
            self.mark()
        return pid

    def hold_and_end(self, children: list[int]) -> None:
        os.read(self.hold_r, 1)  # end of file: the first process released everyone
        for child in children:
            os.waitpid(child, 0)
        os._exit(0)

    def fan(self) -> list[int]:
        children = []
        for _ in range(2 * self.limit):
            pid = self.fork()
            if pid is None:
                break
            if pid == 0:
                self.hold_and_end([])
            children.append(pid)
        return children

    def tree(self, level: int = 0) -> list[int]:
        made = []
        for _ in range(2 if level < self.depth else 0):
            pid = self.fork()
            if pid is None:
                continue
            if pid == 0:
                self.tree(level + 1)  # never returns
            made.append(pid)
        os.write(self.done_w, b".")
        if not self.first:
            self.hold_and_end(made)
        return made

    def run(self, shape: str) -> int:
        self.mark()
        if shape == "fan":
            children = self.fan()
            count = 1 + len(children)
        else:
            children = self.tree()
            count, reported = 1, 0
            while reported < count:
                data = os.read(self.done_r, 4096)
                count += data.count(b"+") - data.count(b"-")
                reported += data.count(b".")
        os.close(self.hold_w)
        for child in children:
            os.waitpid(child, 0)
        return count


def main() -> None:
    signal.alarm(ALARM_S)
    path, limit, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    print(f"{Bomb(path, limit).run(shape)} processes were alive at once")


if __name__ == "__main__":
    main()
