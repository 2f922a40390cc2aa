"""The parts of the ``openai`` engine (:mod:`logitlab.engines.openai`): talking to inference servers.

- :mod:`~logitlab.engines.servers.http`: JSON over HTTP with timeouts, retries and a request count;
- :mod:`~logitlab.engines.servers.identity`: which server is behind a URL, and its build;
- :mod:`~logitlab.engines.servers.layouts`: log-probabilities read out of each server's answer layout;
- :mod:`~logitlab.engines.servers.dialects`: a greedy completion and one next-token distribution, per server;
- :mod:`~logitlab.engines.servers.modes`: the scoring modes (prompt_logprobs, return_logprob, echo, teacher-forced);
- :mod:`~logitlab.engines.servers.alignment`: the checks that the rows line up with the positions.

Only :mod:`logitlab.engines.openai` imports them (``tests/test_architecture.py``).
"""
