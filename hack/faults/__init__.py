"""Fault injection against the local cluster: invariants, injectors, a churn workload, the soak.

| module          | job                                                                          |
|-----------------|------------------------------------------------------------------------------|
| `invariants`    | pure checks over pods, nodes and scheduler log records                       |
| `proxy`         | a TCP proxy in front of the API server that resets connections at random     |
| `fake_prom`     | a Prometheus stand-in that forwards, stalls, errors, answers NaN or nothing  |
| `processes`     | `gpu-scheduler run` as a child process: SIGKILL, SIGSTOP/SIGCONT, restart     |
| `cluster_faults`| API server restart, etcd compaction (410 Gone on watches)                    |
| `workload`      | a seeded stream of GPU pods with churn                                       |
| `observe`       | cluster snapshots and the invariant audit over them                          |
| `dra_invariants`| pure checks over ResourceClaims and the pods using them                      |
| `dra_scenarios` | the DRA scene (a `D8` node, the template, DRA pods) and the DRA freeze       |
| `dra_faults`    | DRA faults: resets, Binding refused, claim deleted, slice republished        |
| `soak`          | every fault family in sequence; prints a table (`python -m hack.faults.soak`) |
"""
