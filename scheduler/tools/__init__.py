"""Offline and operator tools of the command line: explain, simulate, idle-report, topology
discovery, and the translation of kubectl's flags for the plugin `kubectl gpu-scheduler`.

They reuse the scheduler's cache, framework and plugins in process; the daemon never imports them.
"""
