"""Golden logits: record a build's logits once, check later builds against them, update with a reason.

``run`` (record, check, update), ``results`` (their configs and the check's
records), ``provenance`` (what identifies a golden's build and device, and the
rule that picks one), ``kld`` (the check against llama-perplexity's
KL-divergence base files).
"""
