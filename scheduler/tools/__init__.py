"""Offline and operator tools of the command line: explain, simulate, topology discovery.

They reuse the scheduler's cache, framework and plugins in process; the daemon never imports them.
"""
