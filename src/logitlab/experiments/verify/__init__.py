"""Verify: speculative-decoding verify blocks (M=K) against M=1 greedy decoding, and the near-tie guard.

``run`` (the experiment), ``config`` (its settings and their checks),
``classify`` (its verdict over the in-block rows), ``results`` (its records),
``guard`` (the guard's block decision, rollback and guarded loop),
``guard_calibration`` (τ from held-out rows; a guarded run against M=1).
"""
