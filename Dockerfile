# Totem in a container: the agent's commands reach the projects mounted under /work and the
# data volume, not the machine around it (see "Run in a container" in the README).
#
#   docker build -t totem .
#   podman build --format docker -t totem .     (the docker format keeps the HEALTHCHECK)
#
# BASE is any Debian-based image with Python 3.11 or newer; one without Python gets Debian's.
ARG BASE=python:3.12-slim
FROM ${BASE}

# The Totem user. Files it creates in a mounted project belong to this id on the host.
ARG TOTEM_UID=10001
ARG TOTEM_GID=10001

LABEL org.opencontainers.image.title="Totem" \
      org.opencontainers.image.description="A self-hosted AI coding agent"

ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# git, ripgrep and bash for the agent and the Terminal panel; tini as PID 1, which hands the
# stop signal to Totem and reaps the orphans of the commands it runs; bubblewrap for the
# sandbox of the agent's commands where the container runtime allows user namespaces (the
# default seccomp profiles of Docker and Podman do not: the sandbox is then Landlock alone,
# and the container stays the outer boundary; README "The sandbox").
RUN set -eu; \
    packages="bash bubblewrap ca-certificates git ripgrep tini"; \
    if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then packages="$packages python3 python3-venv"; fi; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --gid "$TOTEM_GID" totem; \
    useradd --uid "$TOTEM_UID" --gid totem --no-log-init --no-create-home --home-dir /work \
        --shell /bin/bash totem

# The runtime requirements, in a virtual environment owned by root; pip trusts the system's
# certificate store, as git and the agent's commands do.
COPY requirements.txt /app/requirements.txt
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
        --cert /etc/ssl/certs/ca-certificates.crt -r /app/requirements.txt

COPY totem.py /app/
COPY totem /app/totem
COPY static /app/static
COPY docker /app/docker
# Compiled here, since Totem cannot write to /app: besides the scratch folders (/tmp, /var/tmp)
# it can write only to /data and /work.
RUN /opt/venv/bin/python -m compileall -q /app \
    && find /app -perm /022 -exec chmod go-w {} + \
    && install -d -o totem -g totem -m 0700 /data \
    && install -d -o totem -g totem -m 0755 /work

USER ${TOTEM_UID}:${TOTEM_GID}
WORKDIR /work
VOLUME ["/data"]
EXPOSE 8470
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/opt/venv/bin/python", "/app/docker/healthcheck.py"]
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/python", "/app/docker/entrypoint.py"]
