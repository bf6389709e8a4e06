"""picpac.tools.docs: where the pages are found (the wheel's copy first, then the checkout's), their topics and
titles, a page by its topic, the overview, and the errors when a topic or every page is missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from picpac.errors import MissingPathError
from picpac.tools import docs

DOCS = Path(__file__).resolve().parents[2] / "docs"


def titles(folder: Path) -> dict[str, str]:
    """Each page's first line that starts with '#', without the marks: written out here for the check."""
    found = {}
    for path in sorted(folder.glob("*.md")):
        heading = next(line for line in path.read_text().splitlines() if line.startswith("#"))
        found[path.stem] = heading.lstrip("# ").strip()
    return found


@pytest.fixture
def pages(tmp_path, monkeypatch):
    """Pages of our own as the checkout's; no wheel copy."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "zeta.md").write_text("Some text first\n# Zeta: the last\n\n## a section\n")
    (folder / "alpha.md").write_text("#   Alpha   \nbody\n")
    (folder / "plain.md").write_text("no heading at all\n")
    (folder / "notes.txt").write_text("# not a page\n")
    monkeypatch.setattr(docs, "PACKAGED", tmp_path / "missing")
    monkeypatch.setattr(docs, "SOURCE_TREE", folder)
    return folder


def test_docs_hint_names_the_command():
    assert docs.docs_hint("import") == "see `picpac docs import`"


def test_a_checkout_reads_its_docs_folder():
    assert not docs.PACKAGED.exists()
    assert docs.docs_folder() == docs.SOURCE_TREE == DOCS


def test_topics_are_every_page_with_its_first_heading_sorted():
    found = docs.topics()
    assert found == titles(DOCS) and list(found) == sorted(found)
    assert found["import"] == "Importing images" and found["cli"] == "Command line"


def test_page_by_topic_with_or_without_md_and_never_outside_the_folder():
    text = (DOCS / "import.md").read_text(encoding="utf-8")
    assert docs.page("import") == docs.page("import.md") == docs.page("  import \n") == text
    assert docs.page("../../etc/import.md") == text  # only the name counts


def test_an_unknown_topic_names_it_and_every_topic(pages):
    with pytest.raises(MissingPathError) as caught:
        docs.page("passwd")
    assert str(caught.value) == ("no documentation topic 'passwd'; the topics are alpha, plain, zeta "
                                 "(`picpac docs` lists them)")
    assert isinstance(caught.value, FileNotFoundError)


def test_titles_from_the_first_heading_anywhere_or_empty(pages):
    assert docs.topics() == {"alpha": "Alpha", "plain": "", "zeta": "Zeta: the last"}


def test_overview_lines_up_the_titles(pages):
    assert docs.overview() == ("picpac docs TOPIC prints a page; the topics:\n"
                               "  alpha  Alpha\n"
                               "  plain  \n"
                               "  zeta   Zeta: the last")


def wheel_copy(tmp_path, monkeypatch, name: str, text: str) -> Path:
    """A wheel's _docs folder holding one file, as the package's."""
    wheel = tmp_path / "_docs"
    wheel.mkdir()
    (wheel / name).write_text(text)
    monkeypatch.setattr(docs, "PACKAGED", wheel)
    return wheel


def test_the_wheels_copy_comes_first(pages, tmp_path, monkeypatch):
    wheel = wheel_copy(tmp_path, monkeypatch, "alpha.md", "# Alpha, as shipped\n")
    assert docs.docs_folder() == wheel
    assert docs.topics() == {"alpha": "Alpha, as shipped"} and docs.page("alpha") == "# Alpha, as shipped\n"


def test_a_folder_without_pages_does_not_count(pages, tmp_path, monkeypatch):
    wheel_copy(tmp_path, monkeypatch, "README.txt", "# no pages here")
    assert docs.docs_folder() == pages


def test_without_pages_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(docs, "PACKAGED", tmp_path / "a")
    monkeypatch.setattr(docs, "SOURCE_TREE", tmp_path / "b")
    assert docs.docs_folder() is None and docs.topics() == {}
    assert docs.overview() == "the documentation pages are not installed with this copy of picpac"
    with pytest.raises(MissingPathError, match="^the documentation pages are not installed with this copy of picpac$"):
        docs.page("import")


def test_no_table_of_the_pages_is_cut_in_two():
    """A table row after a blank line starts a new table, which Markdown renders only with a header and its |---|
    line: a row there is a table cut in two (docs/stream.md once lost 30 keys after `point_radius` so)."""
    cut = []
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text().splitlines()
        fenced = False
        for i, line in enumerate(lines):
            fenced ^= line.startswith("```")
            if not fenced and line.startswith("|") and i > 0 and not lines[i - 1].strip():
                header = i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: ")
                if not header:
                    cut.append(f"{path.name}:{i + 1}")
    assert cut == []
