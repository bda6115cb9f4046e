# The gpu-scheduler image used by manifests/deployment.yaml.
# `docker build .` builds it on the official Python image; `python -m hack.image` builds the same
# steps offline on a Debian bookworm root filesystem made with mmdebstrap (docs/operations.md).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# The root filesystem is read-only in the Deployment: never try to write bytecode caches
# (pip precompiles the installed packages).
ENV PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scheduler scheduler
COPY topology topology
COPY reclaim reclaim
COPY metrics metrics
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home scheduler
USER 10001
ENTRYPOINT ["gpu-scheduler"]
