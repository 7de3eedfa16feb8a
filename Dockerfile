# syntax=docker/dockerfile:1
# jobqueue-exporter: Prometheus exporter and alerting sidecar for a PostgreSQL job queue.
#
#   docker build -t jobqueue-exporter .
#   docker run --rm -p 10049:10049 \
#     -e JOBQUEUE_EXPORTER_DSN=postgresql://exporter@db:5432/app jobqueue-exporter
#
# Nothing publishes this image: for Kubernetes, tag and push it to your registry and point
# deploy/kubernetes/kustomization.yaml's images: at it (docs/deploy.md, "Build the image").
#
# Configuration: flags after the image name, JOBQUEUE_EXPORTER_* environment variables, or
# a YAML file mounted at /etc/jobqueue-exporter/config.yml and passed with
# --config.file=/etc/jobqueue-exporter/config.yml. Keep the password out of flags: use
# JOBQUEUE_EXPORTER_DSN or a mounted file named by --database.password-file.

ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

# --- builder: turn the source tree into one wheel, then a venv holding it and its deps ---
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY exporter/ exporter/

# The wheel is built in isolation, so nothing from the build tools leaks into the venv;
# every runtime dependency ships a manylinux wheel, so no compiler is needed.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/jobqueue-exporter \
    && /opt/jobqueue-exporter/bin/pip install /wheels/*.whl

# --- final: the venv only, no source tree, no build tools, no wheel cache ---
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="jobqueue-exporter" \
      org.opencontainers.image.description="Prometheus exporter and alerting sidecar for a PostgreSQL job queue" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/jobqueue-exporter/bin:$PATH

# A fixed UID/GID (the port number, easy to remember) so Kubernetes can check runAsNonRoot
# and volume ownership without resolving names inside the image.
RUN groupadd --system --gid 10049 jobqueue-exporter \
    && useradd --system --uid 10049 --gid 10049 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin jobqueue-exporter \
    && install -d -o root -g 10049 -m 0750 /etc/jobqueue-exporter

COPY --from=builder /opt/jobqueue-exporter /opt/jobqueue-exporter

USER 10049:10049
EXPOSE 10049

# /healthz only says the process serves HTTP (it never touches the database), so a database
# outage does not get the container restarted. Slim images have no curl: Python's urllib it
# is. The port follows (the first address of) JOBQUEUE_EXPORTER_WEB_LISTEN_ADDRESS.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('JOBQUEUE_EXPORTER_WEB_LISTEN_ADDRESS', ':10049').split(',')[0].rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]

ENTRYPOINT ["jobqueue-exporter"]
