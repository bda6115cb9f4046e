"""What runs when a pod (or a gang) fits on no node: idle reclaim first (measurably idle GPUs
whose PriorityClass allows it), then priority preemption as kube-scheduler's DefaultPreemption;
the policy steps that choose victims and the enforcement that nominates and evicts.

    reclaim            `Reclaimer`, the entry point: cooldowns and one attempt, step by step
    reclaim_plans      candidate nodes, eligible pods, whole Kueue Workloads, victims per node
    usage              measured GPU usage (`UsageSource`) and the idle verdicts
    preemption         priority preemption's plans and events
    enforcement        re-validate, reserve, nominate and evict, for both steps
    kueue_takeback     Kueue victims taken back through their Workloads
    reclaim_events     the counters, events and log lines of an attempt
    preemptors         nominations and the latest informer view of each preemptor
    reclaim_policies   PriorityClass reclaim policies (`PolicyStore`)
    nominated_node     `NominatedNode`, the Narrow plugin preferring the nominated node
    pod_watch          `PodWatch`, the pod informer handler telling the Reclaimer
    gang_reclaim       `GangReclaimer`, one plan for a whole gang

May import: `scheduler.victims`, `scheduler.gangs`, `scheduler.plugins`, and everything below,
and `reclaim` for the idle verdicts.
"""
