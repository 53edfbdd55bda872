"""What the dashboard does before its first paint, and what it leaves for later (issue 46: first paint <= 200 ms).

ICU: the page's first Intl formatter or collator sets up ICU's data, ~10-40 ms of a fresh page's one core; no chart
needs one to draw (static/js/lazyintl.js: uPlot made two as it loaded; picker.js sorts without a collator).
Frames: the charts in view draw in the dashboard's first frame, not in the next one after the IntersectionObserver's
first answer (dashboard.js, Obs.seenNow); those off screen still wait to be scrolled into view."""

import pytest

from observatory import contract

from .conftest import seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Every Intl formatter or collator made, and every locale-aware method called (each makes one inside V8), with when;
# and the page time of each of the dashboard's redraw frames (its requestAnimationFrame callback).
SPY = """(() => {
  window.__icu = []; window.__redraws = [];
  const log = (what) => window.__icu.push([what, performance.now()]);
  for (const name of ['NumberFormat', 'DateTimeFormat', 'Collator', 'PluralRules', 'RelativeTimeFormat']) {
    const Real = Intl[name];
    Intl[name] = new Proxy(Real, {construct: (t, a, nt) => { log(name); return Reflect.construct(t, a, nt); },
                                  apply: (t, self, a) => { log(name); return Reflect.apply(t, self, a); }});
  }
  for (const [proto, name] of [[String.prototype, 'localeCompare'], [Number.prototype, 'toLocaleString'],
                               [Date.prototype, 'toLocaleString'], [Date.prototype, 'toLocaleDateString'],
                               [Date.prototype, 'toLocaleTimeString'], [Array.prototype, 'toLocaleString']]) {
    const real = proto[name];
    proto[name] = function (...a) { log(name); return real.apply(this, a); };
  }
  const raf = window.requestAnimationFrame;
  window.requestAnimationFrame = function (cb) {
    const mine = String(cb).includes('redrawQueued = false');  // (dashboard.js scheduleRedraw's frame)
    return raf.call(window, mine ? (t) => { window.__redraws.push(performance.now()); cb(t); } : cb);
  };
})();"""
FIRST_PAINT = "() => performance.getEntriesByName('obs-first-paint').length > 0"
SEEN = """() => { const fp = performance.getEntriesByName('obs-first-paint')[0].startTime;
  return {icu: window.__icu.filter(([, t]) => t <= fp).map(([what]) => what),
          frames: window.__redraws.filter((t) => t <= fp).length,
          drawn: [...document.querySelectorAll('figure.chart')].filter((f) => f.querySelector('.uplot canvas'))
            .map((f) => f.dataset.metric)}; }"""
STEPS = 5_000


@pytest.fixture
def run(live_env):
    from webapp.runs.models import Run

    run = Run.objects.create(id="early", name="first paint's work", state="training", last_step=STEPS - 1)
    for k, name in enumerate((contract.M_LOSS, contract.M_LR, contract.M_GRAD_NORM, contract.M_TOKENS_PER_S)):
        seed_series(run, name, ((s, (k + 1) * (1.0 + 1.0 / (1 + s))) for s in range(STEPS)))
    return run


def test_no_icu_formatter_before_the_first_paint(run, web, new_page):
    page = new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script(SPY)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{web.url}/runs/early/?x=step")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    seen = page.evaluate(SEEN)
    assert seen["icu"] == [], "no Intl formatter or collator made before the first paint"
    assert contract.M_LOSS in seen["drawn"]
    # the real constructors are back for every later caller (lazyintl.js stood in for one call each)
    assert page.evaluate("() => new Intl.NumberFormat('en-US').format(12345.5)") == "12,345.5"
    assert page.evaluate("() => typeof new Intl.DateTimeFormat().formatToParts") == "function"
    # and uPlot's number format still formats, once asked
    assert page.evaluate("() => uPlot.fmtNum(1234.5)") == "1,234.5"
    assert errors == []


def test_the_charts_in_view_draw_in_the_first_frame_and_the_others_when_scrolled_to(run, web, new_page):
    page = new_page(viewport={"width": 1280, "height": 450})
    page.add_init_script(SPY)
    page.goto(f"{web.url}/runs/early/")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    seen = page.evaluate(SEEN)
    assert seen["frames"] == 1, "the first paint in the dashboard's first frame"
    charts = page.evaluate("() => [...document.querySelectorAll('figure.chart')].map((f) => f.dataset.metric)")
    assert seen["drawn"] and len(seen["drawn"]) < len(charts), (seen, charts)  # some off screen, not drawn yet
    last = page.locator("figure.chart").last
    last.scroll_into_view_if_needed()
    page.wait_for_function("(m) => !!document.querySelector(`figure.chart[data-metric='${m}'] .uplot canvas`)",
                           arg=charts[-1], timeout=30_000)


