"""The pure renderers: escaping, caps with "n more", badges and colours, data-* attributes;
durable call counts, call bars and keyed waits (and the pure folds they render)."""

from __future__ import annotations

import re

import pytest

from agentq.events import EventKind
from agentq.outcomes import ErrorInfo
from agentq.store import StepRow, StepState
from agentq.widgets import html as h
from agentq.widgets.models.calls import CallCounts, CallTally
from agentq.widgets.models.timeline import Timeline
from agentq.workflows import Recorded, RunResult, RunStatus, StepStatus

from .fakes import T0, Lane, ReadStore

EVIL = "<img src=x onerror=alert(1)>"
EVIL_ATTR = '" onmouseover="alert(1)'


def no_raw(markup: str) -> None:
    assert "<img" not in markup
    assert 'onmouseover="alert' not in markup
    assert "&lt;img src=x onerror=alert(1)&gt;" in markup or "&quot;" in markup


def row(i: int = 0, state: StepState = StepState.COMPLETED, **kw: object) -> StepRow:
    base: dict[str, object] = {"started_at": T0, "finished_at": T0 + 1.5}
    base.update(kw)
    return StepRow(f"wf-{i}", 0, f"step-{i}", state, attempt=1, **base)  # type: ignore[arg-type]


def test_step_names_reasons_errors_and_ids_are_escaped_everywhere() -> None:
    bad = StepRow(
        EVIL_ATTR, 0, EVIL, StepState.FAILED, attempt=2, worker_id=EVIL, reason=EVIL,
        error=ErrorInfo("ValueError", EVIL), started_at=T0, finished_at=T0 + 1,
    )
    for markup in (
        h.steps_html([bad], now=T0),
        h.approval_html(bad),
        h.run_result_html(RunResult(EVIL_ATTR, RunStatus.FAILED, EVIL, EVIL, (EVIL,))),
        h.step_status_html(StepStatus.Waiting(EVIL)),
        h.step_status_html(StepStatus.Failed(EVIL, 3)),
        h.error_html(ValueError(EVIL)),
        h.outcome_html("approve", EVIL_ATTR, EVIL, None, ValueError(EVIL)),
        h.outcome_html("approve", EVIL_ATTR, EVIL, Recorded(EVIL_ATTR, EVIL, "resumed")),
        h.lanes_html([Lane(EVIL)]),
    ):
        no_raw(markup)


def test_an_approval_recorded_for_a_serving_engine_says_so() -> None:
    markup = h.outcome_html("approve", "ap-1", "ask", Recorded("ap-1", "approval", "resumed"))
    assert 'data-outcome="recorded"' in markup
    assert "approved" in markup and "recorded" in markup and "approval" in markup


def test_timeline_escapes_names_reasons_in_titles() -> None:
    store = ReadStore()
    store.event(EventKind.WORKFLOW_STARTED, EVIL_ATTR)
    store.event(EventKind.STEP_STARTED, EVIL_ATTR, (0, EVIL), attempt=1)
    store.event(EventKind.STEP_FAILED, EVIL_ATTR, (0, EVIL), attempt=1, reason=EVIL)
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(5), now=T0 + 10)
    no_raw(markup)
    assert markup.count("&lt;img") >= 2  # the label and the tooltip


def test_step_rows_carry_stable_data_attributes_and_badges() -> None:
    markup = h.steps_html(
        [row(1), row(2, StepState.WAITING, finished_at=None, reason="ok?")], now=T0 + 3
    )
    assert 'data-agentq="step-row" data-workflow="wf-1" data-step="step-1" data-index="0" ' \
        'data-status="completed"' in markup
    assert 'data-status="waiting"' in markup
    assert "1.50 s" in markup  # finished - started
    assert "3.00 s …" in markup  # open: counted up to now
    assert h.COLORS["completed"][0] in markup and h.COLORS["waiting"][0] in markup


