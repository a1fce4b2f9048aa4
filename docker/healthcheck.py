"""The image's health check: an authenticated API read (GET /api/account) on Totem's own port.

Reads /data/config.ini with Totem's own reader, so the address, port and token are exactly the
ones the server uses. Exit status 0 when the server answers 200, 1 otherwise (the HEALTHCHECK
convention); the token is never printed.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

sys.path.insert(0, "/app")

from totem.config import ConfigError, load_config  # from /app, put on the path above

CONFIG_PATH = "/data/config.ini"
TIMEOUT_S = 4  # under the HEALTHCHECK --timeout
# An address that listens everywhere is reached on the loopback of its family.
ANY_TO_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "localhost": "127.0.0.1"}


def main() -> int:
    try:
        config = load_config(CONFIG_PATH)
    except (ConfigError, OSError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    host = ANY_TO_LOOPBACK.get(config.listen, config.listen)
    host = f"[{host}]" if ":" in host else host
    request = urllib.request.Request(f"http://{host}:{config.port}/api/account")
    if config.token:
        request.add_header("Authorization", f"Bearer {config.token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: GET /api/account answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
