"""picpac.tools.explore.pages: every template renders from its values alone, every value is escaped (meta,
class names, errors, the database's name), and a value a template needs but was not given is an error,
never an empty cell."""
from __future__ import annotations

import html as html_module
import json
import re
from urllib.parse import parse_qs, urlencode

import jinja2
import pytest

from picpac.tools.explore.pages import ENV, render

MARKUP = "<script>alert('x')</script> & \"q\""
ESCAPED = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;q&#34;"


def record_values(**changes) -> dict:
    r = {"label": "2", "name": MARKUP, "group": None, "offset": 64, "size": 120, "checksum": "0000beef",
         "fields": [{"name": "image", "bytes": 100, "kind": "JPEG 4x3"}], "meta": MARKUP, "annotation": MARKUP}
    return dict(i=3, n=10, r={**r, **changes}, db_name="db.picpac")


def grid_values(**changes) -> dict:
    values = dict(q={"label": "", "split": "", "fold": "", "seed": "", "meta": MARKUP}, per=2, ids=[4, 7],
                  labels=["1", "nan"], total=9, start=2, next=4, prev=0, link=lambda position: f"start={position}",
                  max_scan=20000, db_name="db.picpac", classes=[{"label": "0", "name": MARKUP, "count": 5},
                                                                {"label": "1", "name": "", "count": 4}],
                  folds=3, split=3, filtered=lambda **changes: urlencode(changes))
    return {**values, **changes}


def test_every_page_is_a_template_of_the_base():
    assert sorted(ENV.loader.mapping) == ["augment", "base", "failed", "grid", "not_found", "overview", "record"]
    html = render("not_found", db_name="db.picpac")
    assert html.startswith("<!doctype html>") and "<title>Not found - picpac explore</title>" in html
    assert '<span class="muted">db.picpac</span>' in html and 'id="error"' not in html


def test_record_page_escapes_every_value():
    html = render("record", **record_values())
    assert "<script>" not in html and html.count(ESCAPED) == 3  # the class name, the meta, the annotation
    assert f'<td id="label">2 ({ESCAPED})</td>' in html
    assert "<tr><td>image</td><td>100</td><td>JPEG 4x3</td></tr>" in html
    assert 'id="prev" href="/record/2"' in html and 'id="next" href="/record/4"' in html


def test_record_page_links_only_to_records_that_exist():
    first = render("record", **{**record_values(), "i": 0, "n": 1})
    assert 'id="prev"' not in first and 'id="next"' not in first
    assert '<td id="label">2</td>' in render("record", **record_values(name=None))
    assert 'id="annotation"' not in render("record", **record_values(annotation=None))


def test_the_error_line_is_escaped_text():
    html = render("not_found", db_name=MARKUP, error=MARKUP)
    assert f'<div class="error" id="error">{ESCAPED}</div>' in html
    assert f'<span class="muted">{ESCAPED}</span>' in html and "<script>" not in html


def test_grid_cells_and_links():
    html = render("grid", **grid_values())
    assert re.findall(r'data-id="(\d+)"', html) == ["4", "7"]
    assert re.findall(r"<br>label ([^<]*)</div>", html) == ["1", "nan"]
    assert 'id="prev" href="/grid?start=0"' in html and 'id="next" href="/grid?start=4"' in html
    assert "9 records selected; showing 2-4" in html and ESCAPED in html and "<script>" not in html
    assert re.findall(r'<a href="/grid\?([^"]*)"[^>]*>([^<]*)</a>', html) == [
        ("label=", "all"), ("label=0", f"0 {ESCAPED}"), ("label=1", "1"), ("split=&amp;fold=", "all"),
        ("split=3&amp;fold=0", "0 of 3"), ("split=3&amp;fold=1", "1 of 3"), ("split=3&amp;fold=2", "2 of 3")]
    assert 'class="on">all</a>' in html  # no label filter: "all" is on


def test_the_grid_shows_its_filters_link_as_on():
    html = render("grid", **grid_values(q={"label": "1", "split": "3", "fold": "2", "seed": "", "meta": ""}))
    assert re.findall(r'<a href="[^"]*" class="on">([^<]*)</a>', html) == ["1", "2 of 3"]


def test_grid_of_a_meta_filter_says_how_far_it_reads():
    html = render("grid", **grid_values(total=None, prev=None, next=None))
    assert "2 matching records from position 2 (the meta filter reads at most 20000 records a page)" in html
    assert 'id="prev"' not in html and 'id="next"' not in html


