"""bench run: the schedule, failed blocks, A/A mode, real commands end to end."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab import report
from logitlab.perf.commands import BenchRunConfig, bench_run

PY = sys.executable


def test_metric_that_is_not_a_number_blames_the_regex_not_the_command():
    with pytest.raises(InputError) as e:
        bench_run(BenchRunConfig(control="echo x=abc", candidate="echo x=abc", blocks=1, warmup=1,
                                 metric_regex=r"x=(\w+)", metric_name="x"))
    message = str(e.value)
    assert message.startswith("--metric regex 'x=(\\\\w+)' captured 'abc', which is not a number"), message
    assert "failed" not in message and "in the output of the control command" in message


class FakeRunner:
    """Deterministic measurements: the candidate is `ratio` times the control's wall time."""

    def __init__(self, ratio=1.0, fail=lambda n, cmd: False, metric=None):
        self.ratio, self.fail, self.metric, self.calls = ratio, fail, metric, []

    def __call__(self, command, *, metric=None, timeout=None):
        n = len(self.calls)
        self.calls.append(command)
        wall = 1.0 * (self.ratio if command == "cand" else 1.0) * (1 + 0.01 * ((n * 7) % 5) / 5) * (1 + 0.001 * n)
        failed = self.fail(n, command)
        return dict(wall_s=wall, user_s=wall / 2, sys_s=0.1, max_rss_bytes=1000 + n, exit_status=1 if failed else 0,
                    metric=None if failed or self.metric is None else self.metric / wall,
                    error="exit status 1" if failed else None, stdout_tail="", stderr_tail="boom" if failed else "")


def test_schedule_and_call():
    runner = FakeRunner(ratio=0.8)
    result = bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=4, warmup=1, n_bootstrap=200),
                       runner=runner)
    assert runner.calls[:2] == ["ctl", "cand"]  # untimed warmups first
    assert runner.calls[2:6] == ["ctl", "cand", "cand", "ctl"] and runner.calls[6:10] == ["cand", "ctl", "ctl", "cand"]
    assert result.primary.metric == "wall" and result.primary.call == "faster"
    assert result.primary.ratio == pytest.approx(0.8, rel=0.02)
    assert list(result.comparisons) == ["wall", "user", "sys", "max_rss"]
    assert result.summaries["wall"]["candidate"] < result.summaries["wall"]["control"]
    assert result.to_dict()["comparisons"]["wall"]["call"] == "faster"


def test_regex_metric_is_primary_with_its_direction():
    result = bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=4, warmup=0, metric_regex="t=(.*)",
                                      metric_name="tokens_per_second", metric_unit="tokens/s",
                                      higher_is_better=True, n_bootstrap=200), runner=FakeRunner(0.8, metric=100.0))
    p = result.primary
    assert p.metric == "tokens_per_second" and p.higher_is_better and p.call == "faster"
    assert list(result.comparisons)[0] == "tokens_per_second"


def test_failed_block_is_left_out_never_timed():
    runner = FakeRunner(fail=lambda n, cmd: n == 7)  # a measured run in block 1
    result = bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=4, warmup=1, n_bootstrap=200),
                       runner=runner)
    assert result.failed_blocks == [1]
    assert result.primary.n_blocks == 3
    assert [r.ok for r in result.runs].count(False) == 1


def test_warmup_failure_stops_with_partial_result():
    with pytest.raises(InputError, match="candidate command 'cand' failed \\(exit status 1\\): boom in a warmup") as e:
        bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=3), runner=FakeRunner(
            fail=lambda n, cmd: cmd == "cand"))
    assert len(e.value.partial.runs) == 2


def test_command_failing_every_time_stops_early():
    runner = FakeRunner(fail=lambda n, cmd: cmd == "cand")
    with pytest.raises(InputError, match="on each of its first 2 runs"):
        bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=10, warmup=0), runner=runner)
    assert len(runner.calls) < 8


def test_a_failing_command_of_an_aa_is_named_the_control():
    """An A/A (``--aa``) runs the control command on both sides: its failure names the control, not a
    "candidate" the user never gave."""
    runner = FakeRunner(fail=lambda n, cmd: True)
    with pytest.raises(InputError, match=r"^control command 'ctl' failed .* on each of its first 2 runs"):
        bench_run(BenchRunConfig(control="ctl", candidate="ctl", aa=True, blocks=4, warmup=0), runner=runner)


def test_aa_mode_reports_false_positive_rate_and_suggests_margin():
    result = bench_run(BenchRunConfig(control="ctl", candidate="ctl", aa=True, blocks=6, warmup=0, n_bootstrap=200),
                       runner=FakeRunner())
    aa = result.aa
    assert aa is not None and aa.n_pairs == 6 * 4
    assert set(aa.single_run_fpr) == {"2%", "5%", "15%"}
    assert aa.suggested_margin == result.primary.margin and result.primary.margin_source == "a/a"
    assert aa.false_positive == (result.primary.call in ("faster", "slower"))


