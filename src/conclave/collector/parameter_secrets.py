"""Credentials in expedition parameters: referenced by name, never stored, never shown.

A request that needs a credential (an ``http_json`` source's ``Authorization`` header) names a
secret of the deployment, ``{"secret": "<name>"}``, configured in ``COLLECTOR_SOURCE_SECRETS``
with the hosts it may be sent to. The reference is what is stored, shown and published; the
Tracker resolves it just before the source runs. A literal value under a key that looks like a
credential is refused when a user submits it (422 ``SECRET_IN_PARAMETERS``), and whatever such a
key holds in a stored row (rows from before this rule, bus-requested runs) is shown redacted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from conclave.platform.credentials import is_credential_key, is_reference
from conclave.platform.errors import Unprocessable
from conclave.platform.problem_types import ProblemCode
from conclave.settings.collector import SourceSecret


def check_parameters(parameters: Mapping[str, Any], secrets: Mapping[str, SourceSecret]) -> None:
    """Refuse (422) literal credentials and references that cannot be used: unknown names,
    references outside a source's ``headers``, or a source URL on a host the secret is not
    allowed to reach."""
    for location in _credential_literals(parameters, ("parameters",)):
        raise Unprocessable(
            f"{location} holds a credential: reference a named secret instead "
            '({"secret": "<name>"}, configured in COLLECTOR_SOURCE_SECRETS).',
            code=ProblemCode.SECRET_IN_PARAMETERS,
            errors=[{"field": location, "message": "literal credential", "type": "secret"}],
        )
    for location, name, url in _references(parameters, ("parameters",), None):
        problem = _reference_problem(name, url, secrets)
        if problem is not None:
            raise Unprocessable(
                f"{location}: {problem}",
                code=ProblemCode.INVALID_SECRET_REFERENCE,
                errors=[{"field": location, "message": problem, "type": "secret_reference"}],
            )


def resolve_headers(spec: Mapping[str, Any], secrets: Mapping[str, SourceSecret]) -> dict[str, Any]:
    """``spec`` with the secret references of its ``headers`` replaced by their values, for the
    source about to run (``ValueError`` naming the reference when it cannot be used now)."""
    headers = spec.get("headers")
    if not isinstance(headers, dict) or not any(is_reference(v) for v in headers.values()):
        return dict(spec)
    url = spec.get("url") if isinstance(spec.get("url"), str) else None
    resolved = {}
    for key, value in headers.items():
        if is_reference(value):
            problem = _reference_problem(value["secret"], url, secrets)
            if problem is not None:
                raise ValueError(f"headers.{key}: {problem}")
            value = secrets[value["secret"]].value.get_secret_value()
        resolved[key] = value
    return {**spec, "headers": resolved}


def _reference_problem(
    name: str, url: str | None, secrets: Mapping[str, SourceSecret]
) -> str | None:
    secret = secrets.get(name)
    if secret is None:
        return f"no secret named {name!r} is configured"
    if url is None:
        return "a secret can only be used in the headers of a source with a 'url'"
    host = (urlsplit(url).hostname or "").lower()
    if host not in {allowed.lower() for allowed in secret.hosts}:
        return f"secret {name!r} may not be sent to {host or 'this URL'!r}"
    return None


def _credential_literals(document: Any, location: tuple[str, ...]) -> Iterator[str]:
    """Where a credential-looking key (or anything under one) holds non-empty text."""
    stack: list[tuple[tuple[str, ...], Any, bool]] = [(location, document, False)]
    while stack:
        where, value, sensitive = stack.pop()
        if is_reference(value):
            continue  # a name, not a value (its key, "secret", is no credential itself)
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append(((*where, str(key)), item, sensitive or is_credential_key(key)))
        elif isinstance(value, list):
            stack.extend(((*where, str(i)), item, sensitive) for i, item in enumerate(value))
        elif isinstance(value, str) and value and (sensitive or _url_holds_credentials(value)):
            yield ".".join(where)


def _url_holds_credentials(text: str) -> bool:
    """Whether ``text`` is a URL carrying a credential: user info (``user:pass@``) or a query
    parameter named like one (``?api_key=…``); such a URL would be stored and shown as it is."""
    if "://" not in text[:16]:
        return False
    try:
        parsed = urlsplit(text)
        if parsed.username or parsed.password:
            return True
        names = [name for name, _ in parse_qsl(parsed.query, keep_blank_values=False)]
    except ValueError:
        return False  # not a URL this check can read: the source's own validation refuses it
    return any(is_credential_key(name) for name in names)


def _references(
    document: Any, location: tuple[str, ...], url: str | None
) -> Iterator[tuple[str, str, str | None]]:
    """``(location, secret name, URL of the source whose headers hold it)`` of every reference;
    a reference anywhere but in ``headers`` next to a ``url`` gets ``None`` as its URL."""
    stack: list[tuple[tuple[str, ...], Any, str | None]] = [(location, document, None)]
    while stack:
        where, value, source_url = stack.pop()
        if is_reference(value):
            yield ".".join(where), value["secret"], source_url
        elif isinstance(value, dict):
            own_url = value.get("url") if isinstance(value.get("url"), str) else None
            for key, item in value.items():
                in_headers = key == "headers" and isinstance(item, dict) and own_url is not None
                if in_headers:
                    for header, header_value in item.items():
                        stack.append(((*where, key, str(header)), header_value, own_url))
                else:
                    stack.append(((*where, str(key)), item, None))
        elif isinstance(value, list):
            stack.extend(((*where, str(i)), item, None) for i, item in enumerate(value))