def test_a_leased_row_names_its_holder_and_when_the_lease_expires() -> None:
    """Issue 9 item 9: a run waiting for a lease is visible: holder and expiry."""
    leased = row(1, StepState.LEASED, finished_at=None, worker_id="h:41822:9f3ac01b",
                 lease_expires_at=T0 + 30, recoveries=2)
    markup = h.steps_html([leased], now=T0 + 18)
    assert "leased by h:41822:9f3ac01b · expires in 12 s" in markup
    assert "1 <span" in markup and "+2 lost" in markup
    lapsed = h.steps_html([leased], now=T0 + 75)
    assert "expired 45 s ago" in lapsed
    assert "expired 1 m 05 s ago" in h.steps_html([leased], now=T0 + 95)
    assert "leased by" not in h.steps_html([row(2)], now=T0)
    assert "lost" not in h.steps_html([row(2)], now=T0)


def test_rows_are_capped_with_a_visible_n_more() -> None:
    rows = [row(i) for i in range(100)]
    markup = h.steps_html(rows, now=T0, limit=10)
    assert markup.count('data-agentq="step-row"') == 10
    assert 'data-agentq="more" data-hidden="90"' in markup
    assert "90 more steps" in markup
    assert "more" not in h.steps_html(rows[:3], now=T0, limit=10).split("</table>")[1]
    assert 'data-hidden="995"' in h.steps_html(rows[:5], now=T0, limit=5, total=1000)


def test_status_summary_counts_every_status_present() -> None:
    markup = h.steps_html([], now=T0, counts={"completed": 3, "failed": 1, "waiting": 0})
    assert "completed 3" in markup and "failed 1" in markup and "waiting 0" not in markup
    assert "no steps" in markup


@pytest.mark.parametrize(
    ("status", "label"), [("leased", "running"), ("waiting", "waiting"), ("failed", "failed")]
)
def test_badge_labels_and_colours(status: str, label: str) -> None:
    markup = h.badge(status)
    assert f'data-status="{status}"' in markup and f">{label}<" in markup
    assert h.COLORS[status][0] in markup and h.COLORS[status][1] in markup


def test_lanes_show_bars_with_fractions() -> None:
    markup = h.lanes_html([Lane("high", permits=4, running=2, capacity=10, queued=5,
                                completed=7, failed=1, cache_hits=3, joins=2)])
    assert 'data-priority="high" data-running="2" data-permits="4" data-queued="5"' in markup
    assert "width:50.0%" in markup  # 2 of 4 permits, and 5 of 10 slots
    assert "2/4 running" in markup and "5/10 queued" in markup
    assert "✔ 7" in markup and "✖ 1" in markup and "cached 3 · joined 2" in markup


def test_timeline_draws_retries_waits_and_outcomes() -> None:
    store = ReadStore()
    wf, s = "wf", (0, "fetch")
    store.event(EventKind.WORKFLOW_STARTED, wf, at=T0)
    store.event(EventKind.STEP_STARTED, wf, s, at=T0, attempt=1)
    store.event(EventKind.STEP_FAILED, wf, s, at=T0 + 1, attempt=1, reason="timeout")
    store.event(EventKind.RETRY_SCHEDULED, wf, s, at=T0 + 1, attempt=1)
    store.event(EventKind.STEP_STARTED, wf, s, at=T0 + 2, attempt=2)
    store.event(EventKind.STEP_WAITING, wf, s, at=T0 + 3, attempt=2, reason="ok?")
    store.event(EventKind.STEP_RESUMED, wf, s, at=T0 + 7, input={"approved": True})
    store.event(EventKind.STEP_STARTED, wf, s, at=T0 + 7, attempt=1)
    store.event(EventKind.STEP_COMPLETED, wf, s, at=T0 + 8, attempt=1)
    store.event(EventKind.STEP_STARTED, wf, (1, "send"), at=T0 + 8, attempt=1)
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(5), now=T0 + 10)
    spans = re.findall(r'data-kind="(\w+)" data-outcome="(\w+)"', markup)
    assert spans == [
        ("run", "timeout"), ("backoff", "backoff"), ("run", "waited"), ("wait", "resumed"),
        ("run", "completed"), ("run", "running"),
    ]
    assert "waited for input (resumed) — ok? · 4.00 s" in markup  # tooltip with duration
    assert "attempt 1: timeout — timeout · 1.00 s" in markup
    assert "so far" in markup  # the open span
    assert 'data-state="running"' in markup
    assert "left:0.00%" in markup  # axis starts at the workflow start
    assert "+10.00 s" in markup