@pytest.mark.parametrize("kwargs, message", [
    (dict(control="", candidate="x"), "--control is empty"),
    (dict(control="a", candidate="b", blocks=0), "--repeats must be at least 1"),
    (dict(control="a", candidate="b", aa=True), "A/A mode runs the control on both sides"),
    (dict(control="a", candidate="b", timeout=-1.0), "--slot-timeout must be positive seconds"),
    (dict(control="a", candidate="b", metric_regex="("), "not a valid regular expression"),
    (dict(control="a", candidate="b", margin=5.0),
     r"--margin must be a fraction between 0 and 1 \(0.02 = 2 %\), got 5$"),
    (dict(control="a", candidate="b", margin=0.0), "--margin must be a fraction between 0 and 1"),
    (dict(control="a", candidate="b", blocks=2, auto=True), "--max-repeats must be an integer from 3"),
    (dict(control="a", candidate="b", blocks=12, auto=True, max_time=0.0), "--max-time must be a positive"),
    (dict(control="a", candidate="b", max_time=60.0), "--max-time is the budget of --repeats auto"),
])
def test_config_errors(kwargs, message):
    with pytest.raises(InputError, match=message):
        BenchRunConfig(**kwargs)


def test_real_commands_two_blocks():
    result = bench_run(BenchRunConfig(
        control=f"{PY} -c \"print('rate=100')\"",
        candidate=f"{PY} -c \"x = b'1' * 100_000_000; print('rate=100')\"",  # 100 MB more, every page touched
        blocks=2, warmup=0, metric_regex=r"rate=(\d+)", metric_name="rate", n_bootstrap=200))
    assert len(result.runs) == 8 and all(r.ok for r in result.runs)
    assert result.primary.n_blocks == 2 and result.primary.ratio == 1.0  # the parsed metric is identical
    # peak RSS is each command's own (not the largest so far of all children): the candidate's is 100 MB more
    rss = {v: [r.max_rss_bytes for r in result.runs if r.variant == v] for v in ("control", "candidate")}
    extra = np.array(rss["candidate"]) - np.median(rss["control"])
    assert np.all((extra > 95e6) & (extra < 115e6)), rss


def _render(result, **kwargs):
    from rich.console import Console

    from logitlab import report

    console = Console(width=160, record=True)
    report.display(result, console, **kwargs)
    return console.export_text()


def test_one_block_renders_with_ci_and_mde_not_available():
    from logitlab import report

    result = bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=1, warmup=0, n_bootstrap=200),
                       runner=FakeRunner(ratio=0.9))
    assert result.primary.n_blocks == 1 and result.primary.position.p_value is None
    text = _render(result)
    assert "p=n/a" in text and "(n/a)" in text and "a paired CI needs at least 2 blocks" in text
    md = report.markdown(result)
    assert "| wall |" in md and "p=n/a" in md


def test_no_complete_block_prints_one_line_instead_of_the_table():
    from logitlab import report

    with pytest.raises(InputError) as e:
        bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=3), runner=FakeRunner(
            fail=lambda n, cmd: cmd == "cand"))
    text = _render(e.value.partial, show_error=False)
    assert "no complete block: 0/12 timed runs done, 1 failed" in text
    assert "metric" not in text and "δ from" not in text and "stopped early" not in text
    md = report.markdown(e.value.partial)
    assert "no complete block: 0/12 timed runs done, 1 failed (first: candidate warmup, exit status 1)" in md
    assert "| metric |" not in md and "**Stopped early:**" in md


# --- --repeats auto (statistics: tests/perf/test_sequential.py) ---------------------------------


def test_auto_stops_early_on_a_clear_speedup_with_the_repeated_ci():
    runner = FakeRunner(ratio=0.8)
    result = bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=12, auto=True, warmup=1,
                                      n_bootstrap=200), runner=runner)
    decision = result.sequential["wall"]
    assert (decision.call, decision.stop_reason) == ("faster", "decided")
    assert 3 <= decision.n_blocks < 12 and len(runner.calls) == 2 + 4 * decision.n_blocks
    p = result.primary
    assert p.call == "faster" and (p.ci_low, p.ci_high) == (decision.ci_low, decision.ci_high) and p.ci_high < 1
    assert set(result.sequential) == set(result.comparisons)
    assert f"--repeats auto: ran {decision.n_blocks} of at most 12 blocks (decided" in report.markdown(result)
    data = result.to_dict()
    assert data["sequential"]["wall"]["stop_reason"] == "decided" and data["config"]["auto"] is True


def test_auto_skips_failed_blocks_and_keeps_the_aa_report():
    runner = FakeRunner(fail=lambda n, cmd: n == 3)  # a measured run in block 0
    result = bench_run(BenchRunConfig(control="ctl", candidate="ctl", aa=True, blocks=6, auto=True, warmup=0,
                                      n_bootstrap=200), runner=runner)
    assert result.failed_blocks == [0]
    decision = result.sequential["wall"]
    assert decision.n_blocks == result.primary.n_blocks == len({r.block for r in result.runs if r.block is not None}) - 1
    assert decision.stop_reason in ("decided", "max-blocks") and decision.call != "continue"
    assert result.aa is not None and result.aa.false_positive == (decision.call in ("faster", "slower"))


def test_auto_with_real_commands_stops_on_a_slower_sleep():
    result = bench_run(BenchRunConfig(control="sleep 0.02", candidate="sleep 0.06", blocks=10, auto=True, warmup=0,
                                      n_bootstrap=200))
    decision = result.sequential["wall"]
    assert (decision.call, decision.stop_reason) == ("slower", "decided") and decision.n_blocks < 10
    assert result.primary.ratio > 1.5
