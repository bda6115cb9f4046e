"""What runs when a pod (or a gang) fits on no node: idle reclaim first (measurably idle GPUs
whose PriorityClass allows it), then priority preemption as kube-scheduler's DefaultPreemption;
the policy steps that choose victims and the enforcement that nominates and evicts.

May import: `scheduler.victims`, `scheduler.gangs`, `scheduler.plugins`, and everything below,
and `reclaim` for the idle verdicts.
"""
