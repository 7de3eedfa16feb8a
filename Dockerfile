# syntax=docker/dockerfile:1
# jobqueue-exporter: Prometheus exporter and alerting sidecar for a PostgreSQL job queue.
#
#   docker build -t jobqueue-exporter .
#   docker run --rm -p 10049:10049 \
#     -e JOBQUEUE_EXPORTER_DSN=postgresql://exporter@db:5432/app jobqueue-exporter
#
# Nothing publishes this image: for Kubernetes, tag and push it to your registry and point
# deploy/kubernetes/exporter/kustomization.yaml's images: at it (docs/deploy.md, "Build the
# image").
#
# Configuration: flags after the image name, JOBQUEUE_EXPORTER_* environment variables, or
# a YAML file mounted at /etc/jobqueue-exporter/config.yml and passed with
# --config.file=/etc/jobqueue-exporter/config.yml. Keep the password out of flags: use
# JOBQUEUE_EXPORTER_DSN or a mounted file named by --database.password-file.

# python:3.11.15-slim-bookworm, pinned by the digest of its multi-platform image index (as
# recorded by docker-library/repo-info, repos/python/remote/3.11.15-slim-bookworm.md), so a
# rebuild of the tag upstream cannot change the image under us. To move on, take the new
# index digest from `docker buildx imagetools inspect python:<tag>` and change the comment.
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3

# --- builder: turn the source tree into one wheel, then a venv holding it and its deps ---
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY exporter/ exporter/

# The runtime dependencies come from requirements.lock, every version pinned and every file
# checked against its sha256 (--require-hashes); the wheel of this project is then added
# without resolving anything (--no-deps), and pip check proves the lock satisfies it.
# The wheel is built in isolation, so nothing from the build tools leaks into the venv;
# every runtime dependency ships a manylinux wheel, so no compiler is needed.
# Regenerate the lock after changing pyproject.toml's dependencies (pip-tools 7):
#   pip-compile --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
#     --no-emit-find-links --output-file=requirements.lock pyproject.toml
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/jobqueue-exporter \
    && /opt/jobqueue-exporter/bin/pip install --no-deps --require-hashes -r requirements.lock \
    && /opt/jobqueue-exporter/bin/pip install --no-deps /wheels/*.whl \
    && /opt/jobqueue-exporter/bin/pip check

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
# outage does not get the container restarted. The check runs without the container's
# arguments, so `healthcheck --pid=1` reads them from the exporter's own command line: it
# asks the address --web.listen-address gave, over HTTPS when --web.config.file has TLS.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["jobqueue-exporter", "healthcheck", "--pid=1"]

ENTRYPOINT ["jobqueue-exporter"]
