"""Parsing: API objects (pods, nodes, selectors, affinity terms, spread constraints, volumes,
resource quantities) turned into the scheduler's frozen records. Pure functions of plain dicts,
no I/O; a malformed field becomes a `FieldError`, never an exception.

May import: `scheduler.config`, `topology`. Everything else in `scheduler` builds on this.
"""
