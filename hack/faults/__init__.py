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
| `soak`          | every fault family in sequence; prints a table (`python -m hack.faults.soak`) |
"""
