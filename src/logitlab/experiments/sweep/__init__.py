"""Sweeps: a matrix of candidates × prompts, one job per cell and prompt, run by an executor.

``matrix`` (the typed cells and jobs) and ``matrix_file`` (the TOML/JSON file),
``job`` (one job: a function of its spec alone), ``run`` (the sweep: plan,
resume, run every job), ``executors`` (local workers) and ``executor_ray`` (a
Ray cluster), ``summary`` (the cells' verdicts and speed calls).
"""