def test_timeline_ends_a_wait_that_timed_out() -> None:
    store = ReadStore()
    wf, s = "wf", (0, "ask")
    store.event(EventKind.WORKFLOW_STARTED, wf, at=T0)
    store.event(EventKind.STEP_STARTED, wf, s, at=T0, attempt=1)
    store.event(EventKind.STEP_WAITING, wf, s, at=T0 + 1, attempt=1, reason="ok?")
    store.event(EventKind.WAIT_TIMED_OUT, wf, s, at=T0 + 61)
    store.event(EventKind.STEP_STARTED, wf, s, at=T0 + 61, attempt=1)
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(5), now=T0 + 62)
    spans = re.findall(r'data-kind="(\w+)" data-outcome="(\w+)"', markup)
    assert spans == [("run", "waited"), ("wait", "timeout"), ("run", "running")]
    assert "waited for input (timeout) — ok? · 1 m 00 s" in markup


def test_timeline_caps_workflows_and_spans() -> None:
    store = ReadStore()
    for i in range(20):
        store.event(EventKind.WORKFLOW_STARTED, f"wf-{i}")
    for attempt in range(1, 101):
        store.event(EventKind.STEP_STARTED, "wf-19", (0, "s"), attempt=attempt)
        store.event(EventKind.STEP_FAILED, "wf-19", (0, "s"), attempt=attempt, reason="error")
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(5), now=T0 + 1000, limit=5, total=len(tl), max_spans=10)
    assert markup.count('data-agentq="timeline-workflow"') == 5
    assert 'data-hidden="15"' in markup
    assert markup.count('data-agentq="span"') == 10 and "(+90 earlier)" in markup
    assert markup.index('data-workflow="wf-19"') < markup.index('data-workflow="wf-18"')


def test_timeline_batches_fold_like_one_batch() -> None:
    store = ReadStore()
    store.event(EventKind.WORKFLOW_STARTED, "w")
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1)
    store.event(EventKind.STEP_WAITING, "w", (0, "a"), attempt=1, reason="r")
    store.event(EventKind.WORKFLOW_CANCELLED, "w", reason="stop")
    whole, parts = Timeline(), Timeline()
    whole.apply(store.events)
    for r in store.events:
        parts.apply([r])
        parts.apply([r])  # re-reading is harmless
    assert h.timeline_html(whole.recent(3), now=T0 + 9) == h.timeline_html(
        parts.recent(3), now=T0 + 9
    )
    track = whole.get("w")
    assert track is not None and track.state == "cancelled"
    assert [s.outcome for s in track.steps[0].spans] == ["waited", "cancelled"]


def test_worker_lost_is_drawn_and_a_new_claim_starts_a_new_bar() -> None:
    store = ReadStore()
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1, worker_id="dead")
    store.event(EventKind.WORKER_RECOVERED, "w", (0, "a"), attempt=1)
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=2, worker_id="new")
    tl = Timeline()
    tl.apply(store.events)
    track = tl.get("w")
    assert track is not None
    assert [s.outcome for s in track.steps[0].spans] == ["lost", "running"]


def test_a_retried_workflow_runs_again_on_its_timeline() -> None:
    store = ReadStore()
    store.event(EventKind.WORKFLOW_STARTED, "w")
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1)
    store.event(EventKind.STEP_FAILED, "w", (0, "a"), attempt=1, reason="boom")
    store.event(EventKind.WORKFLOW_FAILED, "w", reason="boom")
    store.event(EventKind.WORKFLOW_RETRIED, "w", (0, "a"))
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1)
    tl = Timeline()
    tl.apply(store.events)
    track = tl.get("w")
    assert track is not None and (track.state, track.end) == ("running", None)
    assert [s.outcome for s in track.steps[0].spans] == ["failed", "running"]


