"""The egress policy, driven through the guarded HTTP client against a real local server."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import httpx
import pytest
import trustme
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from conclave.platform.egress import EgressPolicy, address_refusal, guarded_client
from conclave.settings import CommonSettings
from tests.httpserver import running_server


@dataclass
class LocalServer:
    """A real HTTP server on 127.0.0.1 that records the paths it was asked for."""

    url: str = ""
    port: int = 0
    paths: list[str] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        if request.url.path == "/hop":
            return RedirectResponse(f"http://127.0.0.1:{self.port}/secret", status_code=302)
        return JSONResponse({"path": request.url.path})


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    local = LocalServer()
    app = Starlette(routes=[Route("/{path:path}", local.handle)])
    async with running_server(app) as url:
        local.url, local.port = url, int(url.rsplit(":", 1)[1])
        yield local


class ScriptedResolver:
    """A resolver answering from a script, one answer per lookup (the last one repeats)."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def _get(policy: EgressPolicy, url: str, max_redirects: int = 5) -> httpx.Response:
    async with guarded_client(policy, timeout=5, max_redirects=max_redirects) as client:
        return await client.get(url, headers={"Connection": "close"})


async def test_a_local_server_is_refused_by_default_and_never_asked(server: LocalServer):
    with pytest.raises(httpx.ConnectError):
        await _get(EgressPolicy(), server.url + "/anything")
    assert server.paths == []


@pytest.mark.parametrize(
    "host",
    [
        "2130706433",  # decimal
        "0x7f000001",  # hexadecimal
        "017700000001",  # octal
        "127.1",  # short dotted form
        "127.0.0.1.",  # final dot
        "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
        "localhost",
        "LocalHost",
        "metadata.google.internal",
    ],
)
async def test_every_spelling_of_a_local_host_is_refused(server: LocalServer, host: str):
    with pytest.raises(httpx.ConnectError):
        await _get(EgressPolicy(), f"http://{host}:{server.port}/anything")
    assert server.paths == []


async def test_the_allow_list_opens_networks_and_names_on_purpose(server: LocalServer):
    by_network = await _get(EgressPolicy.build(networks="127.0.0.1/32"), server.url + "/net")
    by_name = await _get(EgressPolicy.build(hosts="LOCALHOST"), f"http://localhost:{server.port}/n")
    assert (by_network.status_code, by_name.status_code) == (200, 200)
    assert server.paths == ["/net", "/n"]


async def test_a_name_is_refused_when_any_of_its_addresses_is(server: LocalServer):
    resolver = ScriptedResolver(["93.184.216.34", "127.0.0.1"])
    with pytest.raises(httpx.ConnectError):
        await _get(EgressPolicy(resolver=resolver), f"http://api.example.test:{server.port}/")
    assert server.paths == []


async def test_the_connection_goes_to_the_checked_address_with_no_second_lookup(
    server: LocalServer,
):
    # The name exists only in the injected resolver, so reaching the server proves the socket was
    # opened to the address that was checked. Its next answer points at the metadata service (a
    # rebinding attacker's DNS): the next connection looks the name up again and is refused.
    resolver = ScriptedResolver(["127.0.0.1"], ["169.254.169.254"])
    policy = EgressPolicy.build(networks="127.0.0.1/32", resolver=resolver)
    url = f"http://rebind.example.test:{server.port}"
    first = await _get(policy, url + "/first")
    with pytest.raises(httpx.ConnectError):
        await _get(policy, url + "/second")
    assert first.status_code == 200
    assert server.paths == ["/first"]
    assert resolver.lookups == ["rebind.example.test"] * 2  # once per connection


async def test_tls_verifies_the_host_name_while_connecting_to_the_checked_address(tmp_path):
    authority = trustme.CA()
    certificate = authority.issue_cert("api.example.test")
    certificate.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    certificate.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)
    app = Starlette(routes=[Route("/", lambda request: JSONResponse({"tls": True}))])
    resolver = ScriptedResolver(["127.0.0.1"])
    policy = EgressPolicy.build(networks="127.0.0.1/32", resolver=resolver)
    files = {"ssl_certfile": str(tmp_path / "cert.pem"), "ssl_keyfile": str(tmp_path / "key.pem")}
    async with running_server(app, **files) as url:
        port = url.rsplit(":", 1)[1]
        async with guarded_client(policy, timeout=5, max_redirects=0, verify=trusted) as client:
            named = await client.get(f"https://api.example.test:{port}/")
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"https://other.example.test:{port}/")
    assert named.json() == {"tls": True}


async def test_a_redirect_to_a_refused_address_is_not_followed(server: LocalServer):
    # The name is allowed; the literal loopback address the server redirects to is not.
    policy = EgressPolicy.build(hosts="api.example.test", resolver=ScriptedResolver(["127.0.0.1"]))
    with pytest.raises(httpx.ConnectError):
        await _get(policy, f"http://api.example.test:{server.port}/hop")
    assert server.paths == ["/hop"]


async def test_a_refused_address_fails_like_a_closed_port(server: LocalServer):
    closed = "http://127.0.0.1:9/"  # discard: nothing listens there
    with pytest.raises(httpx.ConnectError) as refused:
        await _get(EgressPolicy(), closed)
    with pytest.raises(httpx.ConnectError) as unanswered:
        await _get(EgressPolicy.build(networks="127.0.0.0/8"), closed)
    assert type(refused.value) is type(unanswered.value)


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "0.0.0.0",
        "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.1", "::1", "::", "fc00::1",
        "fd00:ec2::254", "fe80::1", "ff02::1", "fec0::1", "::ffff:169.254.169.254",
        "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2001::1", "::7f00:1",
        "::a9fe:a9fe",
    ],
)  # fmt: skip
def test_local_private_and_reserved_addresses_are_refused(address: str):
    assert address_refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address: str):
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_settings_refuse_an_allowed_network_that_is_not_one():
    with pytest.raises(ValueError, match="not-a-network"):
        CommonSettings(egress_allow_networks="10.0.0.0/8,not-a-network")
