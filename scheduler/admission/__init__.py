"""Admission webhooks, served by every replica (only the leader schedules).

- `scheduler.admission.rules`: the decisions, pure functions of plain dicts: which PriorityClass
  reclaim annotations are refused (`reclaim.policy.parse_policy`, the parser reclaim uses too),
  and which pods get `spec.schedulerName` set to this scheduler's name.
- `scheduler.admission.certs`: a self-signed serving certificate when no certificate is mounted.
- `scheduler.admission.server`: kopf's admission machinery (its own registry, no watching, no
  peering, no signal handling) running those rules inside the daemon's event loop.
"""
