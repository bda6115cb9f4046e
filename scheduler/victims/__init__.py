"""Who may be evicted to make room, the decisions: kube-scheduler's DefaultPreemption victim
choice, PodDisruptionBudgets, victims weighed with their gangs, Kueue victims, and the gathering
of candidates from the cache. Plain data in, a decision out; the PostFilters act on them.

May import: `scheduler.gangs` and everything below it (`framework`, `state`, `kube`, `model`).
"""
