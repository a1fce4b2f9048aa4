"""The container's start: the configuration file of the data volume, then Totem.

Totem in the container reads /data/config.ini and nothing else: no environment variable changes
its configuration. On the first start the volume has no such file, and one is written that
listens on every address of the container with a freshly generated access token, readable by the
Totem user only. The token is never printed: the log says once how to read it. Then Totem
replaces this process (exec), so that the stop signal reaches the server itself.

Arguments, when given, go to totem.py as they are (for example `run ...`, the headless client)
and no configuration is written.
"""

from __future__ import annotations

import os
import secrets
import sys

DATA_DIR = "/data"
CONFIG_PATH = os.path.join(DATA_DIR, "config.ini")
TOTEM = "/app/totem.py"
TOKEN_BYTES = 32  # 43 URL-safe characters from the system's CSPRNG

FIRST_CONFIG = """\
# Totem's configuration in the container, written on its first start. Every key of [totem]
# is described in the README ("Configuration"); a bad value stops the start with one line.
# Totem reads only this file: change a key here and restart the container.

[totem]
# Every address of the container, so that the published port reaches Totem; that needs the
# token below.
listen = 0.0.0.0
# The port inside the container; publish it on any port of the host (-p 127.0.0.1:8470:8470).
port = 8470
# The access token: sign in with it at /login, or send Authorization: Bearer <token>.
token = {token}
# The data folder: the volume at /data.
data = /data
"""


def write_first_config() -> None:
    """Create CONFIG_PATH with a new token, mode 0600. Raises FileExistsError when it exists."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    descriptor = os.open(CONFIG_PATH, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(FIRST_CONFIG.format(token=token))
        handle.flush()
        os.fsync(handle.fileno())


def fail(message: str) -> int:
    print(f"totem: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str]) -> int:
    if argv:
        os.execv(sys.executable, [sys.executable, TOTEM, *argv])
    user = f"user {os.getuid()}:{os.getgid()}"
    if not os.path.exists(CONFIG_PATH):
        if not os.access(DATA_DIR, os.W_OK | os.X_OK):
            return fail(f"{DATA_DIR} cannot be written by the Totem {user}: mount a volume there, "
                        f"or a folder that this user owns")
        try:
            write_first_config()
        except FileExistsError:
            pass  # another start wrote it first: use that one
        else:
            print(f"totem: wrote {CONFIG_PATH} with a new access token, readable by the Totem user only.\n"
                  f"totem: read it with: docker exec <container> grep ^token {CONFIG_PATH}"
                  f"  (podman exec for Podman)", flush=True)
    elif not os.access(CONFIG_PATH, os.R_OK):
        return fail(f"{CONFIG_PATH} cannot be read by the Totem {user}: give it to this user")
    os.execv(sys.executable, [sys.executable, TOTEM, "--config", CONFIG_PATH])
    return 1  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