def test_run_result_and_step_status_reprs() -> None:
    done = h.run_result_html(RunResult("w1", RunStatus.COMPLETED, outputs=(1, {"a": [1, 2]})))
    assert 'data-agentq="run-result" data-workflow="w1" data-status="completed"' in done
    assert "{&quot;a&quot;: [1, 2]}" in done
    waiting = h.run_result_html(RunResult("w1", RunStatus.WAITING, "send", "approve?"))
    assert "approve?" in waiting and "send" in waiting
    assert "leased" in h.step_status_html(StepStatus.Leased("w9", T0))
    assert "00:00:00 UTC" in h.step_status_html(StepStatus.Leased("w9", T0))
    assert "pending" in h.step_status_html(StepStatus.Pending())
    assert "42" in h.step_status_html(StepStatus.Completed(42))


def test_long_text_is_shortened_with_the_full_text_in_a_title() -> None:
    markup = h.steps_html([row(0, StepState.FAILED, reason="x" * 500)], now=T0)
    assert "x" * 79 + "…" in markup and f'title="{"x" * 500}"' in markup


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), (0, "0 s"), (0.0004, "<1 ms"), (0.25, "250 ms"), (1.234, "1.23 s"),
     (125, "2 m 05 s"), (7322, "2 h 02 m")],
)
def test_fmt_seconds(seconds: float | None, text: str) -> None:
    assert h.fmt_seconds(seconds) == text


def test_html_module_needs_no_ipywidgets() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ipywidgets'] = None\n"
        "import agentq.widgets.html, agentq.widgets\n"
        "from agentq.errors import MissingExtraError\n"
        "try:\n    agentq.widgets.LaneMonitor(object())\n"
        "except MissingExtraError as e:\n    assert 'agentq[notebook]' in str(e), e\n"
        "else:\n    raise SystemExit('no MissingExtraError')\n"
        "assert 'ipywidgets' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- durable calls: counts, totals, bars; keyed waits --------------------------------------

SCRIPT = "<script>alert(1)</script>"


def call_events(store: ReadStore, wf: str = "w", step: tuple[int, str] = (0, "agent")) -> None:
    """Attempt 1 starts three calls: one completes, one fails, one is left in doubt when the
    worker is declared lost; attempt 2 runs the failed and the doubtful one again."""
    K = EventKind
    store.event(K.WORKFLOW_STARTED, wf, at=T0)
    store.event(K.STEP_STARTED, wf, step, at=T0, attempt=1)
    for i, key in enumerate(("plan", "search", "pay")):
        label = {"kind": "model"} if key == "plan" else {"kind": "tool", "tool": key}
        store.event(K.CALL_STARTED, wf, step, at=T0 + i, attempt=1, key=key, label=label)
    store.event(K.CALL_COMPLETED, wf, step, at=T0 + 1, attempt=1, key="plan")
    store.event(K.CALL_FAILED, wf, step, at=T0 + 3, attempt=1, key="search", reason="down")
    store.event(K.WORKER_RECOVERED, wf, step, at=T0 + 5, attempt=1)


