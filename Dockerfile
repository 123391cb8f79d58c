# syntax=docker/dockerfile:1
# One image for every service; the command chooses the service (compose.yaml sets it):
#   docker build -t delegate .                      # the default target: every service but tasks
#   docker run delegate python -m delegate.agent
#   docker build --target tasks -t delegate-tasks . # the same plus Debian's Chromium
# Targets: `service` (the default), `ledger` (adds pg_dump for `backup` with DATABASE_URL),
# `tasks` (adds Chromium for the browser tool). Not in any image: the launcher and its
# nats-server binary (`make run` only), the test tooling, espeak-ng (the tests' voices).

# Debian trixie: its postgresql-client (17) matches the postgres image of compose's profile.
ARG PYTHON_IMAGE=python:3.11-slim-trixie

# ---- builder: a venv with the members and their pinned dependencies -------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /venv
ENV PATH=/venv/bin:$PATH
WORKDIR /src
COPY constraints.txt ./
COPY services/contracts services/contracts
COPY services/runtime services/runtime
COPY services/ledger services/ledger
COPY services/gateway services/gateway
COPY services/agent services/agent
COPY services/voice services/voice
COPY services/inner-plane services/inner-plane
COPY services/memory services/memory
COPY services/tasks services/tasks
COPY services/pollers services/pollers
COPY services/openai-standin services/openai-standin
# urllib3-future from its sdist without its urllib3 override (see the Makefile's note).
RUN URLLIB3_NO_OVERRIDE=1 PIP_NO_BINARY=urllib3-future pip install -c constraints.txt \
      ./services/contracts ./services/runtime ./services/ledger ./services/gateway ./services/agent \
      ./services/voice ./services/inner-plane ./services/memory ./services/tasks ./services/pollers \
      ./services/openai-standin

# ---- base: slim, non-root, the venv and the browser app ---------------------------------------
FROM ${PYTHON_IMAGE} AS base
# uid 10001 owns /data: a new named volume mounted there takes this ownership.
RUN groupadd --system --gid 10001 delegate \
 && useradd --system --uid 10001 --gid delegate --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin delegate \
 && mkdir -p /data && chown delegate:delegate /data
COPY --from=builder /venv /venv
COPY client /app/client
COPY deploy/healthcheck.py /app/deploy/healthcheck.py
# DELEGATE_HOST: the gateway listens on loopback by default; in a container it must take
# outside connections. /app holds no .env: settings come from the environment alone.
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    RUNTIME_DATA_DIR=/data CLIENT_DIR=/app/client DELEGATE_HOST=0.0.0.0
WORKDIR /app

# ---- tasks: the browser tool drives Debian's Chromium headless shell (Playwright never downloads
# one): Chromium's own headless build, without the full browser's layers and their packages ----
FROM base AS tasks
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium-headless-shell \
 && rm -rf /var/lib/apt/lists/*
USER delegate
CMD ["python", "-m", "delegate.tasks"]

# ---- ledger: pg_dump and pg_restore for `python -m delegate.ledger backup` on PostgreSQL -------
FROM base AS ledger
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-client \
 && rm -rf /var/lib/apt/lists/*
USER delegate
CMD ["python", "-m", "delegate.ledger"]

# ---- service: every other service (the last stage, so the default target) --------------------
FROM base AS service
USER delegate
CMD ["python", "-m", "delegate.gateway"]
