"""Marker labels stay readable: operator commands close together at the chart's zoom fold into one label with a
count (every reason in its hover, a click zooms in on them), and no two labels overprint at any zoom; a paused run
shows no speed; on a phone the mode bar does not sit over a chart's legend."""

import pytest

from .conftest import apply, demo_messages

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
CLOSE = [20, 21, 22, 23, 24]
# (the light first-paint drawing has no Plotly layout yet: no labels until Plotly has drawn the chart)
LABELS = f"""() => ((document.getElementById('{LOSS}').layout || {{}}).annotations || [])
  .filter((a) => a.overlayId && /intervention-/.test(String(a.overlayId)))
  .map((a) => ({{text: a.text, hover: a.hovertext || '', id: String(a.overlayId)}}))"""
# Every marker label drawn on the loss chart, as boxes on the screen.
BOXES = f"""() => [...document.querySelectorAll('#{LOSS} .mark-label')].map((e) => e.getBoundingClientRect())
  .filter((r) => r.width > 0).map((r) => ({{x: r.x, y: r.y, w: r.width, h: r.height}}))"""
BOX = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
  const r = e.getBoundingClientRect(); return r.width ? {x: r.x, y: r.y, w: r.width, h: r.height} : null; }"""


def overlap(a, b) -> bool:
    return a["x"] < b["x"] + b["w"] - 0.5 and b["x"] < a["x"] + a["w"] - 0.5 and \
        a["y"] < b["y"] + b["h"] - 0.5 and b["y"] < a["y"] + a["h"] - 0.5


def overprinting(boxes):
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if overlap(a, b)]


@pytest.fixture
def commands(live_env):
    from webapp.control.models import OperatorCommand

    apply("marks", demo_messages("marks"))
    for i, step in enumerate(CLOSE + [55]):
        OperatorCommand.objects.create(id=f"m{i}", run_id="marks", name="set-lr-multiplier", args={"value": 0.5},
                                       reason=f"reason number {i}: the norm keeps climbing", status="applied",
                                       step=step, detail=f"lr multiplier 0.5 at step {step}")


def test_close_command_labels_fold_into_one_with_every_reason_on_hover(commands, web, new_page):
    page = new_page(viewport={"width": 1440, "height": 900})
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{web.url}/runs/marks/?from=0&to=40")  # 40 steps: the five are a few pixels apart
    page.wait_for_function(f"() => ({LABELS})().length > 0", timeout=30_000)
    labels = page.evaluate(LABELS)
    folded = [a for a in labels if a["id"].startswith("group:")]
    assert len(folded) >= 1 and all("+" in a["text"] for a in folded)
    hover = " ".join(a["hover"] for a in folded) + " ".join(a["hover"] for a in labels)
    for i in range(len(CLOSE)):
        assert f"reason number {i}: the norm keeps climbing" in hover, i
    assert not overprinting(page.evaluate(BOXES)), "no two marker labels overprint"

    # the full reasons on hover, as a viewer sees them
    page.hover(f"#{LOSS} .mark-label:has-text('+')")
    page.wait_for_selector(f"#{LOSS} .chart-hover:not([hidden])", timeout=10_000)
    shown = page.text_content(f"#{LOSS} .chart-hover")
    assert "reason number 0" in shown and "reason number 1" in shown

    # a click on the folded label zooms in on its markers, which part where there is room
    close_labels = f"({LABELS})().filter((a) => /intervention-m[0-4]/.test(a.id)).length"
    before = page.evaluate(f"() => {close_labels}")
    page.click(f"#{LOSS} .mark-label:has-text('+') >> nth=0")
    page.wait_for_function(f"() => {close_labels} > {before}", timeout=30_000)
    frm, to = (int(page.input_value(f"#range-{k}")) for k in ("from", "to"))
    assert frm <= CLOSE[0] and to >= CLOSE[-1] and to - frm < 40, (frm, to)
    assert not overprinting(page.evaluate(BOXES))

    # zoomed out to the whole run, still nothing overprints; the far command keeps its own label
    page.click("#range-reset")
    page.wait_for_function(f"() => ({LABELS})().some((a) => a.text.includes('reason number 5'))", timeout=30_000)
    assert not overprinting(page.evaluate(BOXES))
    assert errors == []


def test_a_paused_run_shows_no_speed(live_env, web, new_page):
    from webapp.runs.models import Run

    hb = {"tokens": 500, "token_budget": 1000, "eta_s": 125.0, "steps_per_s": 2.0, "step": 10}
    Run.objects.create(id="resting", name="resting", state="paused", phase="paused", health="alive", last_step=10,
                       heartbeat=hb)
    page = new_page(viewport={"width": 1440, "height": 900})
    page.goto(web.url + "/runs/resting/")
    page.wait_for_function("() => document.getElementById('stat-tokens').textContent.includes('of')", timeout=20_000)
    assert page.inner_text("#stat-rate") == "paused"
    assert page.inner_text("#stat-eta") == "–"


def test_on_a_phone_the_mode_bar_does_not_cover_the_legend(live_env, web, new_page):
    apply("phone", demo_messages("phone"))
    page = new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{web.url}/runs/phone/")
    page.wait_for_function(f"() => {{ const d = document.getElementById('{LOSS}'); return d && d.data && "
                           "d.data.filter((t) => t.showlegend).length === 3; }", timeout=30_000)
    page.locator(f"#{LOSS}").scroll_into_view_if_needed()
    page.hover(f"#{LOSS} .u-over")  # the mode bar shows while the chart is hovered (tapped, on a phone)
    page.wait_for_function(f"() => ({BOX})('#{LOSS} .modebar')", timeout=10_000)
    bar, legend = page.evaluate(BOX, f"#{LOSS} .modebar"), page.evaluate(BOX, f"#{LOSS} .legend")
    assert legend and not overlap(bar, legend), (bar, legend)


NOTES = f"""() => ((document.getElementById('{LOSS}').layout || {{}}).annotations || [])
  .filter((a) => a.overlayId).map((a) => ({{id: String(a.overlayId), text: a.text, hover: a.hovertext || ''}}))"""


def test_notes_anomalies_and_commands_never_overprint_and_an_abandoned_branch_is_not_drawn(live_env, web, new_page):
    """Issue 43: community notes' labels were drawn each on its own and overprinted each other and the others'
    labels; notes and commands of a branch a restart abandoned (steps 36-39, trained again) were drawn at the new
    timeline's steps."""
    import datetime as dt

    from django.contrib.auth import get_user_model

    from webapp.annotations.models import Annotation
    from webapp.anomalies.models import Anomaly
    from webapp.control.models import OperatorCommand
    from webapp.runs.models import Run

    apply("marks", demo_messages("marks"))
    run = Run.objects.get(pk="marks")
    user = get_user_model().objects.create_user("noter", "n@example.org", "x" * 12)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)  # demo_messages' start; its restart is at t0 + 101 s
    for i, step in enumerate((20, 21, 22, 23)):
        Annotation.objects.create(run=run, author=user, title=f"note {i} about this bump", body="b",
                                  body_html="<p>b</p>", step_start=step, step_end=step,
                                  created_at=t0 + dt.timedelta(seconds=60))
    Anomaly.objects.create(run=run, key="loss_spike train/loss 21", kind="loss_spike", metric="train/loss",
                           start_step=21, peak_step=21, end_step=21, detected_step=21, severity="warning",
                           score=3.0, explanation="loss 3x its level")
    OperatorCommand.objects.create(id="m0", run_id="marks", name="set-lr-multiplier", args={"value": 0.5},
                                   reason="near the notes", status="applied", step=22, detail="lr 0.5")
    # the abandoned branch: a note and a command at step 38 from before the restart; a note after it
    old = Annotation.objects.create(run=run, author=user, title="abandoned note", body="b", body_html="<p>b</p>",
                                    step_start=38, step_end=38, created_at=t0 + dt.timedelta(seconds=60))
    OperatorCommand.objects.create(id="m1", run_id="marks", name="set-lr-multiplier", args={"value": 0.5},
                                   reason="undone by the restart", status="applied", step=38, detail="lr 0.5",
                                   undone_by="restart", undone_detail="the restart went back to step 35")
    new = Annotation.objects.create(run=run, author=user, title="new timeline note", body="b", body_html="<p>b</p>",
                                    step_start=38, step_end=38, created_at=t0 + dt.timedelta(seconds=200))

    page = new_page(viewport={"width": 1000, "height": 900})
    page.goto(f"{web.url}/runs/marks/?from=0&to=59")
    page.wait_for_function(f"() => ({NOTES})().some((a) => (a.text + a.hover).includes('new timeline note'))",
                           timeout=30_000)
    page.wait_for_function(f"() => ({NOTES})().some((a) => (a.text + a.hover).includes('near the notes'))",
                           timeout=30_000)
    assert not overprinting(page.evaluate(BOXES)), "no two marker labels overprint"
    drawn = page.evaluate(NOTES)
    ids = " ".join(a["id"] for a in drawn)
    text = " ".join(a["text"] + " " + a["hover"] for a in drawn)
    assert f"annotation-{old.id}" not in ids and "abandoned note" not in text
    assert f"annotation-{new.id}" in ids  # the note made on the new timeline is drawn
    assert "intervention-m1" not in ids and "undone by the restart" not in text
    for i in range(4):  # folded, every note still named in a hover
        assert f"note {i} about this bump" in text, i


