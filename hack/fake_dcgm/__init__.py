"""A fake NVIDIA dcgm-exporter for clusters of kwok fake GPU nodes.

Role: serve, for every GPU of every fake GPU node, the Prometheus series the real dcgm-exporter
serves (utilization, power, energy, framebuffer, the last Xid, volatile double-bit ECC errors,
optionally GR engine activity), driven by usage
that each pod scripts in its annotations. Prometheus scrapes it like the real exporter, so the
scheduler's reclaim logic is exercised end to end without GPUs.

Fake GPU nodes are Nodes annotated ``kwok.x-k8s.io/node: fake`` whose capacity has
``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``, or whose ResourceSlices publish GPUs of driver
``gpu.nvidia.com`` (Dynamic Resource Allocation). A DRA pod holds the GPUs of the allocated
devices of its ResourceClaims reserved for it, matched to the node's GPUs by UUID as
dcgm-exporter matches what the kubelet's pod-resources API reports (see
:mod:`hack.fake_dcgm.dra_holders`).

Annotation contract
-------------------
Pod annotations:

``fake-dcgm.gpu-scheduler.io/usage``
    The pod's GPU usage shape (see :mod:`hack.fake_dcgm.usage`):

    * ``constant:util=30`` -- utilization 30 % (0..100) all the time;
    * ``periodic:period=3,duty=0.1,level=100[,phase=0]`` -- ``level`` % for ``duty * period``
      seconds of every ``period`` seconds, starting ``phase`` seconds into each period, 0 %
      otherwise; point-sampled, so it aliases against the scrape interval as NVML does;
    * ``trace:phase=<name>`` -- replay of one phase of the CSV trace given with ``--trace``,
      one row a second, looping; utilization, power and framebuffer come from the trace.

    Shapes run from the pod's ``status.startTime`` (else its ``creationTimestamp``). No
    annotation means 0 % (an idle holder). Invalid text is logged and the pod is treated as
    0 %; it never stops the exporter.
``fake-dcgm.gpu-scheduler.io/fb-used-mib``
    Framebuffer in use (MiB) while the pod holds its GPUs, e.g. ``"20480"``; default 0, or the
    trace's value for a ``trace:`` shape. Invalid text is logged and counts as 0.
``gpu-scheduler.io/gpus``
    Comma-separated GPU indices the scheduler chose, e.g. ``"0,1"``. Without it the pod gets
    the lowest free indices of its node (see :mod:`hack.fake_dcgm.holders`).

Node annotations:

``fake-dcgm.gpu-scheduler.io/mig-gpu``
    Physical GPU index hosting all MIG instances (default: the ``nvidia.com/gpu`` capacity,
    i.e. one extra GPU after the whole ones).
``fake-dcgm.gpu-scheduler.io/profiling``
    ``"true"`` serves ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` for this node even without
    ``--profiling``.
``fake-dcgm.gpu-scheduler.io/xid`` and ``fake-dcgm.gpu-scheduler.io/ecc-dbe``
    Injected GPU faults, ``INDEX=VALUE`` comma-separated: ``"3=79"`` makes GPU 3 report Xid 79
    in ``DCGM_FI_DEV_XID_ERRORS``, ``"5=2"`` two volatile double-bit ECC errors in
    ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (see :mod:`hack.fake_dcgm.faults`). Every GPU reports 0
    in both otherwise; on a DRA node the index is that of the served GPU of its slice.

The node label ``nvidia.com/gpu.product`` selects the model name and power model.

Modules, bottom up: ``trace`` (CSV), ``usage`` (shapes), ``power`` (power models),
``identity`` (GPU UUIDs), ``faults`` (injected Xid / ECC faults), ``dra_holders`` (GPUs held
through claims), ``holders`` (who holds which GPU), ``model`` (readings and exact energy),
``render`` (exposition text) -- all pure, time passed in -- then ``exporter`` (state),
``source`` (API listing), ``app`` (HTTP and background tasks), ``server`` (start/stop) and
``__main__`` (command line).
"""
