"""The ``bisect`` report: the first bad commit with its evidence, and every step that led there.

:func:`bisect_document` turns a :class:`~logitlab.experiments.bisect.BisectResult`
into a :class:`~logitlab.report.document.Document`; the renderers write it.
Nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Any

from logitlab.experiments.bisect.run import BisectResult, BisectStep
from logitlab.report.document import Bullets, Document, Figure, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.text import INTERRUPTED, plural, stopped_line

__all__ = ["bisect_document", "STEP_HEADER"]

STEP_HEADER = ("#", "commit", "subject", "tested as", "outcome", "evidence", "build", "probe")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def _probe_rows(result: BisectResult) -> list[tuple[str, Any]]:
    cfg, ref = result.config, result.reference
    if cfg["probe"] == "numerics":
        v = cfg["variant"]
        spec = v["engine"] + ":" + str(v["options"].get("command") or v.get("model") or "")
        rest = {k: val for k, val in v["options"].items() if k != "command"}
        if rest:
            spec += "?" + "&".join(f"{k}={val}" for k, val in rest.items())
        return [("probe", rich("numerics: ", Span(spec, "code"))),
                ("workload", f"{ref.get('prompt_tokens', '?')} prompt tokens + {ref.get('decode_tokens', '?')} greedy "
                             "decode tokens on GOOD's build, replayed on every other build"),
                ("bad when", f"the verdict against GOOD is worse than {cfg['require']}")]
    metric = cfg["metric_name"] + (f" ({cfg['metric_unit']})" if cfg.get("metric_unit") else "")
    margin = ref.get("margin")
    delta = "n/a" if margin is None else f"δ {100 * margin:.1f}% ({ref.get('margin_source', '?')})"
    return [("probe", rich("speed: ", Span(cfg["command"], "code"))),
            ("metric", f"{metric}, {'higher' if cfg['higher_is_better'] else 'lower'} is better; each build "
                       f"against GOOD's (a second work tree) in ABBA/BAAB blocks, 3 to {cfg['max_blocks']} "
                       "(sequential stop)"),
            ("bad when", f"slower; good when faster or equivalent ({delta}); inconclusive at the budget: skip")]


def _step_row(i: int, step: BisectStep) -> tuple:
    outcome = step.outcome
    word = Span(outcome, f"call:{outcome}") if outcome in ("good", "bad", "skip") else Span(outcome, "strong")
    role = {"good": "GOOD", "bad": "BAD", "test": "midpoint"}[step.role]
    subject = step.subject if len(step.subject) <= 36 else step.subject[:35] + "…"
    return (str(i), Span(step.commit[:10], "code"), subject, role, rich(word), step.reason,
            _seconds(step.build.seconds if step.build else None),
            _seconds(step.probe.seconds if step.probe else None))


def _figure(result: BisectResult) -> Figure:
    points = []
    for step in result.steps:
        point: dict[str, Any] = {"commit": step.commit, "position": step.position, "outcome": step.outcome}
        if step.probe is not None and step.probe.speed is not None:
            s = step.probe.speed
            point.update(ratio=s.ratio, ci_low=s.ci_low, ci_high=s.ci_high, n_blocks=s.n_blocks)
        if step.probe is not None and step.probe.numerics:
            point.update(differing_rows=step.probe.numerics.get("differing_rows"),
                         n_positions=step.probe.numerics.get("n_positions"))
        points.append(point)
    return Figure("bisect-steps", "each build probed, by its position between GOOD (-1) and BAD; speed: the ratio "
                                  "to GOOD with its CI", {"probe": result.config["probe"],
                                                          "commits": result.commits, "steps": points})


def bisect_document(result: BisectResult, *, show_error: bool = True, **_: Any) -> Document:
    """The report of ``bisect``.

    Args:
        result: the bisection, complete or stopped early.
        show_error: include the "stopped early" line (leave it out when the caller prints the error itself).
    """
    cfg = result.config
    doc = Document("bisect", "logitlab bisect")
    if result.first_bad:
        c = result.commit(result.first_bad)
        title = rich("logitlab bisect: first bad commit ", Span(c["sha"][:10], "code"), f" {c['subject']!r}")
    elif result.suspects:
        title = rich("logitlab bisect: the first bad commit is one of ", Span(str(len(result.suspects)), "strong"),
                     " (skipped commits between)")
    else:
        title = rich("logitlab bisect: ", Span("no result", "strong"))
    original = result.original
    where = f"branch {original['branch']}" if original.get("branch") else f"detached HEAD at {original['sha'][:10]}"
    rows = [("repository", Span(cfg["repo"], "code")),
            ("range", f"{cfg['range']}: GOOD {result.good[:10]}, BAD {result.bad[:10]}, "
                      f"{plural(len(result.commits), 'commit')} after GOOD on the first-parent line"),
            *_probe_rows(result),
            ("build", Span(cfg["build"], "code") if cfg.get("build") else "none (--build not given)"),
            ("steps", f"{plural(result.n_built, 'build')}, {plural(len(result.steps), 'probe step')}; "
                      f"checkout {'restored to ' + where if result.restored else 'NOT restored: was ' + where}")]
    doc.add(Heading(title), KeyValues(rows, boxed=True))
    if result.error == INTERRUPTED and show_error:  # before any finding: what it rests on
        doc.add(Paragraph(stopped_line(INTERRUPTED, done=len(result.steps), unit="probe step",
                                       rests_on="the commits named"), tone="error"))
    if result.first_bad:
        bad = result.step_of(result.first_bad)
        index = next(i for i, c in enumerate(result.commits) if c["sha"] == result.first_bad)
        before = result.commits[index - 1]["sha"] if index > 0 else result.good
        good = result.step_of(before)
        lines = [rich(Span(result.first_bad[:10], "code"), f" ({result.commit(result.first_bad)['date'][:10]}): "
                      f"{bad.reason if bad else 'bad'}"),
                 rich("the commit before it, ", Span(before[:10], "code"), ": "
                      + (good.reason if good and good.role != "good" else "GOOD itself"))]
        doc.add(Paragraph(rich(Span("first bad commit", "strong"), ": ", Span(result.first_bad, "code"), " ",
                               repr(result.commit(result.first_bad)["subject"]))),
                Bullets(lines, tight=True))
    elif result.suspects:
        doc.add(Paragraph("skipped builds leave several candidates; the first bad commit is one of these "
                          "(oldest first):", tone="warning"),
                Bullets([rich(Span(s[:10], "code"), " ", result.commit(s)["subject"]) for s in result.suspects],
                        tight=True))
    doc.add(Table(STEP_HEADER, [_step_row(i + 1, s) for i, s in enumerate(result.steps)], title="steps, in the "
                  "order run", align=("right", "left", "left", "left", "left", "left", "right", "right")))
    if cfg.get("build"):
        doc.add(Paragraph("build outputs in the work tree are those of the last commit built: rebuild there",
                          tone="dim", tight=True))
    if not result.restored:
        doc.add(Paragraph(f"the repository was NOT restored to {where}: check it out by hand "
                          f"(git -C {cfg['repo']} checkout {original.get('branch') or original['sha']})",
                          tone="error"))
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    doc.add(_figure(result))
    return doc
