"""Gangs: pods scheduled all together or not at all. The gang model (PodGroups of
scheduling.k8s.io/v1beta1, scheduler-plugins' coscheduling and Kueue pod groups, tracked with
their members) and the planning of one gang cycle over the snapshot.

May import: `scheduler.framework`, `scheduler.state`, `scheduler.kube`, `scheduler.model`.
"""
