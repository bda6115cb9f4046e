# The fake dcgm-exporter of the kind cluster: the scheduler image (it has every Python dependency
# the exporter needs) plus hack/fake_dcgm. Built from the repository root by up.sh.
ARG SCHEDULER_IMAGE=gpu-scheduler.local/gpu-scheduler:dev
FROM ${SCHEDULER_IMAGE}
COPY hack/__init__.py hack/__init__.py
COPY hack/fake_dcgm hack/fake_dcgm
ENTRYPOINT ["python3", "-m", "hack.fake_dcgm"]