def test_the_modules_read_the_api_after_the_first_paint(run, web, new_page):
    """The feature modules' API reads (anomalies, commands, the forecast) wait for the charts' first paint, and the
    URL comes to name the whole view then (dashboard.js afterPaint): neither is work the first frame needs."""
    page = new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{web.url}/runs/early/")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    # (a resource's entry is made once its answer is in: wait for both reads)
    page.wait_for_function("() => ['/anomalies/', '/interventions/'].every((p) => performance.getEntriesByType("
                           "'resource').some((r) => r.name.includes(p))) && location.search.includes('chart=')",
                           timeout=30_000)
    reads = page.evaluate("""() => { const fp = performance.getEntriesByName('obs-first-paint')[0].startTime;
      return performance.getEntriesByType('resource').filter((r) => new URL(r.name).pathname.startsWith('/api/'))
        .map((r) => [new URL(r.name).pathname, r.startTime >= fp]); }""")
    assert {path for path, _ in reads} >= {"/api/runs/early/anomalies/", "/api/runs/early/interventions/"}, reads
    assert all(after for _, after in reads), reads


def test_the_page_data_is_parsed_once_before_the_first_paint(run, web, new_page):
    """The page data (~200 KB with a long run's first windows) is parsed by dashboard.js alone; the live socket takes
    its push tier's settings from that parse (live.js read them with a second JSON.parse of the whole page data)."""
    page = new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script("""(() => { window.__parsed = []; const real = JSON.parse;
      JSON.parse = function (text, ...rest) { window.__parsed.push([String(text).length, performance.now()]);
                                              return real.call(this, text, ...rest); }; })();""")
    page.goto(f"{web.url}/runs/early/")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    parses = page.evaluate("""() => { const fp = performance.getEntriesByName('obs-first-paint')[0].startTime;
      const n = document.getElementById('page-data').textContent.length;
      return window.__parsed.filter(([len, t]) => len === n && t <= fp).length; }""")
    assert parses == 1


def test_the_first_frame_the_page_paints_has_its_charts(run, web, new_page):
    """No frame of the page without its charts: the dashboard's scripts block rendering until they have run
    (templates/runs/dashboard.html, blocking="render"), so the browser's first paint is the frame that draws the
    charts in view, and the page is styled and laid out once for it (a frame of the static page before them was
    a whole style, layout and paint more before the first paint)."""
    page = new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{web.url}/runs/early/")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    page.wait_for_function("() => performance.getEntriesByName('first-paint').length > 0", timeout=30_000)
    fp, painted = page.evaluate("""() => [performance.getEntriesByName('obs-first-paint')[0].startTime,
                                         performance.getEntriesByName('first-paint')[0].startTime]""")
    assert painted >= fp, f"the browser painted at {painted:.1f} ms, before the charts' frame at {fp:.1f} ms"


def test_the_charts_download_links_are_pointed_after_the_first_paint(run, web, new_page):
    """The download menus' links (downloads.js) are closed menus' links at first: the charts' first frame leaves them
    and the dashboard points them once it has painted (afterPaint); a later redraw keeps them following the view."""
    page = new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script("""(() => { const mark = performance.mark.bind(performance);
      performance.mark = (name, ...rest) => {
        if (name === 'obs-first-paint') window.__linksAtPaint = [...document.querySelectorAll(
          'figure.chart details.download a[data-fmt]')].filter((a) => a.hasAttribute('href')).length;
        return mark(name, ...rest); }; })();""")
    page.goto(f"{web.url}/runs/early/")
    page.wait_for_function(FIRST_PAINT, timeout=30_000)
    assert page.evaluate("() => window.__linksAtPaint") == 0
    loss = f"figure.chart[data-metric='{contract.M_LOSS}'] details.download a[data-fmt=csv]"
    page.wait_for_function(f"() => !!document.querySelector(\"{loss}\").getAttribute('href')", timeout=30_000)
    assert f"series={contract.M_LOSS.replace('/', '%2F')}" in page.get_attribute(loss, "href")
    page.evaluate("() => Obs.zoomTo(100, 200)")
    page.wait_for_function(f"() => document.querySelector(\"{loss}\").getAttribute('href').includes('start=100')",
                           timeout=30_000)
