"""Bisect: the first commit of a git range where the numerics or the speed changed.

``run`` (the search over the range), ``probes`` (what is measured at a commit).
"""
