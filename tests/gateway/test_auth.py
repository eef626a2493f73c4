"""Who may call: bearer tokens and JWTs; the audit row's user is the authenticated principal."""

from __future__ import annotations

import time

import jwt

from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient, audit_rows

SECRET = "x" * 32
AUTH = {"auth": "enabled", "api_tokens": "tok-ada=ada,tok-bob=bob", "jwt_secret": SECRET}
ECHO = {"tool": "echo", "args": {"message": "hi"}}


def _jwt(sub: str, *, expires_in: int = 60, key: str = SECRET) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + expires_in}, key, algorithm="HS256")


async def test_missing_and_wrong_credentials_get_401_problem(
    backend: Backend, gateway: GatewayClient
):
    async with gateway(**AUTH) as client:
        for headers, code in (
            ({}, "UNAUTHORIZED"),
            ({"Authorization": "Bearer nope"}, "INVALID_TOKEN"),
            ({"Authorization": "Basic dG9rLWFkYQ=="}, "UNAUTHORIZED"),
            ({"Authorization": f"Bearer {_jwt('ada', expires_in=-10)}"}, "TOKEN_EXPIRED"),
            ({"Authorization": f"Bearer {_jwt('ada', key='y' * 32)}"}, "INVALID_TOKEN"),
        ):
            response = await client.post("/execute", json=ECHO, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["code"] == code
        assert (await client.get("/tools")).status_code == 401
        assert await audit_rows(backend) == []  # refused before anything ran or was recorded


async def test_principal_becomes_the_user_id(backend: Backend, gateway: GatewayClient):
    async with gateway(**AUTH) as client:
        by_token = await client.post(
            "/execute", json=ECHO, headers={"Authorization": "Bearer tok-bob"}
        )
        by_jwt = await client.post(
            "/execute", json=ECHO, headers={"Authorization": f"Bearer {_jwt('carol')}"}
        )
        assert by_token.status_code == by_jwt.status_code == 200
        rows = await audit_rows(backend)
        assert sorted(row.user_id for row in rows) == ["bob", "carol"]


async def test_body_cannot_impersonate_another_user(backend: Backend, gateway: GatewayClient):
    async with gateway(**AUTH) as client:
        response = await client.post(
            "/execute", json={**ECHO, "user_id": "ada"}, headers={"Authorization": "Bearer tok-bob"}
        )
        assert response.status_code == 403
        assert response.json()["code"] == "USER_MISMATCH"
        assert await audit_rows(backend) == []


async def test_calls_are_private_to_their_caller(backend: Backend, gateway: GatewayClient):
    async with gateway(**AUTH) as client:
        ada = {"Authorization": "Bearer tok-ada"}
        body = (await client.post("/execute", json=ECHO, headers=ada)).json()
        assert (await client.get(f"/calls/{body['conclave_id']}", headers=ada)).status_code == 200
        other = await client.get(
            f"/calls/{body['conclave_id']}", headers={"Authorization": "Bearer tok-bob"}
        )
        assert other.status_code == 404


async def test_health_and_metrics_stay_public(backend: Backend, gateway: GatewayClient):
    async with gateway(**AUTH) as client:
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_with_auth_disabled_the_body_may_name_the_user(
    backend: Backend, gateway: GatewayClient
):
    async with gateway() as client:
        response = await client.post("/execute", json={**ECHO, "user_id": "robot-7"})
        assert response.status_code == 200
        [row] = await audit_rows(backend)
        assert row.user_id == "robot-7"