def test_call_tally_counts_calls_per_step_and_in_doubt() -> None:
    store = ReadStore()
    call_events(store)
    tally = CallTally()
    tally.apply(store.events)
    assert tally.steps[("w", 0)] == CallCounts(
        calls=3, runs=3, completed=1, failed=1, running=0, in_doubt=1, failed_runs=1
    )
    assert tally.totals == tally.steps[("w", 0)]
    K, step = EventKind, (0, "agent")
    store.event(K.STEP_STARTED, "w", step, at=T0 + 6, attempt=2)
    store.event(K.CALL_STARTED, "w", step, at=T0 + 6, attempt=2, key="search")
    store.event(K.CALL_STARTED, "w", step, at=T0 + 6, attempt=2, key="pay")
    tally.apply(store.events)
    assert tally.steps[("w", 0)] == CallCounts(3, 5, 1, 0, 2, 0, 1)  # both run again
    store.event(K.CALL_COMPLETED, "w", step, at=T0 + 7, attempt=2, key="search")
    store.event(K.CALL_COMPLETED, "w", step, at=T0 + 8, attempt=2, key="pay")
    store.event(K.STEP_COMPLETED, "w", step, at=T0 + 8, attempt=2)
    one_by_one = CallTally()
    for r in store.events:
        one_by_one.apply([r])
        one_by_one.apply([r])  # re-reading is harmless
    tally.apply(store.events)
    assert tally.steps == one_by_one.steps and tally.totals == one_by_one.totals
    assert tally.totals == CallCounts(3, 5, 3, 0, 0, 0, 1)


def test_a_cancelled_workflow_leaves_its_running_calls_in_doubt_until_their_outcome() -> None:
    store = ReadStore()
    K, step = EventKind, (0, "s")
    store.event(K.STEP_STARTED, "w", step, attempt=1)
    store.event(K.CALL_STARTED, "w", step, attempt=1, key="pay")
    store.event(K.WORKFLOW_CANCELLED, "w", reason="stop")
    tally, tl = CallTally(), Timeline()
    tally.apply(store.events)
    tl.apply(store.events)
    assert tally.totals.in_doubt == 1
    track = tl.get("w")
    assert track is not None and track.steps[0].calls[0].outcome == "in_doubt"
    store.event(K.CALL_COMPLETED, "w", step, attempt=1, key="pay")  # it ran on; recorded
    tally.apply(store.events)
    tl.apply(store.events)
    assert tally.totals.in_doubt == 0 and tally.totals.completed == 1
    assert track.steps[0].calls[0].outcome == "completed"


def test_call_counts_are_compact_and_name_only_what_is_there() -> None:
    assert h.call_counts_html(None) == "" and h.call_counts_html(CallCounts()) == ""
    markup = h.call_counts_html(CallCounts(3, 4, 1, 1, 0, 1, 1))
    text = re.sub(r"<[^>]+>", "", markup)
    assert text == "3 calls · 1 failed · 1 in doubt"
    assert 'data-calls="3" data-runs="4" data-failed="1" data-running="0" data-in-doubt="1"' \
        in markup
    assert h.COLORS["in_doubt"][0] in markup and h.COLORS["failed"][0] in markup
    one = re.sub(r"<[^>]+>", "", h.call_counts_html(CallCounts(1, 1, 0, 0, 1, 0, 0)))
    assert one == "1 call · 1 running"


def test_steps_html_has_a_calls_column_only_when_given_counts() -> None:
    rows = [row(1), row(2)]
    plain = h.steps_html(rows, now=T0)
    assert "<th" in plain and ">calls</th>" not in plain and "call-counts" not in plain
    counts = {("wf-1", 0): CallCounts(2, 2, 2, 0, 0, 0, 0)}
    markup = h.steps_html(rows, now=T0, calls=counts)
    assert ">calls</th>" in markup and markup.count('data-agentq="call-counts"') == 1
    first, second = markup.split('data-agentq="step-row"')[1:]
    assert "2 calls" in first and "call-counts" not in second
    assert 'colspan="8"' in h.steps_html([], now=T0, calls={})


def test_call_totals_show_runs_failures_doubt_and_answered_from_the_log() -> None:
    totals = CallCounts(calls=4, runs=6, completed=2, failed=1, running=0, in_doubt=1,
                        failed_runs=2)
    markup = h.call_totals_html(totals, 7)
    assert 'data-calls="4" data-runs="6" data-failed="2" data-in-doubt="1" data-answered="7"' \
        in markup
    text = re.sub(r"<[^>]+>", "", markup)
    assert text == ("durable calls: 6 runs · 2 failed · 1 in doubt · "
                    "7 calls and waits replayed from the log")
    assert "data-answered" not in h.call_totals_html(totals)