def augment_values(**changes) -> dict:
    from picpac.tools.explore.controls import CONTROLS, control_values, fold_links

    values = dict(text=MARKUP, samples=[{"k": 0, "label": "1", "shapes": ""}, {"k": 1, "label": "2", "shapes": MARKUP}],
                  digest="0123456789abcdef0123", db_name="db", controls=CONTROLS,
                  values=control_values("pert_angle: 20\ntask: detect\npert_hflip: true"), folds=fold_links(""),
                  draw=False, json=json.dumps)
    return {**values, **changes}


def test_augment_page_shows_the_samples_of_a_run():
    html = render("augment", **augment_values())
    assert re.findall(r'<img src="(/augment/[0-9a-f]{20}/\d\.png)"', html) == ["/augment/0123456789abcdef0123/0.png",
                                                                            "/augment/0123456789abcdef0123/1.png"]
    assert re.findall(r'<a href="(/augment/[0-9a-f]{20}/\d\.png)" class="exact">', html) == [
        "/augment/0123456789abcdef0123/0.png", "/augment/0123456789abcdef0123/1.png"]
    assert f'rows="12">{ESCAPED}</textarea>' in html and f'<span class="shapes">{ESCAPED}</span>' in html
    assert "<script>" not in html and html.count("<script") == 1  # the one script, the app's own file
    assert '<script src="/static/explore.js"></script>' in html
    html = render("augment", **augment_values(draw=True))
    assert re.findall(r'<img src="(/augment/[0-9a-f]{20}/\d-drawn\.png)"', html) == [
        "/augment/0123456789abcdef0123/0-drawn.png", "/augment/0123456789abcdef0123/1-drawn.png"]
    assert 'id="draw" checked>' in html


def test_augment_page_controls_show_the_configs_values():
    html = render("augment", **augment_values())
    assert re.search(r'<input type="range" data-key="pert_angle" id="c-pert_angle" min="0" max="180"\s+step="1" '
                     r'value="20.0"><output id="v-pert_angle">20.0</output>', html)
    assert '<input type="checkbox" data-key="pert_hflip" id="c-pert_hflip" checked>' in html
    assert '<input type="checkbox" data-key="pert_vflip" id="c-pert_vflip">' in html
    assert '<option value="detect" selected>detect</option>' in html and '<option value="">(default)</option>' in html
    assert '<button type="submit" name="reroll" value="1" id="reroll">' in html
    links = re.findall(r'<a href="/augment\?([^"]*)"\s+data-set="([^"]*)"[^>]*>([^<]*)</a>', html)
    assert [text for _, _, text in links] == ["all records"] + [f"fold {f} of 5" for f in range(5)]
    query, edit, _ = links[2]
    assert html_module.unescape(edit) == '{"split": 5, "split_fold": 1, "split_negate": true}'
    assert parse_qs(html_module.unescape(query)) == {"config": [MARKUP], "set": [html_module.unescape(edit)],
                                                     "draw": ["0"]}


def overview_values() -> dict:
    d = {"records": 5, "data_bytes": 500, "fields": ["image", MARKUP], "classes": [MARKUP], "classes_of": "labels",
         "source": MARKUP, "groups": {"records": 0, "distinct": 0}, "sizes": {"unreadable": 1}, "scanned": 3,
         "labels": {"integral": True}, "shapes": None,
         "probe": {"sampled": 3, "unknown": 1, "width": None, "height": None, "aspect": None}}
    return dict(d=d, labels=[{"label": 0, "name": MARKUP, "count": 5, "percent": 100}], shapes=[], folds=[3, 2],
                split=2, seed=7, db_name="db")


def test_overview_page():
    html = render("overview", **overview_values())
    assert '<td id="records">5</td>' in html and '<td id="damaged">1</td>' in html
    assert '<td id="scanned">3 (a sample)</td>' in html
    assert "no annotation shapes in the sample" in html and "1 without a readable size" in html
    assert 'href="/grid?split=2&amp;fold=1&amp;seed=7">fold 1</a>' in html
    assert "<script>" not in html and html.count(ESCAPED) == 3  # a field name, the source, a class name


@pytest.mark.parametrize("name, values", [
    ("record", {k: v for k, v in record_values().items() if k != "n"}),
    ("grid", {k: v for k, v in grid_values().items() if k != "labels"}),
    ("augment", {k: v for k, v in augment_values().items() if k != "values"}),
    ("overview", {k: v for k, v in overview_values().items() if k != "folds"}),
    ("not_found", {}),
])
def test_a_missing_value_is_an_error_not_an_empty_cell(name, values):
    with pytest.raises(jinja2.UndefinedError):
        render(name, **values)
