"""The invariant audit (``manage.py audit_invariants``): reads every record and reports any that breaks
the lifecycle's rules. Reads only."""
