"""The dashboard's scripts in one file (webapp/runs/bundle.py): the parts in the page's order, the apps' scripts
last (dashboard.js, a file of its own, runs after them), each part as its own file reads; a part that throws fails
alone, as its own <script> did; the file is written again whenever it differs from its parts."""

import pytest
from django.test import override_settings

from webapp.runs import bundle, extensions

from ..servers import ROOT


def test_the_parts_are_the_chart_scripts_then_the_dashboards_with_the_apps_scripts_last():
    names = bundle.parts()
    assert names[:3] == ["js/lazyintl.js", "vendor/uPlot.iife.min.js", "js/series.js"]  # (lazyintl: uPlot's Intl)
    assert "js/dashboard.js" not in names
    apps = extensions.dashboard()["scripts"]
    assert apps and names[-len(apps):] == apps
    assert not set(extensions.dashboard()["lazy"]) & set(names) and "js/moe.js" not in names  # after first paint
    assert len(names) == len(set(names))
    text = bundle.text()
    assert text.startswith('//# allFunctionsCalledOnLoad\n"use strict";\n')  # V8's compile hint, then strict mode
    for name in names:
        source = (ROOT / "static" / name).read_text()
        assert bundle.minified(name, source) in text
        assert name.endswith(".min.js") or len(bundle.minified(name, source)) < 0.9 * len(source)


def test_a_minified_part_keeps_its_code_and_loses_its_comments():
    source = "// why\nconst a = 1; /* note */\nconst re = /\\/\\//g, s = `${a} // not a comment`;\n"
    out = bundle.minified("js/x.js", source)
    assert "why" not in out and "note" not in out and "`${a} // not a comment`" in out and "/\\/\\//g" in out


def test_the_file_is_written_again_when_it_differs_from_its_parts(tmp_path):
    with override_settings(DATA_DIR=tmp_path):
        path = bundle.build()
        assert path.read_text() == bundle.text()
        path.write_text("stale")
        assert bundle.BundleFinder().find(bundle.NAME) == str(path) and path.read_text() == bundle.text()
        assert bundle.BundleFinder().find("js/other.js") is None
        assert [name for name, _ in bundle.BundleFinder().list([])] == [bundle.NAME]


@pytest.mark.browser
def test_a_part_that_throws_fails_alone_and_its_error_is_uncaught(new_page):
    page = new_page()
    page.set_content("<!doctype html><title>bundle</title>")
    page.evaluate("() => { window.errs = []; addEventListener('error', (e) => window.errs.push(e.message)); }")
    page.add_script_tag(content='"use strict";\n' + bundle.wrap("a.js", "window.a = 1; null.x;")
                        + bundle.wrap("b.js", "window.b = 2; // a last line that is a comment"))
    page.wait_for_function("() => window.errs.length > 0")
    assert page.evaluate("() => [window.a, window.b, window.errs.length]") == [1, 2, 1]
    assert "null" in page.evaluate("() => window.errs[0]")


def test_two_checkouts_on_one_data_folder_write_their_bundles_apart(tmp_path):
    """A bench serving the landed tree beside this one from one data folder: each server rewrote the other's bundle
    (its parts differ), and a page could read one tree's file under the other's length: it never went live."""
    with override_settings(DATA_DIR=tmp_path, BASE_DIR=tmp_path / "a"):
        a = bundle.out_dir()
    with override_settings(DATA_DIR=tmp_path, BASE_DIR=tmp_path / "b"):
        b = bundle.out_dir()
    assert a != b and a.parent == b.parent == tmp_path / "built-static"
