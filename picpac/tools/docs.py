"""`picpac docs [TOPIC]`: the documentation pages, shipped inside the package.

A wheel carries ``docs/*.md`` as ``picpac/_docs/*.md`` (setup.py copies them at build time); a source
checkout or an editable install reads them from the ``docs`` folder beside the package. Help texts and
error messages point to a page as ``picpac docs TOPIC`` (:func:`docs_hint`), which every installed user
can run, never to a path in the source tree.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import MissingPathError

PACKAGED = Path(__file__).resolve().parents[1] / "_docs"
"""Where a wheel keeps the pages."""
SOURCE_TREE = Path(__file__).resolve().parents[2] / "docs"
"""Where a checkout (and an editable install) keeps them."""


def docs_hint(topic: str) -> str:
    """How a message points to the page ``topic``: ``see `picpac docs import```."""
    return f"see `picpac docs {topic}`"


def docs_folder() -> Path | None:
    """The folder holding the pages, or None when neither copy exists."""
    for folder in (PACKAGED, SOURCE_TREE):
        if folder.is_dir() and any(folder.glob("*.md")):
            return folder
    return None


def topics() -> dict[str, str]:
    """``{topic: title}`` for every page, sorted by topic; the title is the page's first heading."""
    folder = docs_folder()
    found = {}
    for page in sorted(folder.glob("*.md")) if folder is not None else ():
        title = next((line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
                      if line.startswith("#")), "")
        found[page.stem] = title
    return found


def page(topic: str) -> str:
    """The markdown text of ``topic`` (a page name such as ``import``, with or without ``.md``)."""
    name = os.path.basename(topic.strip())
    name = name[:-3] if name.endswith(".md") else name
    known = topics()
    if not known:
        raise MissingPathError("the documentation pages are not installed with this copy of picpac")
    if name not in known:
        raise MissingPathError(f"no documentation topic {topic!r}; the topics are {', '.join(known)} "
                               "(`picpac docs` lists them)")
    return (docs_folder() / f"{name}.md").read_text(encoding="utf-8")


def overview() -> str:
    """What `picpac docs` prints without a topic: every topic with its title."""
    known = topics()
    if not known:
        return "the documentation pages are not installed with this copy of picpac"
    width = max(map(len, known))
    lines = ["picpac docs TOPIC prints a page; the topics:"]
    lines += [f"  {name:<{width}}  {title}" for name, title in known.items()]
    return "\n".join(lines)