# Each visible marker label's WCAG contrast against the background it is drawn on (the first opaque one up its tree).
CONTRASTS = f"""() => {{
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = (c) => {{ const [r, g, b] = rgb(c).slice(0, 3).map((v) => v / 255)
    .map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; }};
  const back = (e) => {{ for (; e; e = e.parentElement) {{ const c = getComputedStyle(e).backgroundColor, a = rgb(c);
    if (a.length === 3 || (a.length === 4 && a[3] === 1)) return c; }} return 'rgb(255, 255, 255)'; }};
  return [...document.querySelectorAll('#{LOSS} .mark-label')].filter((e) => e.getBoundingClientRect().width > 0)
    .map((e) => {{ const f = lum(getComputedStyle(e).color), b = lum(back(e));
                   return {{text: e.textContent, ratio: (Math.max(f, b) + 0.05) / (Math.min(f, b) + 0.05)}}; }});
}}"""


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_marker_labels_read_at_wcag_aa_contrast_in_either_theme(commands, web, new_page, scheme):
    """Operator-command labels were dark purple (#4a148c) on the dark chart card: 1.4:1."""
    from webapp.anomalies.models import Anomaly

    for severity, step in (("warning", 40), ("critical", 45)):
        Anomaly.objects.create(run_id="marks", key=f"loss_spike train/loss {step}", kind="loss_spike",
                               metric="train/loss", start_step=step, peak_step=step, end_step=step,
                               detected_step=step, severity=severity, score=3.0, explanation="loss 3x its level")
    page = new_page(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
    page.goto(f"{web.url}/runs/marks/?from=0&to=59")
    assert page.evaluate("() => document.documentElement.dataset.theme") == scheme
    page.wait_for_function(f"() => ({CONTRASTS})().some((l) => l.text.includes('reason number 5'))",
                           timeout=30_000)
    page.wait_for_function(f"() => ({CONTRASTS})().some((l) => l.text.includes('⚠'))", timeout=30_000)
    labels = page.evaluate(CONTRASTS)
    low = [lab for lab in labels if lab["ratio"] < 4.5]
    assert labels and not low, low
