"""Differential test of feasibility: gpu-scheduler's filters against kube-scheduler's.

    python -m hack.differential --nodes 300 --pods 500 --seed 1
    python -m hack.differential --dra --nodes 40 --pods 300 --seed 1

On a fresh local cluster (hack/localcluster, without its own kube-scheduler, Prometheus or fake
exporter) a seeded scenario (generate.py) is installed: kwok nodes with zone/rack labels, taints,
cordons, GPUs; labelled namespaces; existing pods. Each generated pod is then judged by both
schedulers against the same, unchanging state, and the SETS of feasible nodes are compared.

Why this method:
- The reference is the pinned kube-scheduler binary, not a re-implementation: a dedicated
  instance (own schedulerName, all nodes evaluated, no preemption, no cluster-default spreading)
  whose V(10) log names every feasible node (reference.py explains the source facts). Reading the
  log costs one scheduling cycle per pod; pinning a copy of the pod to each node would cost one
  per node and pod, hundreds of times slower.
- gpu-scheduler's side runs the daemon's own profile (scheduler/core/profile.py default_framework)
  on a cache filled by the daemon's parse functions from a fresh list of the same API objects
  (ours.py), so the comparison sees what the daemon would see, without a second daemon's timing.
- Pods are judged one at a time and deleted with grace period 0 before the next is created: a
  watch delivers one resource's events in order, so kube-scheduler has seen the deletion before
  it sees the next pod, and every pod meets the same cluster. A fingerprint of the state both
  sides read, taken before and after each pod, catches a change made by anything else (the pod
  is then judged again), so such a change cannot pass for a scheduler difference.
- `--dra` runs the same method on DRA nodes with pods that use ResourceClaims (dra_generate.py,
  dra_ours.py, dra_run.py): the feasible sets, and when no node fits both FailedScheduling
  messages' per-reason node counts, are compared; dra_run.py says how each pod meets the same
  device state on both sides.
- Differences from gpu-scheduler's NVLink policy (`nvlink-policy: required` pods) are reported as
  justified; the reference's cluster-default topology spreading is switched off because
  gpu-scheduler does not apply it (docs/compatibility.md).
"""
