#!/usr/bin/env python3
"""Build the Totem image and check it (`make docker-test`).

The checks: the first start writes /data/config.ini with a new token (mode 0600, the Totem
user's) and says how to read it without printing it; the token is in neither the image nor its
history; the server answers through the published port with the token and refuses requests
without it; the health check passes; Totem runs as the unprivileged user; it cannot write
outside /data and /work (but for the container's scratch folders); the data is kept across a
restart of the container and in a new container on the same volume; SIGTERM stops it within a
few seconds. One line per check; the exit status is 1 when one fails.

It runs Podman as root; podman, runc and debootstrap are installed with apt-get when missing.
By default the image is built on a Debian base made here with debootstrap from the machine's own
apt mirror, so that no image registry is needed. That base is kept as
localhost/debian-base:bookworm and made again only when it is missing (a minute or a few,
once). `--base IMAGE` builds on another base instead (python:3.12-slim where a registry can be
reached). `--host-network` runs the containers on the host's network, for machines where
published ports do not reach a container: the port in the volume's config.ini is then changed to
a free one after the first start.

    python3 scripts/docker_test.py [--base IMAGE] [--host-network]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_BASE = "localhost/debian-base:bookworm"
IMAGE = "localhost/totem:test"
TOTEM_UID = 10001  # the Dockerfile's TOTEM_UID
CONTAINER_PORT = 8470  # the port of the first config.ini
# Limits given explicitly: the defaults that Podman derives from the host can exceed what the
# runtime may set inside some sandboxes.
RUNTIME_FLAGS = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
START_LIMIT_S = 30
STOP_LIMIT_S = 5  # "stops on SIGTERM within a few seconds"
HTTP_TIMEOUT_S = 5
LISTENING = "Totem is listening on "
# Where the Totem user may write: the data volume, the projects, and the container's own scratch
# folders (standard world-writable folders that go with the container).
WRITABLE = ("/data", "/work")
SCRATCH = ("/tmp", "/var/tmp", "/run/lock", "/var/lock")
NOT_WRITABLE = ("/", "/app", "/app/totem", "/app/static", "/app/docker", "/opt/venv", "/opt/venv/bin",
                "/usr", "/usr/bin", "/usr/local/bin", "/etc", "/root", "/home", "/var", "/var/lib", "/bin")

failures: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)


def check(name: str, ok: bool, detail: str = "") -> bool:
    say(f"{'PASS' if ok else 'FAIL'}  {name}{f'  ({detail})' if detail else ''}")
    if not ok:
        failures.append(name)
    return ok


def run(*args: str, check_rc: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check_rc and done.returncode != 0:
        raise SystemExit(f"docker-test: {' '.join(args[:3])} ... failed ({done.returncode}):\n"
                         f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def podman(*args: str, check_rc: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    return run("podman", *args, check_rc=check_rc, timeout=timeout)


# -- set-up ---------------------------------------------------------------------------------------

def ensure_tools(need_debootstrap: bool) -> None:
    wanted = ["podman", "runc"] + (["debootstrap"] if need_debootstrap else [])
    missing = [name for name in wanted if shutil.which(name) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"docker-test: needs {' '.join(missing)} (apt-get install them as root)")
    say(f"installing {' '.join(missing)}")
    run("apt-get", "update", "-qq")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env, stdout=subprocess.DEVNULL)


def apt_mirror() -> str:
    """The first URIs of apt's own deb822 sources (not the security archive), else of sources.list."""
    folder = "/etc/apt/sources.list.d"
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for name in names:
        if name.endswith(".sources"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                for line in handle:
                    match = re.match(r"URIs:\s*(\S+)", line)
                    if match and "security" not in match.group(1) and "debian" in match.group(1):
                        return match.group(1)
    if os.path.exists("/etc/apt/sources.list"):
        with open("/etc/apt/sources.list", encoding="utf-8") as handle:
            for line in handle:
                words = line.split()
                urls = [word for word in words[1:] if "://" in word]
                if words[:1] == ["deb"] and urls and "security" not in urls[0]:
                    return urls[0]
    return "http://deb.debian.org/debian"


def make_local_base() -> None:
    """A minimal Debian root file system with Python, imported as LOCAL_BASE; made once, kept."""
    if podman("image", "exists", LOCAL_BASE, check_rc=False).returncode == 0:
        say(f"base image {LOCAL_BASE}: kept from an earlier run")
        return
    if os.geteuid() != 0:
        raise SystemExit("docker-test: making the base image with debootstrap needs root")
    mirror = apt_mirror()
    say(f"making the base image {LOCAL_BASE} from {mirror} (once; a few minutes)")
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="totem-base.", dir="/var/tmp")
    try:
        run("debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
            "bookworm", root, mirror)
        # Certificate authorities that this machine adds to its own store: where the network
        # passes TLS through such an authority, pip in the build and programs in the container
        # trust it as the machine does.
        local_cas = "/usr/local/share/ca-certificates"
        if os.path.isdir(local_cas):
            for name in os.listdir(local_cas):
                if name.endswith(".crt"):
                    shutil.copy(os.path.join(local_cas, name), os.path.join(root, local_cas.lstrip("/"), name))
            run("chroot", root, "update-ca-certificates")
        with open(os.path.join(root, "etc/apt/sources.list"), "w", encoding="utf-8") as handle:
            handle.write(f"deb {mirror} bookworm main\n")
        run("chroot", root, "apt-get", "clean")
        for folder in ("var/lib/apt/lists", "var/log"):
            for name in os.listdir(os.path.join(root, folder)):
                path = os.path.join(root, folder, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        with tar.stdout:
            imported = subprocess.run(["podman", "import", "-q", "-", LOCAL_BASE], stdin=tar.stdout,
                                      capture_output=True, text=True)
        if tar.wait() != 0 or imported.returncode != 0:
            raise SystemExit(f"docker-test: importing the base failed: {imported.stderr.strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    say(f"base image {LOCAL_BASE}: made in {time.monotonic() - started:.0f} s")


def build_image(base: str) -> None:
    say(f"building {IMAGE} on {base}")
    started = time.monotonic()
    run("podman", "build", "--format", "docker", *RUNTIME_FLAGS, "--build-arg", f"BASE={base}",
        "-t", IMAGE, ROOT)
    say(f"image {IMAGE}: built in {time.monotonic() - started:.0f} s")


# -- one container --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Container:
    """One Totem container on the test volume, with the project mounted at /work/demo."""

    def __init__(self, name: str, volume: str, project: str, network: list[str], port: int):
        self.name = name
        self.port = port
        podman("run", "-d", "--name", name, *RUNTIME_FLAGS, *network,
               # The health check is run by hand below (its timer needs systemd).
               "--health-interval", "disable",
               "-v", f"{volume}:/data", "-v", f"{project}:/work/demo", IMAGE)

    def logs(self) -> str:
        done = podman("logs", self.name, check_rc=False)
        return done.stdout + done.stderr

    def wait_listening(self, times: int = 1) -> bool:
        """Whether the log shows the listening line `times` times within START_LIMIT_S."""
        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            if self.logs().count(LISTENING) >= times:
                return True
            state = podman("inspect", "-f", "{{.State.Status}}", self.name, check_rc=False).stdout.strip()
            if state in ("exited", "stopped"):
                break
            time.sleep(0.2)
        say(f"the log of {self.name}:\n{self.logs()}")
        return False

    def exec(self, *command: str) -> subprocess.CompletedProcess:
        return podman("exec", self.name, *command, check_rc=False)

    def config(self) -> str:
        return self.exec("cat", "/data/config.ini").stdout

    def token(self) -> str:
        match = re.search(r"^token\s*=\s*(\S*)", self.config(), re.MULTILINE)
        return match.group(1) if match else ""

    def http(self, method: str, path: str, token: str = "", body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
        try:
            with opener.open(request, timeout=HTTP_TIMEOUT_S) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError as exc:
            return 0, str(exc)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def answers(self, token: str) -> bool:
        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            if self.http("GET", "/api/account", token)[0] == 200:
                return True
            time.sleep(0.2)
        return False

    def stop_on_sigterm(self) -> tuple[float, str]:
        """Send SIGTERM to the container and wait for it to end: (seconds, exit code)."""
        started = time.monotonic()
        podman("kill", "--signal", "TERM", self.name)
        code = podman("wait", self.name, timeout=60).stdout.strip()
        return time.monotonic() - started, code

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.name, check_rc=False)


# -- the checks -----------------------------------------------------------------------------------

def check_first_start(first: Container) -> str:
    """The config.ini of the first start; returns the token (never printed)."""
    mode = first.exec("stat", "-c", "%a %U", "/data/config.ini").stdout.strip()
    check("the first start writes /data/config.ini, mode 600, owned by the Totem user", mode == "600 totem", mode)
    config = first.config()
    token = first.token()
    listen = re.search(r"^listen\s*=\s*(\S+)", config, re.MULTILINE)
    check("it listens on 0.0.0.0 with a generated token",
          bool(listen and listen.group(1) == "0.0.0.0" and len(token) >= 32),
          f"listen = {listen.group(1) if listen else '?'}, a token of {len(token)} characters")
    logs = first.logs()
    check("the log says once how to read the token, and never shows it",
          logs.count("grep ^token /data/config.ini") == 1 and token not in logs)
    history = podman("history", "--no-trunc", IMAGE).stdout + podman("image", "inspect", IMAGE).stdout
    empty_data = podman("run", "--rm", *RUNTIME_FLAGS, "--network", "none", "--entrypoint", "ls", IMAGE,
                        "-A", "/data", "/app").stdout
    check("the token is in neither the image nor its history, and the image has no config.ini",
          token not in history and "config.ini" not in empty_data)
    return token


def check_server(server: Container, token: str, port_kind: str) -> None:
    status, account = server.http("GET", "/api/account", token)
    check(f"answers through the {port_kind} with the token", status == 200 and isinstance(account, dict)
          and account.get("token") is True, f"GET /api/account: {status}")
    refused = [server.http("GET", "/api/account")[0], server.http("GET", "/api/projects")[0],
               server.http("POST", "/api/projects_open", body={"path": "/work/demo"})[0],
               server.http("GET", "/api/account", "not-the-token-0123456789")[0]]
    check("refuses requests without the token (and with a wrong one)", refused == [401, 401, 401, 401],
          f"answers {refused}")
    health = podman("healthcheck", "run", server.name, check_rc=False)
    check("the health check (an API read with the token) passes", health.returncode == 0,
          (health.stdout + health.stderr).strip())

    processes = podman("top", server.name, "huser", "user", "args").stdout.splitlines()[1:]
    totem = [line.split(None, 2) for line in processes if "totem.py" in line]
    users = {(row[0], row[1]) for row in totem}
    check("Totem runs as the unprivileged user", users == {(str(TOTEM_UID), "totem")},
          f"host uid and user of totem.py: {sorted(users)}")
    exec_id = server.exec("id", "-u").stdout.strip()
    check("a command in the container runs as that user too", exec_id == str(TOTEM_UID), f"id -u: {exec_id}")

    probe = ("for d in " + " ".join(NOT_WRITABLE) + "; do "
             "if (: > \"$d/.totem-probe\") 2>/dev/null; then echo \"wrote $d\"; rm -f \"$d/.totem-probe\"; fi; done")
    wrote = [line.removeprefix("wrote ") for line in server.exec("sh", "-c", probe).stdout.splitlines()]
    writable = server.exec("sh", "-c", "find / \\( -path /proc -o -path /sys -o -path /dev -o -path /data "
                                       "-o -path /work \\) -prune -o -writable -print 2>/dev/null").stdout.split()
    unexpected = [path for path in writable if path not in SCRATCH]
    check("cannot write outside /data and /work (only the scratch folders /tmp and /var/tmp)",
          not wrote and not unexpected, f"writable: {', '.join(writable) or 'nothing'}"
          + (f"; wrote {wrote}" if wrote else "") + (f"; unexpected {unexpected}" if unexpected else ""))
    made = server.exec("sh", "-c", "echo data > /data/probe && rm /data/probe && "
                                   "echo from-the-container > /work/demo/from-container.txt")
    check("can write in /data and in the mounted project", made.returncode == 0, made.stderr.strip())


def check_kept(server: Container, token: str, projectid: str, what: str) -> None:
    status, projects = server.http("GET", "/api/projects", token)
    kept = status == 200 and isinstance(projects, list) and any(p.get("id") == projectid for p in projects)
    check(f"keeps its data {what}", kept and server.token() == token,
          f"GET /api/projects: {status}, the project {'kept' if kept else 'missing'}, "
          f"the token {'kept' if server.token() == token else 'changed'}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="docker_test.py", description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="", help=f"the base image (default: {LOCAL_BASE}, made here)")
    parser.add_argument("--host-network", action="store_true",
                        help="run on the host's network instead of publishing the port")
    args = parser.parse_args(argv)
    started = time.monotonic()
    ensure_tools(need_debootstrap=not args.base)
    if not args.base:
        make_local_base()
    build_image(args.base or LOCAL_BASE)

    tag = f"totem-test-{os.getpid()}"
    volume = f"{tag}-data"
    project = tempfile.mkdtemp(prefix="totem-project.", dir="/var/tmp")
    containers: list[Container] = []
    port = free_port()

    def start(suffix: str, network: list[str] | None = None) -> Container:
        if network is None:
            network = (["--network", "host"] if args.host_network
                       else ["-p", f"127.0.0.1:{port}:{CONTAINER_PORT}"])
        container = Container(f"{tag}-{suffix}", volume, project, network, port)
        containers.append(container)
        return container

    try:
        podman("volume", "create", volume)
        with open(os.path.join(project, "hello.txt"), "w", encoding="utf-8") as handle:
            handle.write("a mounted project\n")
        os.chown(project, TOTEM_UID, TOTEM_UID)  # the project belongs to the Totem user
        os.chown(os.path.join(project, "hello.txt"), TOTEM_UID, TOTEM_UID)

        # 1. The first start, on an empty volume.
        first = start("first", ["--network", "none"] if args.host_network else None)
        if not check("the first start on an empty volume listens", first.wait_listening()):
            return 1
        token = check_first_start(first)
        first_seconds, first_code = first.stop_on_sigterm()
        first.remove()
        if args.host_network:  # the port of the host's network must be a free one
            podman("run", "--rm", *RUNTIME_FLAGS, "--network", "none", "-v", f"{volume}:/data",
                   "--entrypoint", "sed", IMAGE, "-i", f"s/^port = .*/port = {port}/", "/data/config.ini")

        # 2. A new container on the same volume: the server itself.
        server = start("server")
        if not check("a new container on the volume listens", server.wait_listening()):
            return 1
        answered = server.answers(token)
        hint = "" if answered or args.host_network else "where published ports do not work, run with --host-network"
        if not check("it answers on the host's port " + str(port), answered, hint):
            return 1
        check("it keeps the config.ini of the first start", server.token() == token
              and "wrote /data/config.ini" not in server.logs())
        check_server(server, token, "host's network" if args.host_network else "published port")
        host_file = os.path.join(project, "from-container.txt")
        owner = os.stat(host_file).st_uid if os.path.exists(host_file) else None
        check("what it writes in the project reaches the host, owned by the Totem user's id",
              owner == TOTEM_UID, f"owner {owner}")
        status, opened = server.http("POST", "/api/projects_open", token, {"path": "/work/demo"})
        projectid = opened.get("id", "") if isinstance(opened, dict) else ""
        check("opens the mounted project through the API", status == 200 and bool(projectid), f"{status}")

        # 3. A restart of the container, then SIGTERM with a keep-alive connection open.
        podman("restart", "-t", "10", server.name)
        if check("the restarted container listens", server.wait_listening(2) and server.answers(token)):
            check_kept(server, token, projectid, "across a restart of the container")
        idle = socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT_S)
        idle.sendall(b"GET /api/account HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     + token.encode() + b"\r\n\r\n")
        idle.recv(65536)  # the answer; the connection stays open (keep-alive)
        seconds, code = server.stop_on_sigterm()
        idle.close()
        check(f"stops on SIGTERM within {STOP_LIMIT_S} s, exit status 0", seconds < STOP_LIMIT_S and code == "0",
              f"{seconds:.1f} s, exit status {code}; the first container: {first_seconds:.1f} s, {first_code}")
        logs = server.logs()

        # 4. Another new container on the same volume.
        server.remove()
        again = start("again")
        if check("a third container on the volume listens", again.wait_listening() and again.answers(token)):
            check_kept(again, token, projectid, "in a new container on the same volume")
        check("no traceback in the logs", "Traceback" not in logs + again.logs())
    finally:
        for container in containers:
            container.remove()
        podman("volume", "rm", "-f", volume, check_rc=False)
        shutil.rmtree(project, ignore_errors=True)

    elapsed = time.monotonic() - started
    if failures:
        say(f"docker-test: {len(failures)} check(s) failed in {elapsed:.0f} s")
        return 1
    say(f"docker-test: every check passed in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
