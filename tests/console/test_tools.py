"""The Tools page and the playground over HTTP: the catalogue's schemas as tables, the form a
schema gives, what a run shows and stores, and the values refused before any call is made.

``form_shapes`` (``playground_tools.py``) is a plug-in tool with every shape the form handles;
it answers the arguments it received, so a test sees exactly what the form sent.
"""

from __future__ import annotations

import gc
import re
from collections.abc import AsyncIterator
from html import unescape
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.conftest import Backend
from tests.console.conftest import TOKENS, Stack, auth, open_stack
from tests.console.playground_tools import HOSTILE
from tests.console.test_pages import session_csrf, signed_in

PLUGIN = "tests.console.playground_tools"
AUDIT_LINK = re.compile(r'<a href="/calls/([^"]+)" data-audit-link>')


# The tests read the catalogue and run tools as alice, each comparing her audit trail before and
# after itself: one gateway and console serve them all, on the module's event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools_stack(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The gateway (with the ``form_shapes`` plug-in) and the console, shared by the module."""
    data_dir = tmp_path_factory.mktemp("tools-stack")
    async with open_stack(
        shared_embedded, data_dir, services=("gateway",), tool_modules=(PLUGIN,)
    ) as running:
        yield running


class _Controls(HTMLParser):
    """The form controls of a page, by the property name their label shows."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, Any]] = {}
        self.labels: dict[str, str] = {}
        self._label_for: str | None = None
        self._label_text = ""
        self._in_code = False
        self._select: dict[str, Any] | None = None
        self._option: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag in ("input", "select", "textarea") and "id" in found:
            control = {"tag": tag, **found, "options": []}
            self.by_id[found["id"]] = control
            if tag == "select":
                self._select = control
        elif tag == "option" and self._select is not None:
            self._option = []
        elif tag == "label":
            self._label_for, self._label_text = found.get("for"), ""
        elif tag == "code" and self._label_for is not None:
            self._in_code = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "option" and self._select is not None and self._option is not None:
            self._select["options"].append("".join(self._option))
            self._option = None
        elif tag == "select":
            self._select = None
        elif tag == "code":
            self._in_code = False
        elif tag == "label" and self._label_for is not None:
            self.labels[self._label_text] = self._label_for
            self._label_for = None

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option.append(data)
        if self._in_code and self._label_for is not None:
            self._label_text += data

    def of(self, key: str) -> dict[str, Any]:
        return self.by_id[self.labels[key]]


def controls(html: str) -> _Controls:
    """The form controls of ``html``."""
    parser = _Controls()
    parser.feed(html)
    return parser


async def audit_rows(stack: Stack, user: str = "alice") -> list[str]:
    """The ids of ``user``'s calls, as the gateway's audit trail lists them."""
    async with httpx.AsyncClient(base_url=stack.urls["gateway"]) as client:
        answer = await client.get("/calls", params={"limit": 100}, headers=auth(user))
    assert answer.status_code == 200, answer.text
    return [call["conclave_id"] for call in answer.json()["calls"]]


async def stored_call(stack: Stack, conclave_id: str, user: str = "alice") -> Any:
    """A call's audit row, from the gateway."""
    async with httpx.AsyncClient(base_url=stack.urls["gateway"]) as client:
        answer = await client.get(f"/calls/{conclave_id}", headers=auth(user))
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_the_catalogue_shows_each_schema_readably_and_as_text(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/tools")
        assert page.status_code == 200
        assert '<a href="/tools" aria-current="page">Tools</a>' in page.text
        for name in ("evaluate_expression", "echo", "json_query", "form_shapes"):
            assert f'data-tool="{name}"' in page.text
            assert f'<a href="/tools/{name}">' in page.text
        shapes = page.text.split('data-tool="form_shapes"')[1].split("</article>")[0]
        # Required, type, enum, default and bounds of each property; nested ones under their
        # parent's name.
        assert re.search(r"<code>label</code></th>\s*<td>string</td>\s*<td>required</td>", shapes)
        assert "<code>&#34;red&#34;</code>, <code>&#34;green&#34;</code>" in shapes
        assert "≥ 1; ≤ 10" in shapes and "&gt; 0; ≤ 1; multiple of 0.25" in shapes
        assert "<td><code>3</code></td>" in shapes
        assert re.search(r"<small>size\.</small><code>width</code></th>\s*<td>integer</td>"
                         r"\s*<td>required</td>", shapes)  # fmt: skip
        assert "<code>tags[]</code>" in shapes and "items ≤ 5" in shapes
        # The schema's text is shown, never run: no markup of the plug-in's reaches the page.
        assert HOSTILE not in page.text and "<img src=x" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shapes


async def test_the_form_follows_the_schema(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/tools/form_shapes")
        assert page.status_code == 200
        form = controls(page.text)
        label = form.of("label")
        assert (label["tag"], label["type"], label["maxlength"]) == ("input", "text", "40")
        assert label["aria-required"] == "true"
        colour = form.of("colour")
        assert colour["tag"] == "select"
        assert colour["options"] == ['(default: "green")', "red", "green", HOSTILE]
        count = form.of("count")
        bounds = (count["type"], count["min"], count["max"], count["step"])
        assert bounds == ("number", "1", "10", "1")
        assert "aria-required" not in count and count["placeholder"] == "3"
        ratio = form.of("ratio")
        # An exclusive minimum of a number cannot be an HTML bound: the gateway checks it.
        assert (ratio["type"], ratio["max"], ratio["step"]) == ("number", "1", "0.25")
        assert "min" not in ratio
        assert form.of("flag")["type"] == "checkbox"
        assert form.of("level")["options"] == ["(not set)", "1", "2", "3"]
        assert re.search(r"<legend><code>size</code> <small>object, required</small>", page.text)
        width = form.of("width")
        assert (width["type"], width["min"], width["aria-required"]) == ("number", "0", "true")
        assert form.of("unit")["options"] == ["(not set)", "px", "em"]
        assert form.of("tags")["tag"] == "textarea"
        assert form.of(HOSTILE)["type"] == "text"  # its name shown as text, the field usable
        assert HOSTILE not in page.text
        assert form.by_id["raw-args"]["tag"] == "textarea"  # the whole object as JSON

        # A schema with more fields than a form shows: the raw JSON editor only, open.
        wide = await alice.get("/tools/wide")
        assert 'class="playground"' not in wide.text and 'name="arg-1"' not in wide.text
        assert '<details class="raw" open>' in wide.text

        missing = await alice.get("/tools/no_such_tool")
        assert missing.status_code == 404 and "UNKNOWN_TOOL" in missing.text


async def test_a_run_shows_the_outcome_and_links_its_audit_row(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/tools/form_shapes")
        form = controls(page.text)
        name = {key: form.of(key)["name"] for key in form.labels}
        sent = {
            "csrf_token": session_csrf(page.text),
            "mode": "form",
            name["label"]: "hello <b>",
            name["colour"]: "2",  # the third option: the markup-like string
            name["count"]: "7",
            name["ratio"]: "0.5",
            name["big"]: str(2**63 - 1),
            name["flag"]: "true",
            name["level"]: "1",
            name["width"]: "1e3",
            name["unit"]: "",
            name["tags"]: '["a", "b"]',
        }
        ran = await alice.post("/tools/form_shapes", data=sent)
        assert ran.status_code == 200, ran.text
        assert '<span class="badge succeeded">succeeded</span>' in ran.text
        assert '<span class="badge blessed">blessed</span>' in ran.text
        link = AUDIT_LINK.search(ran.text)
        assert link is not None
        expected = {
            "label": "hello <b>",
            "colour": HOSTILE,
            "count": 7,
            "ratio": 0.5,
            "big": 2**63 - 1,
            "flag": True,
            "level": 2,
            "size": {"width": 1000},  # the empty optional "unit" is left out
            "tags": ["a", "b"],
        }
        stored = await stored_call(tools_stack, link.group(1))
        assert stored["args"] == expected and stored["result"] == {"received": expected}
        assert stored["user_id"] == "alice"
        assert "&#34;big&#34;: 9223372036854775807" in ran.text  # the result, shown
        # The form keeps what was typed, for the next run.
        assert controls(ran.text).of("label")["value"] == "hello <b>"
        audit = await alice.get(f"/calls/{link.group(1)}")
        assert audit.status_code == 200 and "form_shapes" in audit.text

        page = await alice.get("/tools/evaluate_expression")
        expression = controls(page.text).of("expression")["name"]
        sent = {"csrf_token": session_csrf(page.text), expression: "2**64"}
        ran = await alice.post("/tools/evaluate_expression", data=sent)
        assert ran.status_code == 200
        assert '<span class="badge purified">purified</span>' in ran.text
        assert "integer of 20 digits exceeds 64 bits: returned as text" in ran.text  # a warning
        assert "&#34;18446744073709551616&#34;" in ran.text


async def test_values_the_form_cannot_read_are_refused_before_any_call(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        before = await audit_rows(tools_stack)
        page = await alice.get("/tools/form_shapes")
        csrf = session_csrf(page.text)
        form = controls(page.text)
        name = {key: form.of(key)["name"] for key in form.labels if key}
        base = {name["label"]: "x", name["width"]: "1"}
        refusals = [
            ("ratio", "NaN", "no NaN or Infinity"),
            ("ratio", "Infinity", "no NaN or Infinity"),
            ("ratio", "1e400", "too large to be a finite double"),
            ("big", str(2**64), "outside the 64-bit integer range"),
            ("big", "1e400", "outside the 64-bit integer range"),
            ("big", "1e999999999", "outside the 64-bit integer range"),
            ("count", "1.5", "Write a whole number."),
            ("maybe", "1.5", "Write a whole number."),  # an integer or null
            ("count", "0x10", "Write a number"),
            ("colour", "9", "Choose one of the listed values."),
            ("tags", '["a",', "Not JSON"),
            ("tags", "[NaN]", "NaN is not JSON"),
            ("tags", "[1e400]", "Numbers must be finite"),
            ("tags", f"[{2**64}]", "Integers must fit in 64 bits (at 0)."),
            ("tags", '["\\ud800"]', "lone surrogate"),
            ("tags", '{"a": "\\u0000"}', "NUL character (at a)."),
            ("tags", "[" * 100_000, "nested too deeply"),
        ]
        for key, value, message in refusals:
            answer = await alice.post(
                "/tools/form_shapes",
                data={"csrf_token": csrf, "mode": "form", **base, name[key]: value},
            )
            assert answer.status_code == 422, (key, value)
            assert "nothing was sent to the gateway" in answer.text
            shown = re.search(rf'id="f-{name[key]}-problem">([^<]*)<', answer.text)
            assert shown is not None and message in unescape(shown.group(1)), (key, value)
            assert 'aria-invalid="true"' in answer.text
        # Text as a hostile client can send it (a browser cannot): NUL, and invalid UTF-8, the
        # encoding of a lone surrogate, which a lenient parser would turn into U+FFFD.
        for raw, message in (("a%00b", "NUL"), ("a%ED%A0%80b", "lone surrogate")):
            body = f"csrf_token={csrf}&mode=form&{name['width']}=1&{name['label']}={raw}"
            answer = await alice.post(
                "/tools/form_shapes",
                content=body.encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert answer.status_code == 422 and message in answer.text, raw
        for raw_json, message in (
            ("{", "Not JSON"),
            ("[1]", "a JSON object"),
            ('{"label": "\\u0000"}', "NUL character (at label)."),
            ('{"n": -Infinity}', "-Infinity is not JSON"),
        ):
            answer = await alice.post(
                "/tools/form_shapes", data={"csrf_token": csrf, "mode": "raw", "raw": raw_json}
            )
            assert answer.status_code == 422, raw_json
            shown = re.search(r'id="raw-problem">([^<]*)<', answer.text)
            assert shown is not None and message in unescape(shown.group(1)), raw_json
        assert await audit_rows(tools_stack) == before  # no call was made


async def test_the_gateways_refusal_is_shown_with_the_audit_row_it_left(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/tools/echo")
        csrf = session_csrf(page.text)
        refused = await alice.post(
            "/tools/echo", data={"csrf_token": csrf, "mode": "raw", "raw": '{"message": 42}'}
        )
        assert refused.status_code == 422
        assert "<code>VALIDATION_FAILED</code>" in refused.text
        assert '<span class="badge heretical">heretical</span>' in refused.text
        assert "<code>/message</code> 42 is not of type &#34;string&#34;" in refused.text
        link = AUDIT_LINK.search(refused.text)
        assert link is not None
        stored = await stored_call(tools_stack, link.group(1))
        assert stored["status"] == "rejected" and stored["args"] == {"message": 42}
        # The range the schema sets is the gateway's to check: the form sends what was typed.
        page = await alice.get("/tools/form_shapes")
        form = controls(page.text)
        out_of_range = {
            "csrf_token": csrf,
            form.of("label")["name"]: "x",
            form.of("width")["name"]: "1",
            form.of("count")["name"]: "11",
        }
        answer = await alice.post("/tools/form_shapes", data=out_of_range)
        assert answer.status_code == 422 and "VALIDATION_FAILED" in answer.text
        assert AUDIT_LINK.search(answer.text) is not None


async def test_a_run_needs_the_sessions_csrf_token(tools_stack: Stack) -> None:
    async with signed_in(tools_stack, TOKENS["alice"]) as alice:
        before = await audit_rows(tools_stack)
        args = {"mode": "raw", "raw": '{"message": "hi"}'}
        forged = await alice.post("/tools/echo", data={"csrf_token": "not-it", **args})
        assert forged.status_code == 403 and "CSRF_FAILED" in forged.text
        missing = await alice.post("/tools/echo", data=args)
        assert missing.status_code == 403
        bare = await alice.post("/tools/echo")  # no body at all: no token either
        assert bare.status_code == 403 and "CSRF_FAILED" in bare.text
        page = await alice.get("/tools/echo")
        foreign = await alice.post(
            "/tools/echo",
            data={"csrf_token": session_csrf(page.text), **args},
            headers={"Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403 and "ORIGIN_NOT_ALLOWED" in foreign.text
        # A multipart body is not read at all (the body limit exempts multipart, and its
        # parser would spool a file part of any size to disk): not here, not at sign-in.
        upload = {"unused": ("a.txt", b"a" * 2_000_000)}
        for path in ("/signout", "/signin", "/tools/echo"):
            spooled = await alice.post(path, data={"csrf_token": "x"}, files=upload)
            assert spooled.status_code == 415 and "UNSUPPORTED_MEDIA_TYPE" in spooled.text
        gc.collect()
        assert await audit_rows(tools_stack) == before
    async with httpx.AsyncClient(base_url=tools_stack.console) as anonymous:
        answer = await anonymous.post("/tools/echo", data=args)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/signin")