def test_timeline_draws_calls_as_bars_inside_their_step() -> None:
    store = ReadStore()
    call_events(store)
    store.event(EventKind.STEP_STARTED, "w", (0, "agent"), at=T0 + 6, attempt=2)
    store.event(EventKind.CALL_STARTED, "w", (0, "agent"), at=T0 + 6, attempt=2, key="pay",
                label={"kind": "tool", "tool": SCRIPT})
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(5), now=T0 + 10)
    calls = re.findall(r'data-agentq="call" data-key="([^"]+)" data-tool="([^"]+)" '
                       r'data-outcome="(\w+)"', markup)
    assert calls == [
        ("plan", "model", "completed"), ("search", "search", "failed"),
        ("pay", "pay", "in_doubt"), ("pay", "&lt;script&gt;alert(1)&lt;/script&gt;", "running"),
    ]
    assert "<script" not in markup
    # The doubtful run ends where its attempt ended (T0+5), the running one runs to now.
    assert "call pay (pay) · attempt 1: in doubt (started, no outcome recorded) · 3.00 s" \
        in markup
    assert "· 4.00 s so far" in markup
    assert 'data-agentq="timeline-step" data-workflow="w" data-step="agent"' in markup
    assert h.COLORS["in_doubt"][0] in markup and "call in doubt" in markup  # the legend


def test_timeline_caps_call_bars_per_step_with_n_more() -> None:
    store = ReadStore()
    store.event(EventKind.STEP_STARTED, "w", (0, "s"), attempt=1)
    for i in range(100):
        store.event(EventKind.CALL_STARTED, "w", (0, "s"), attempt=1, key=f"c{i}")
        store.event(EventKind.CALL_COMPLETED, "w", (0, "s"), attempt=1, key=f"c{i}")
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(1), now=T0 + 300, max_calls=10)
    assert markup.count('data-agentq="call"') == 10
    assert 'data-key="c99"' in markup and 'data-key="c89"' not in markup  # the latest
    assert 'data-agentq="more-calls" data-workflow="w" data-step="s" data-hidden="90"' in markup
    assert "90 more calls not drawn" in markup
    assert "more-calls" not in h.timeline_html(tl.recent(1), now=T0 + 300, max_calls=100)


def waiting_row(**kw: object) -> StepRow:
    base: dict[str, object] = {
        "reason": "book it?", "wait_key": "approve" + SCRIPT, "wait_deadline": T0 + 60,
        "wait_details": {"tool": SCRIPT, "args": {"to": EVIL, "body": "x" * 500}},
        "started_at": T0,
    }
    base.update(kw)
    return StepRow("trip", 0, "agent", StepState.WAITING, attempt=1, **base)  # type: ignore[arg-type]


def test_a_keyed_wait_shows_its_key_details_and_deadline_escaped_and_shortened() -> None:
    row_ = waiting_row()
    for markup in (h.steps_html([row_], now=T0 + 61), h.approval_html(row_), h.wait_html(row_)):
        assert "<script" not in markup and "<img" not in markup
        assert "approve&lt;script&gt;" in markup  # the key, escaped
        assert "tool <b>&lt;script&gt;alert(1)&lt;/script&gt;</b>" in markup
        assert "answer by 00:01:00 UTC" in markup
        shown = re.sub(r"<[^>]+>", "", markup)  # the text, without tooltips
        assert "…" in shown and "x" * 200 not in shown and "x" * 400 in markup  # shortened
        assert 'data-agentq="wait" data-key="approve&lt;script&gt;alert(1)&lt;/script&gt;" ' \
            f'data-deadline="{T0 + 60}"' in markup
    assert "(passed)" in h.steps_html([row_], now=T0 + 61)
    assert "(passed)" not in h.steps_html([row_], now=T0 + 1)
    assert 'data-key="approve&lt;script&gt;' in h.approval_html(row_).split(">")[0]
    bare = waiting_row(wait_key=None, wait_details=None, wait_deadline=None)
    assert h.wait_html(bare) == "" and 'data-agentq="wait"' not in h.steps_html([bare], now=T0)
    args_only = h.wait_html(waiting_row(wait_details={"args": {"q": 1}}, wait_deadline=None))
    assert "<code>{&quot;q&quot;: 1}</code>" in args_only and "answer by" not in args_only


