"""The built-in media types are listed once (``conclave.platform.media_types``); every other place
that names them is derived from that list or checked against it here."""

from __future__ import annotations

import re
from pathlib import Path

from conclave.edge.agents.registry import AGENTS
from conclave.edge.sniff import SNIFFERS
from conclave.platform.media_types import BUILT_IN_MEDIA_TYPES, GiB, MiB

DOCS = Path(__file__).parents[2] / "docs"
BUILT_IN = [media.name for media in BUILT_IN_MEDIA_TYPES]


def test_every_built_in_type_has_a_sniffer_and_an_agent_and_nothing_else_does():
    assert list(SNIFFERS) == BUILT_IN
    assert list(AGENTS) == BUILT_IN


def test_the_edge_docs_list_exactly_the_built_in_types():
    text = (DOCS / "edge.md").read_text(encoding="utf-8")
    [route] = re.findall(r"upload; `type` ∈ `([a-z ]+)`", text)
    assert route.split() == BUILT_IN
    formats = text.split("## Formats and extracted facts", 1)[1].split("\n\n")
    [table] = [block for block in formats if block.startswith("| type |")]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert sorted(rows) == sorted(BUILT_IN)


def test_the_edge_docs_give_the_default_upload_limits():
    text = (DOCS / "edge.md").read_text(encoding="utf-8")
    [row] = [line for line in text.splitlines() if line.startswith("| `EDGE_MAX_UPLOAD_BYTES` |")]
    documented = re.findall(r"([a-z]+) (\d+) (MiB|GiB)", row.split("|")[2])
    unit = {"MiB": MiB, "GiB": GiB}
    limits = [(name, int(size) * unit[suffix]) for name, size, suffix in documented]
    assert limits == [(media.name, media.max_upload_bytes) for media in BUILT_IN_MEDIA_TYPES]


def test_the_client_docs_list_exactly_the_built_in_types():
    text = (DOCS / "edge-client.md").read_text(encoding="utf-8")
    [listed] = re.findall(r"`source_type` is one of `([a-z ]+)`", text)
    assert listed.split() == BUILT_IN


def test_no_doc_counts_the_types_in_words():
    for path in [DOCS.parent / "README.md", *DOCS.glob("*.md")]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\b(?:six|seven|eight|nine) media types\b", text), path
        assert "lists the seven" not in text, path
