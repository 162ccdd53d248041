"""paged_lab.viz.tables: every table a notebook shows, in the learner's language."""

import pytest

from paged_lab.viz import i18n, tables


def test_table_shows_rows_as_a_table():
    t = tables.table([{"block size": 1, "empty slots (%)": 0.0}, {"block size": 16, "empty slots (%)": 1.9}])
    assert t.header == ["block size", "empty slots (%)"] and t.rows == [[1, 0.0], [16, 1.9]]
    assert "<th>block size</th>" in t._repr_html_() and "<td>16</td><td>1.9</td>" in t._repr_html_()
    assert str(t).splitlines()[2] == "| 1 | 0.0 |"
    by_label = tables.table({"static": {"steps": 8}, "continuous": {"steps": 6}}, index="mode")
    assert by_label.header == ["mode", "steps"] and by_label.rows[1] == ["continuous", 6]
    with pytest.raises(ValueError, match="index"):
        tables.table({"static": {"steps": 8}})
    with pytest.raises(ValueError, match="other columns"):
        tables.table([{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match="at least one row"):
        tables.table([])


def test_a_table_shows_its_words_in_chinese_and_its_data_as_is():
    rows = {"recompute": {"tokens prefilled": 1234, "steps lost": 3},
            "swap": {"tokens prefilled": 900, "steps lost": 3}}
    t = tables.table(rows, index="preemption")
    plain = tables.table([{"sample": 0, "text": "recompute"}])  # data cells (generated text) stay as they are
    i18n.use("zh-TW")
    try:
        html = t._repr_html_()
        shown = plain._repr_html_()
    finally:
        i18n.use("en")
    assert "<th>prefill 的 token 數</th>" in html and "<td>重新計算</td>" in html and "<td>1,234</td>" in html
    assert "<td>recompute</td>" in shown
    assert t.rows[0] == ["recompute", 1234, 3]  # the object itself stays English, for the notebooks' asserts
