"""How the console shows a JSON document (arguments, results, records): indented when small,
compact and cut when large.

A plain function, so not in ``test_pages.py``, whose tests run on its shared stack's event loop.
"""

from __future__ import annotations

from conclave.console.web import pretty_json


def test_a_large_document_is_shown_compact_and_cut() -> None:
    small = pretty_json({"a": [1, 2]})
    assert small == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    big = pretty_json({"rows": ["x" * 100] * 5000})
    assert big.startswith('{"rows": ["xxx') and "\n" in big  # compact, then the note
    assert big.endswith("more characters)") and len(big) < 200_100
