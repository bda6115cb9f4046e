"""The gpu-scheduler daemon.

Configuration, the command line, informers and the scheduling cache, the scheduling queue, the
plugin framework and its plugins, binding, and leader election. This is the only package that runs
the scheduling loop; it calls the pure code in `topology` and `reclaim` and talks to the API server
through small adapter modules.
"""
