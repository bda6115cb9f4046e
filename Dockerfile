# The gpu-scheduler image used by manifests/deployment.yaml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scheduler scheduler
COPY topology topology
COPY reclaim reclaim
COPY metrics metrics
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home scheduler
USER 10001
ENTRYPOINT ["gpu-scheduler"]