# --- the timeline's axis, "now" line and zoom (issue 14) -------------------------------------


def _two_steps() -> Timeline:
    store = ReadStore()
    store.event(EventKind.WORKFLOW_STARTED, "w", at=T0)
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1, at=T0)
    store.event(EventKind.STEP_COMPLETED, "w", (0, "a"), attempt=1, at=T0 + 10)
    store.event(EventKind.STEP_STARTED, "w", (1, "b"), attempt=1, at=T0 + 50)
    tl = Timeline()
    tl.apply(store.events)
    return tl


def test_timeline_has_a_time_axis_with_round_ticks_and_a_now_line() -> None:
    markup = h.timeline_html(_two_steps().recent(1), now=T0 + 60)
    axis = re.search(r'data-agentq="axis" data-step="([0-9.]+)"', markup)
    assert axis is not None and axis.group(1) == "10"  # 60 s wide: a tick every 10 s
    ticks = re.findall(r'data-agentq="tick"[^>]*>([^<]+)<', markup)
    assert ticks == ["00:00:10", "00:00:20", "00:00:30", "00:00:40", "00:00:50"]
    assert markup.count('data-agentq="now"') == 2  # a red line in each step row
    assert 'data-agentq="now-label"' in markup


def test_axis_labels_near_either_end_stay_inside_the_axis() -> None:
    """A label at p% is shifted left by p% of its width: centred mid-axis, flush with the
    right end there (a tick at 96.6% centred on its mark ran past a 1000 px dashboard)."""
    store = ReadStore()
    store.event(EventKind.WORKFLOW_STARTED, "w", at=T0 + 0.5)
    store.event(EventKind.STEP_STARTED, "w", (0, "a"), attempt=1, at=T0 + 0.5)
    store.event(EventKind.STEP_COMPLETED, "w", (0, "a"), attempt=1, at=T0 + 59.5)
    tl = Timeline()
    tl.apply(store.events)
    markup = h.timeline_html(tl.recent(1), now=T0 + 59.9)
    shifts = re.findall(
        r'data-agentq="(?:tick|now-label)" style="position:absolute;left:([0-9.]+)%;top:[^;]+;'
        r"transform:translateX\((-?[0-9.]+)%\)",
        markup,
    )
    assert len(shifts) >= 3
    for left, shift in shifts:
        assert float(shift) == -float(left)  # the label's right end never passes 100%
    assert max(float(left) for left, _ in shifts) > 95


def test_timeline_zoom_clips_bars_to_the_window() -> None:
    tl = _two_steps()
    whole = h.timeline_html(tl.recent(1), now=T0 + 60)
    assert whole.count('data-agentq="span"') == 2
    early = h.timeline_html(tl.recent(1), now=T0 + 60, zoom=(0.0, 0.5))  # T0 .. T0+30
    assert early.count('data-agentq="span"') == 1  # step b starts at +50: out of view
    assert 'data-agentq="now"' not in early and "zoomed: 0-50% of 1 m 00 s" in early
    late = h.timeline_html(tl.recent(1), now=T0 + 60, zoom=(0.75, 1.0))  # T0+45 .. T0+60
    span = re.search(r'data-kind="run" data-outcome="running"[^>]*left:([0-9.]+)%;width:'
                     r"([0-9.]+)%", late)
    assert span is not None and (span.group(1), span.group(2)) == ("33.33", "66.67")
    with pytest.raises(ValueError, match="zoom"):
        h.timeline_html(tl.recent(1), now=T0 + 60, zoom=(0.5, 0.5))
