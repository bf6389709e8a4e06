"""The explorer's pages: Jinja2 templates held here (no template files to install), autoescaped, so every
value shown (meta, annotations, class names, error messages) is text, never markup."""
from __future__ import annotations

import jinja2

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}{% endblock %} - picpac explore</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
nav{background:#263238;padding:8px 16px}nav a{color:#eceff1;margin-right:16px;text-decoration:none;font-weight:600}
main{padding:12px 16px}table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
.bar{background:#4f83cc;height:10px;display:inline-block}.error{background:#ffebee;color:#b71c1c;padding:8px;white-space:pre-wrap}
.grid{display:flex;flex-wrap:wrap;gap:8px}.cell{width:170px;text-align:center;font-size:12px}
.cell img{max-width:160px;max-height:160px;display:block;margin:0 auto;background:#ddd}
pre{background:#eee;padding:8px;overflow:auto;max-height:400px}textarea{width:100%;font-family:monospace}
form.filters input{width:90px}.muted{color:#777}.links a{margin-right:4px}.links a.on{font-weight:700;color:#000}
.controls{display:flex;flex-wrap:wrap;gap:6px 16px;margin-bottom:8px}.control{display:inline-flex;gap:4px;align-items:center}
.control output{min-width:2.5em}.shapes{color:#555}#samples .cell{width:auto;max-width:330px}
#samples .cell img{max-width:320px;max-height:320px}
</style></head>
<body><nav><a href="/" id="nav-overview">Overview</a><a href="/grid" id="nav-grid">Records</a>
<a href="/augment" id="nav-augment">Augmentation</a><span class="muted">{{ db_name }}</span></nav>
<main>{% if error %}<div class="error" id="error">{{ error }}</div>{% endif %}{% block main %}{% endblock %}</main>
</body></html>"""

_OVERVIEW = """{% extends "base" %}{% block title %}Overview{% endblock %}{% block main %}
<h1>Overview</h1>
<table id="summary">
<tr><th>records</th><td id="records">{{ d.records }}</td></tr>
<tr><th>record data</th><td>{{ d.data_bytes }} bytes</td></tr>
<tr><th>fields</th><td>{{ d.fields|join(", ") }}</td></tr>
<tr><th>classes</th><td>{{ d.classes|length }}{% if d.classes_of != "labels" %} (of {{ d.classes_of }}){% endif %}</td></tr>
<tr><th>source</th><td>{{ d.source }}</td></tr>
<tr><th>groups</th><td>{{ d.groups.records }} records in {{ d.groups.distinct }} groups</td></tr>
<tr><th>damaged records</th><td id="damaged">{{ d.sizes.unreadable }}</td></tr>
<tr><th>records scanned</th><td id="scanned">{{ d.scanned }}{% if d.scanned < d.records %} (a sample){% endif %}</td></tr>
</table>
<h2>Labels</h2>
{% if d.labels.integral %}<table id="labels">{% for c in labels %}
<tr><td><a href="/grid?label={{ c.label }}">{{ c.label }}</a></td><td>{{ c.name or "" }}</td>
<td class="count">{{ c.count }}</td><td><span class="bar" style="width:{{ c.percent * 3 }}px"></span></td></tr>{% endfor %}
</table>{% else %}<p>continuous: min {{ d.labels.min }}, max {{ d.labels.max }}, mean {{ d.labels.mean }}{% if d.labels.non_finite %};
{{ d.labels.non_finite }} labels are NaN or infinite{% endif %}</p>{% endif %}
<h2>Shape classes</h2>
{% if d.shapes %}<p>{{ d.shapes.shapes }} shapes in {{ d.shapes.with_shapes }} of {{ d.shapes.records }} annotated records</p>
<table id="shapes">{% for c in shapes %}<tr><td>{{ c.label }}</td><td>{{ c.name or "" }}</td><td class="count">{{ c.count }}</td>
<td><span class="bar" style="width:{{ c.percent * 3 }}px"></span></td></tr>{% endfor %}</table>
{% else %}<p class="muted" id="shapes-none">no annotation shapes{% if d.scanned < d.records %} in the sample{% endif %}</p>{% endif %}
<h2>Image sizes</h2>
<p>from the image headers of {{ d.probe.sampled }} records{% if d.probe.unknown %}; {{ d.probe.unknown }} without a readable size{% endif %}</p>
{% for name in ["width", "height", "aspect"] %}{% set h = d.probe[name] %}{% if h %}
<h3>{{ name }}{% if name == "aspect" %} ratio (width / height){% endif %}: min {{ h.min }}, median {{ h.median }}, max {{ h.max }}</h3>
<table id="hist-{{ name }}">{% for r in h.rows %}<tr><td>{{ r.low }} - {{ r.high }}</td><td class="count">{{ r.count }}</td>
<td><span class="bar" style="width:{{ r.percent * 3 }}px"></span></td></tr>{% endfor %}</table>{% endif %}{% endfor %}
<h2>Folds</h2>
<form method="get" action="/"><label>split K <input name="split" value="{{ split }}" size="4"></label>
<label>seed <input name="seed" value="{{ seed }}" size="8"></label> <button>show</button></form>
<table id="folds">{% for c in folds %}<tr><td><a href="/grid?split={{ split }}&amp;fold={{ loop.index0 }}&amp;seed={{ seed }}">fold {{ loop.index0 }}</a></td>
<td class="count">{{ c }}</td></tr>{% endfor %}</table>
{% endblock %}"""

_GRID = """{% extends "base" %}{% block title %}Records{% endblock %}{% block main %}
<h1>Records</h1>
<form class="filters" method="get" action="/grid">
<label>label <input name="label" value="{{ q.label }}"></label>
<label>split K <input name="split" value="{{ q.split }}"></label>
<label>fold <input name="fold" value="{{ q.fold }}"></label>
<label>seed <input name="seed" value="{{ q.seed }}"></label>
<label>meta key=value <input name="meta" value="{{ q.meta }}" style="width:160px"></label>
<label>per page <input name="per" value="{{ per }}"></label> <button id="apply">filter</button></form>
{% if classes %}<p class="links" id="class-links">class: <a href="/grid?{{ filtered(label="") }}"{% if not q.label %} class="on"{% endif %}>all</a>
{% for c in classes %}<a href="/grid?{{ filtered(label=c.label) }}"{% if q.label == c.label %} class="on"{% endif %}>{{ c.label }}
{%- if c.name %} {{ c.name }}{% endif %}</a> ({{ c.count }}) {% endfor %}</p>{% endif %}
<p class="links" id="fold-links">fold: <a href="/grid?{{ filtered(split="", fold="") }}"{% if not q.split %} class="on"{% endif %}>all</a>
{% for f in range(folds) %}<a href="/grid?{{ filtered(split=split|string, fold=f|string) }}"
{%- if q.split == split|string and q.fold == f|string %} class="on"{% endif %}>{{ f }} of {{ split }}</a> {% endfor %}</p>
<p id="summary">{% if total is not none %}{{ total }} records selected; showing {{ start }}-{{ start + ids|length }}
{% else %}{{ ids|length }} matching records from position {{ start }} (the meta filter reads at most {{ max_scan }} records a page){% endif %}</p>
<div class="grid" id="grid">{% for i in ids %}<div class="cell" data-id="{{ i }}"><a href="/record/{{ i }}" class="rec">
<img src="/thumb/{{ i }}.jpg" alt="record {{ i }}" loading="lazy"></a>record {{ i }}<br>label {{ labels[loop.index0] }}</div>{% endfor %}</div>
<p>{% if prev is not none %}<a id="prev" href="/grid?{{ link(prev) }}">previous</a>{% endif %}
{% if next is not none %}<a id="next" href="/grid?{{ link(next) }}">next</a>{% endif %}</p>
{% endblock %}"""

_RECORD = """{% extends "base" %}{% block title %}Record {{ i }}{% endblock %}{% block main %}
<h1>Record {{ i }}</h1>
<p>{% if i > 0 %}<a id="prev" href="/record/{{ i - 1 }}">previous</a>{% endif %}
{% if i + 1 < n %}<a id="next" href="/record/{{ i + 1 }}">next</a>{% endif %}
<a id="augment" href="/augment">augment</a></p>
<table id="record">
<tr><th>label</th><td id="label">{{ r.label }}{% if r.name %} ({{ r.name }}){% endif %}</td></tr>
<tr><th>group</th><td>{{ r.group }}</td></tr><tr><th>offset</th><td>{{ r.offset }}</td></tr>
<tr><th>bytes</th><td>{{ r.size }}</td></tr><tr><th>checksum</th><td id="checksum">{{ r.checksum }}</td></tr></table>
{% if r.fields %}<h2>Fields</h2><table id="fields"><tr><th>field</th><th>bytes</th><th>type</th></tr>
{% for f in r.fields %}<tr><td>{{ f.name }}</td><td>{{ f.bytes }}</td><td>{{ f.kind }}</td></tr>{% endfor %}</table>{% endif %}
<h2>Image</h2><img id="image" src="/image/{{ i }}.png" alt="record {{ i }} with its annotation" style="max-width:100%">
<h2>Meta</h2><pre id="meta">{{ r.meta }}</pre>
{% if r.annotation is not none %}<h2>Annotation</h2><pre id="annotation">{{ r.annotation }}</pre>{% endif %}
{% endblock %}"""

_AUGMENT = """{% extends "base" %}{% block title %}Augmentation{% endblock %}{% block main %}
<h1>Augmentation</h1>
<p>A stream config (YAML or JSON): augmentation, size and split keys; ImageStream runs it on this database
and shows its first batch (uint8 RGB). The same config and seed give the same pixels in training. The controls
edit the config's own lines and run it at once; each picture links to the stream's exact pixels.</p>
<form method="get" action="/augment" id="augment-form">
<div class="controls" id="controls">{% for c in controls %}<label class="control">{{ c.key }}
{% if c.kind == "range" %}<input type="range" data-key="{{ c.key }}" id="c-{{ c.key }}" min="{{ c.low }}" max="{{ c.high }}"
step="{{ c.step }}" value="{{ values[c.key] }}"><output id="v-{{ c.key }}">{{ values[c.key] }}</output>
{% elif c.kind == "toggle" %}<input type="checkbox" data-key="{{ c.key }}" id="c-{{ c.key }}"{% if values[c.key] %} checked{% endif %}>
{% elif c.kind == "choice" %}<select data-key="{{ c.key }}" id="c-{{ c.key }}">{% for v in c.choices %}<option value="{{ v }}"
{%- if v == values[c.key] %} selected{% endif %}>{{ v or "(default)" }}</option>{% endfor %}</select>
{% else %}<input type="number" data-key="{{ c.key }}" id="c-{{ c.key }}" min="{{ c.low }}" max="{{ c.high }}" value="{{ values[c.key] }}">
{% endif %}</label>{% endfor %}
<button type="submit" name="reroll" value="1" id="reroll">re-roll the seed</button>
<label class="control"><input type="checkbox" name="draw" value="1" id="draw"{% if draw %} checked{% endif %}> draw annotations</label></div>
<p class="links" id="folds">{% for f in folds %}<a href="/augment?{{ {"config": text, "set": json(f.edit), "draw": "1" if draw else "0"}|urlencode }}"
data-set="{{ json(f.edit) }}"{% if f.on %} class="on"{% endif %}>{{ f.text }}</a> {% endfor %}</p>
<textarea name="config" id="config" rows="12">{{ text }}</textarea>
<button id="run">run</button> <span id="status" class="muted"></span></form>
<div class="grid" id="samples" data-digest="{{ digest }}">{% for s in samples %}<div class="cell">
<a href="/augment/{{ digest }}/{{ s.k }}.png" class="exact"><img src="/augment/{{ digest }}/{{ s.k }}{% if draw %}-drawn{% endif %}.png"
alt="sample {{ s.k }}" data-k="{{ s.k }}"></a>sample {{ s.k }}<br>label {{ s.label }}{% if s.shapes %}<br>
<span class="shapes">{{ s.shapes }}</span>{% endif %}</div>{% endfor %}</div>
<script src="/static/explore.js"></script>
{% endblock %}"""

_NOT_FOUND = """{% extends "base" %}{% block title %}Not found{% endblock %}{% block main %}<h1>Not found</h1>
{% endblock %}"""

_FAILED = """{% extends "base" %}{% block title %}Failed{% endblock %}{% block main %}<h1>The page failed</h1>
{% endblock %}"""

ENV = jinja2.Environment(loader=jinja2.DictLoader({
    "base": _BASE, "overview": _OVERVIEW, "grid": _GRID, "record": _RECORD, "augment": _AUGMENT,
    "not_found": _NOT_FOUND, "failed": _FAILED}), autoescape=True, undefined=jinja2.StrictUndefined)


def render(name: str, **values) -> str:
    values.setdefault("error", None)
    return ENV.get_template(name).render(**values)
