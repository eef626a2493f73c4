"""Content credentials: the C2PA manifest a camera, editor or AI generator signed into a file.

Read with the official ``c2pa-python`` bindings (c2pa-rs), offline: remote manifests, OCSP and
every other network request are switched off, so a file cannot make the parser worker reach out
(a manifest may point anywhere, including inside our network). No trust list is configured, so
nothing is reported as trusted; what is reported is whether the manifest is intact and bound to
these bytes, who it says signed it, and what it declares.

``content_credentials`` returns one of:

- ``None``: the container is not one c2pa reads (BMP, JPEG 2000, Matroska, ...);
- ``{"present": False}``: looked, and the file carries no manifest;
- ``{"checked": False, "reason" | "error": ...}``: no answer: the file is over
  :data:`MAX_CHECKED_BYTES` (not read), or c2pa could not walk the container itself, or reading
  failed in a way that says nothing about a manifest;
- ``{"present": True, ...}``: a manifest, with ``validation``:

  - ``"untrusted"``: c2pa's ``Valid``: the manifest is well formed, its claim signature verifies
    with the certificate it carries (a profile c2pa accepts, not self-signed), and its hashes match
    these bytes; but the certificate does not chain to a trust anchor (c2pa adds
    ``signingCredential.untrusted``). With no trust list configured, every intact manifest is
    here: the signer's name is what its certificate says, vouched for by nobody we know.
  - ``"trusted"``: c2pa's ``Trusted``, as above and the signer chains to a configured anchor;
    unreachable until a trust list is configured.
  - ``"invalid"``: c2pa's ``Invalid`` (a failure such as ``assertion.dataHash.mismatch``: the
    bytes changed after signing; ``claimSignature.mismatch``; ``signingCredential.invalid``), or
    the manifest could not be read at all (then ``error`` says why).
  - ``"unchecked"``: the manifest lives at a remote URL (``remote_manifest_url``), never fetched.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from itertools import islice
from typing import Any

import c2pa

MAX_CHECKED_BYTES = 256 * 1024 * 1024
"""Larger files are not read: c2pa holds the whole asset in memory to hash it (measured: a
384 MiB TIFF peaked at 1.3 times its size) and every JPEG, signed or not, twice over."""

AI_SOURCE_TYPES = frozenset(
    f"http://cv.iptc.org/newscodes/digitalsourcetype/{term}"
    for term in ("trainedAlgorithmicMedia", "compositeWithTrainedAlgorithmicMedia")
)
"""IPTC digital source types that declare generative AI, wholly or in part. ``algorithmicMedia``
is not one: IPTC defines it as made by an algorithm "not based on any sampled training data"
(c2pa's own test images, gradients, declare it)."""

# c2pa-rs's list of the extended key usages a C2PA signing certificate may carry
# (sdk/src/crypto/cose/valid_eku_oids.cfg). c2pa-python 0.38.1 (c2pa-rs 0.91.3) does not apply it
# by default and refuses certificates with the C2PA claim-signing EKU (OpenAI's) as "missing
# required EKU", a signingCredential.invalid failure; given explicitly, they validate.
_SIGNING_EKUS = "\n".join(
    (
        "1.3.6.1.5.5.7.3.4",  # id-kp-emailProtection
        "1.3.6.1.5.5.7.3.36",  # id-kp-documentSigning
        "1.3.6.1.5.5.7.3.8",  # id-kp-timeStamping
        "1.3.6.1.5.5.7.3.9",  # id-kp-OCSPSigning
        "1.3.6.1.4.1.311.76.59.1.9",  # Microsoft C2PA signing
        "1.3.6.1.4.1.62558.2.1",  # c2pa-kp-claimSigning
    )
)
_SETTINGS: dict[str, Any] = {
    "verify": {
        "verify_after_reading": True,
        "verify_trust": True,  # reports signingCredential.untrusted instead of staying silent
        "remote_manifest_fetch": False,  # default true: a file would make us fetch its URL
        "ocsp_fetch": False,
    },
    "core": {
        "allowed_network_hosts": [],  # an empty allow-list blocks any request c2pa still makes
        "allow_redirects": False,
        # CAWG identity assertions resolve did:web documents over HTTP and ignore the allow-list.
        "decode_identity_assertions": False,
    },
    "trust": {"trust_config": _SIGNING_EKUS},
}
_STATES = {"Trusted": "trusted", "Valid": "untrusted", "Invalid": "invalid"}
# Errors raised before a manifest was found: c2pa could not walk the container.
_CONTAINER_ERRORS = ("NotSupported", "Io", "FileNotFound")
_MAX_ITEMS = 32  # actions listed, and manifests searched for source types
_MAX_CODES = 20


@functools.cache
def _context() -> c2pa.Context:
    return c2pa.Context.from_dict(_SETTINGS)


def content_credentials(path: str) -> dict[str, Any] | None:
    """The C2PA content credentials of the file at ``path``, its container detected by c2pa from
    the bytes (module docstring: the shapes, and what each ``validation`` means)."""
    size = os.path.getsize(path)
    if size > MAX_CHECKED_BYTES:
        limit = MAX_CHECKED_BYTES // (1024 * 1024)
        return {"checked": False, "reason": f"The file is larger than {limit} MiB."}
    try:
        with open(path, "rb") as stream:
            reader = c2pa.Reader.try_create(None, stream, None, _context())
            if reader is None:
                return {"present": False}
            with reader:
                store = json.loads(reader.json())
    except c2pa.C2paError as exc:
        return _from_error(str(exc))
    except Exception as exc:
        # Credentials are an extra: whatever a crafted manifest does to the bindings must not
        # refuse a file its own parser accepted (native crashes and hangs are the worker's limits).
        return {"checked": False, "error": type(exc).__name__}
    return _summary(store)


def _from_error(message: str) -> dict[str, Any] | None:
    kind, _, detail = message.partition(":")
    detail = detail.strip()
    if kind == "NotSupported":
        return None
    if kind in _CONTAINER_ERRORS or "asset could not be parsed" in detail:
        return {"checked": False, "error": message}
    if kind == "Remote":
        url = detail.rpartition(" from url ")[2] if " from url " in detail else None
        return {
            "present": True,
            "embedded": False,
            "remote_manifest_url": url,
            "validation": "unchecked",
        }
    return {"present": True, "validation": "invalid", "error": message}


def _summary(parsed: Any) -> dict[str, Any]:
    # c2pa writes this JSON, but every value in it comes from the file: check shapes, not trust.
    store = _mapping(parsed)
    manifests = _mapping(store.get("manifests"))
    label = store.get("active_manifest")
    active = _mapping(manifests.get(label)) if isinstance(label, str) else {}
    if not active:
        return {"present": True, "validation": "invalid", "error": "No active manifest."}
    state = store.get("validation_state")
    signature = _mapping(active.get("signature_info"))
    return {
        "present": True,
        "embedded": True,
        "validation": _STATES.get(state, "invalid") if isinstance(state, str) else "invalid",
        "validation_state": state,
        "validation_failures": _failure_codes(store),
        "signer": _present(
            {
                # c2pa names the signing certificate's subject organization "issuer"
                "organization": signature.get("issuer"),
                "common_name": signature.get("common_name"),
                "algorithm": signature.get("alg"),
                "signed_at": signature.get("time"),  # the time stamp, when the claim has one
            }
        ),
        "claim_generator": _claim_generator(active),
        "actions": [_action(action) for action in islice(_actions(active), _MAX_ITEMS)],
        "digital_source_types": (types := _source_types(manifests)),
        "ai_generated": any(source in AI_SOURCE_TYPES for source in types),
        "ingredients": len(_list(active.get("ingredients"))),
        "manifests": len(manifests),
    }


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _failure_codes(store: dict[str, Any]) -> list[str]:
    results = _mapping(_mapping(store.get("validation_results")).get("activeManifest"))
    statuses = _list(results.get("failure")) or _list(store.get("validation_status"))
    codes = [_mapping(status).get("code") for status in statuses]
    return list(dict.fromkeys(code for code in codes if isinstance(code, str)))[:_MAX_CODES]


def _claim_generator(manifest: dict[str, Any]) -> str | None:
    # Claims v2 name the generator in claim_generator_info; v1 in a user-agent string.
    info = _mapping(next(iter(_list(manifest.get("claim_generator_info"))), None))
    if isinstance(name := info.get("name"), str):
        version = info.get("version")
        return f"{name} {version}" if isinstance(version, str) else name
    generator = manifest.get("claim_generator")
    return generator if isinstance(generator, str) else None


def _actions(manifest: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in _list(manifest.get("assertions")):
        assertion = _mapping(item)
        label = assertion.get("label")
        # c2pa.actions and c2pa.actions.v2, with a __n suffix when repeated
        if isinstance(label, str) and label.split("__")[0] in ("c2pa.actions", "c2pa.actions.v2"):
            for action in _list(_mapping(assertion.get("data")).get("actions"))[:_MAX_ITEMS]:
                yield _mapping(action)


def _action(action: dict[str, Any]) -> dict[str, Any]:
    agent = action.get("softwareAgent")
    if isinstance(agent, dict):  # v2: {"name", "version"}; v1: a string
        name, version = agent.get("name"), agent.get("version")
        agent = f"{name} {version}" if isinstance(version, str) else name
    return _present(
        {
            "action": action.get("action"),
            "software_agent": agent,
            "digital_source_type": _source_type(action),
            "when": action.get("when"),
        }
    )


def _present(facts: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in facts.items() if value is not None}


def _source_type(action: dict[str, Any]) -> str | None:
    # Real manifests carry stray whitespace around the IPTC URI (c2pa-rs's CAWG sample does).
    source = action.get("digitalSourceType")
    return source.strip() if isinstance(source, str) else None


def _source_types(manifests: dict[str, Any]) -> list[str]:
    """Source types declared anywhere in the store: an edit's ingredient may be the AI image."""
    found = (
        _source_type(action)
        for manifest in list(manifests.values())[:_MAX_ITEMS]
        for action in _actions(_mapping(manifest))
    )
    return list(dict.fromkeys(source for source in found if isinstance(source, str)))[:_MAX_CODES]
