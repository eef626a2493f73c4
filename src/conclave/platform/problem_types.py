"""Every problem type the services answer with: one ``code``, one ``type`` URI, one ``title``.

RFC 9457 §3.1.3: a problem's ``title`` is a summary of its *type* and does not change from
occurrence to occurrence; what varies goes in ``detail``. So the title of a problem is looked up
here from its code, never written at the place that raises it, and two code paths answering the
same code cannot drift apart. The ``type`` URI is derived from the code the same way
(``VALIDATION_FAILED`` -> ``https://conclave.dev/problems/validation-failed``); both are stable.

A tool or an expedition source may raise an error with a code of its own (a plug-in's
``ToolExecutionError(code="QUOTA_EXCEEDED")``): such a code is not listed here, and its title is
derived from the code alone ("Quota exceeded"), so it too has exactly one title. docs/problems.md
lists every registered type; a test keeps it in step with this table.

Code raises a registered problem by name, ``code=ProblemCode.EXPEDITION_NOT_FOUND``: a misspelt
name is a mypy error, not a new code. A ``ProblemCode`` is a ``str`` (its value is its name), so
it goes wherever a code string goes, into a JSON body, an audit row or an event.

This module imports nothing from the project: the error classes and the renderer both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

TYPE_BASE = "https://conclave.dev/problems/"


@dataclass(frozen=True)
class ProblemType:
    """A registered problem type: its code, the statuses it is answered with, its title, and
    what it means (the last one is documentation, rendered into docs/problems.md)."""

    code: str
    statuses: tuple[int, ...]
    title: str
    meaning: str

    @property
    def uri(self) -> str:
        """The problem's ``type`` member."""
        return type_uri(self.code)


class ProblemCode(StrEnum):
    """Every registered problem: its code (the member's name and value), the statuses it is
    answered with, its title, and what it means (rendered into docs/problems.md)."""

    problem: ProblemType

    def __new__(cls, code: str, statuses: tuple[int, ...], title: str, meaning: str) -> ProblemCode:
        member = str.__new__(cls, code)
        member._value_ = code
        member.problem = ProblemType(code, statuses, title, meaning)
        return member

    # The one table kept out of the formatter: a row per problem (code, statuses and title on its
    # first line) reads as a table; formatted, a row too long for one line would take six.
    # fmt: off
    # Request shape, every service.
    BAD_REQUEST = "BAD_REQUEST", (400,), "Bad request", "The request cannot be read as sent."
    MALFORMED_JSON = "MALFORMED_JSON", (400,), "Malformed JSON", "The JSON body does not parse."
    CLIENT_DISCONNECTED = ("CLIENT_DISCONNECTED", (400,), "Client disconnected",
        "The client went away before its request body arrived (no one reads the answer).")
    VALIDATION_FAILED = ("VALIDATION_FAILED", (422,), "Validation failed",
        "The request, or a tool's arguments, do not match the schema; `errors[]` names each field.")
    UNSAFE_INPUT = ("UNSAFE_INPUT", (422,), "Unsafe input value",
        "A value no store or response can carry: a lone surrogate, NUL, a non-finite number or an "
        "integer beyond 64 bits (in the path, query, a header or the body).")
    PAYLOAD_TOO_LARGE = ("PAYLOAD_TOO_LARGE", (413,), "Payload too large",
        "The body (or one uploaded file) exceeds its size limit.")
    UNSUPPORTED_MEDIA_TYPE = ("UNSUPPORTED_MEDIA_TYPE", (415,), "Unsupported media type",
        "The body's Content-Type is not one the route reads (JSON routes: `application/json`; "
        "uploads: multipart, and file bytes of the route's media type).")
    METHOD_NOT_ALLOWED = ("METHOD_NOT_ALLOWED", (405,), "Method not allowed",
        "The path exists; the method does not.")
    NOT_ACCEPTABLE = ("NOT_ACCEPTABLE", (406,), "Not acceptable",
        "No representation matches `Accept`.")
    NOT_FOUND = "NOT_FOUND", (404,), "Not found", "No such path, or no such resource."
    HEADER_TIMEOUT = ("HEADER_TIMEOUT", (408,), "Request headers timed out",
        "The request headers did not arrive within the read deadline; the connection closes.")
    BODY_TIMEOUT = ("BODY_TIMEOUT", (408,), "Request body timed out",
        "The request body did not arrive within the read deadline; the connection closes.")
    HEADERS_TOO_LARGE = ("HEADERS_TOO_LARGE", (431,), "Request headers too large",
        "The request headers exceed the size limit; the connection closes.")
    # Who may call: every service.
    HOST_NOT_ALLOWED = ("HOST_NOT_ALLOWED", (421,), "Host not allowed",
        "The `Host` header names no allowed host (DNS rebinding defence).")
    ORIGIN_NOT_ALLOWED = ("ORIGIN_NOT_ALLOWED", (403,), "Origin not allowed",
        "The `Origin` header names an origin not allowed to call the service.")
    UNAUTHORIZED = ("UNAUTHORIZED", (401,), "Unauthorized",
        "No bearer token, or not `Bearer <token>`.")
    INVALID_TOKEN = ("INVALID_TOKEN", (401,), "Invalid token",
        "The bearer token is unknown, or the JWT fails its signature or claims.")
    TOKEN_EXPIRED = "TOKEN_EXPIRED", (401,), "Token expired", "The JWT's `exp` has passed."
    AUTH_KEYS_UNAVAILABLE = ("AUTH_KEYS_UNAVAILABLE", (503,), "Signing keys unavailable",
        "No JWKS fetched (ever, or for 24 h), so no JWT can be checked.")
    FORBIDDEN = "FORBIDDEN", (403,), "Forbidden", "The caller may not do this."
    USER_MISMATCH = ("USER_MISMATCH", (403,), "User mismatch",
        "The body names a `user_id` other than the authenticated caller's.")
    ACTING_USER_FORBIDDEN = ("ACTING_USER_FORBIDDEN", (403,), "Acting user forbidden",
        "`X-Conclave-Acting-User` sent by a caller without the service role, or unusable.")
    RATE_LIMITED = ("RATE_LIMITED", (429,), "Too many requests",
        "A rate limit is used up; `Retry-After` says when to retry.")
    # Availability: every service with a store or a bus.
    UNAVAILABLE = ("UNAVAILABLE", (503,), "Service unavailable",
        "A dependency is down; nothing was done.")
    STORE_UNAVAILABLE = ("STORE_UNAVAILABLE", (503,), "Store unavailable",
        "The relational store is not reachable; nothing was done.")
    BUS_UNAVAILABLE = ("BUS_UNAVAILABLE", (503,), "Bus unavailable",
        "The event bus is not reachable; nothing was done.")
    TIMEOUT = "TIMEOUT", (504,), "Timed out", "An upstream call did not finish in time."
    BACKEND_FAILED = ("BACKEND_FAILED", (502,), "Backend failed",
        "An upstream (a tool's HTTP backend) failed or answered something unusable.")
    INTERNAL_ERROR = ("INTERNAL_ERROR", (500,), "Internal error",
        "A server fault; the log has the details.")
    # Gateway: tool calls.
    UNKNOWN_TOOL = ("UNKNOWN_TOOL", (404,), "Unknown tool",
        "No tool has this name (the call is audited).")
    TOOL_FORBIDDEN = ("TOOL_FORBIDDEN", (403,), "Tool forbidden",
        "The tool policy does not let you call this tool (the call is audited).")
    UNKNOWN_ALIAS = "UNKNOWN_ALIAS", (404,), "Unknown alias", "No alias tool has this name."
    CALL_NOT_FOUND = ("CALL_NOT_FOUND", (404,), "Call not found",
        "No call of yours has this `conclave_id`.")
    ARGS_TOO_LARGE = ("ARGS_TOO_LARGE", (413,), "Arguments too large",
        "The tool arguments exceed `GATEWAY_MAX_ARGS_BYTES`.")
    IDEMPOTENCY_KEY_REUSED = ("IDEMPOTENCY_KEY_REUSED", (409,), "Idempotency key reused",
        "The `Idempotency-Key` was used before for a different request.")
    IDEMPOTENCY_IN_PROGRESS = ("IDEMPOTENCY_IN_PROGRESS", (409,), "Idempotency key in progress",
        "A call with this `Idempotency-Key` is still running.")
    TOOL_BUSY = ("TOOL_BUSY", (429,), "Tool busy",
        "Every execution slot of the tool is taken; `Retry-After` says when to retry.")
    RULE_VIOLATION = ("RULE_VIOLATION", (422,), "Rejected by a tool rule",
        "A rule of the tool rejected the call or its result (audited, heretical).")
    RESULT_TOO_LARGE = ("RESULT_TOO_LARGE", (422,), "Result too large",
        "The tool's result exceeds `GATEWAY_MAX_RESULT_BYTES` (or the tool's own cap).")
    TOOL_ERROR = ("TOOL_ERROR", (422,), "Tool error",
        "The tool refused its input; the tool may use a more specific code of its own.")
    TOOL_FAILED = ("TOOL_FAILED", (502,), "Tool failed",
        "The tool (or one of its rules) raised unexpectedly.")
    OUTPUT_INVALID = ("OUTPUT_INVALID", (502,), "Tool output broke its schema",
        "The tool's result does not match its output schema (audited, heretical).")
    TOOL_TIMEOUT = ("TOOL_TIMEOUT", (504,), "Tool timed out",
        "The tool did not finish within its timeout.")
    INTERRUPTED = ("INTERRUPTED", (503,), "Call interrupted",
        "The gateway running the call died; replayed to a retry with the same `Idempotency-Key`.")
    CALL_CANCELLED = ("CALL_CANCELLED", (409,), "Call cancelled",
        "An MCP client cancelled the call while its tool ran; the tool may have done its work.")
    INVALID_ARGUMENT = ("INVALID_ARGUMENT", (422,), "Invalid argument",
        "An HTTP tool's argument cannot be placed in its backend request.")
    BACKEND_REJECTED = ("BACKEND_REJECTED", (422,), "Backend rejected the call",
        "An HTTP tool's backend answered 4xx to the call.")
    BACKEND_TIMEOUT = ("BACKEND_TIMEOUT", (504,), "Backend timed out",
        "An HTTP tool's backend did not answer.")
    BACKEND_UNAVAILABLE = ("BACKEND_UNAVAILABLE", (503,), "Backend unavailable",
        "An HTTP tool's backend is not configured or not reachable.")
    UPSTREAM_UNAVAILABLE = ("UPSTREAM_UNAVAILABLE", (503,), "Upstream MCP server unavailable",
        "An upstream MCP server is not connected (starting, restarting, refused by the egress "
        "policy) or its circuit is open; nothing was sent to it.")
    UPSTREAM_CONNECTION_LOST = ("UPSTREAM_CONNECTION_LOST", (502,),
        "Upstream MCP server connection lost",
        "The upstream MCP server died or its connection broke while the call ran: whether the "
        "tool did its work is unknown.")
    UPSTREAM_FAILED = ("UPSTREAM_FAILED", (502,), "Upstream MCP server failed",
        "The upstream MCP server answered the call with a JSON-RPC error, or with an answer that "
        "is not a tool result.")
    UPSTREAM_REJECTED = ("UPSTREAM_REJECTED", (422,), "Upstream MCP server rejected the call",
        "The upstream MCP server refused the arguments (JSON-RPC `-32602`).")
    UPSTREAM_TOOL_ERROR = ("UPSTREAM_TOOL_ERROR", (422,), "Upstream tool error",
        "The upstream MCP tool answered `isError: true`; `detail` holds its text (first 500 "
        "characters).")
    UPSTREAM_NOT_FOUND = ("UPSTREAM_NOT_FOUND", (404,), "Upstream not found",
        "No upstream MCP server of this name is configured.")
    UPSTREAM_CREDENTIAL_REQUIRED = ("UPSTREAM_CREDENTIAL_REQUIRED", (403,),
        "Upstream credential required",
        "The upstream MCP server needs a credential the caller has not registered "
        "(`PUT /upstreams/{name}/credential`) and no service credential stands in; nothing was "
        "sent to it.")
    UPSTREAM_CREDENTIAL_REJECTED = ("UPSTREAM_CREDENTIAL_REJECTED", (403,),
        "Upstream credential rejected",
        "The upstream MCP server refused the caller's own credential (HTTP 401 or 403): replace "
        "it. Other users and the server's state are not affected.")
    UPSTREAM_CREDENTIAL_INVALID = ("UPSTREAM_CREDENTIAL_INVALID", (422,),
        "Upstream credential invalid",
        "A credential to register is shorter than 8 or longer than 4096 characters, or holds a "
        "character a header cannot carry (only visible ASCII and inner spaces).")
    UPSTREAM_CREDENTIALS_NOT_ACCEPTED = ("UPSTREAM_CREDENTIALS_NOT_ACCEPTED", (409,),
        "Upstream takes no user credentials",
        "The upstream MCP server is not configured to accept users' own credentials.")
    INVALID_EXPRESSION = ("INVALID_EXPRESSION", (422,), "Invalid expression",
        "`evaluate_expression`: the expression does not parse or cannot be evaluated.")
    INVALID_QUERY = ("INVALID_QUERY", (422,), "Invalid query",
        "`json_query`: the JMESPath query is invalid.")
    UNKNOWN_TIMEZONE = ("UNKNOWN_TIMEZONE", (422,), "Unknown time zone",
        "`current_time`: the time zone is not in the IANA database.")
    # Collector: expeditions, collections, schedules.
    INVALID_CURSOR = ("INVALID_CURSOR", (400,), "Invalid cursor",
        "The cursor was not taken from `next_cursor`.")
    EXPEDITION_NOT_FOUND = ("EXPEDITION_NOT_FOUND", (404,), "Expedition not found",
        "No expedition of yours has this id.")
    EXPEDITION_FINISHED = ("EXPEDITION_FINISHED", (409,), "Expedition finished",
        "The expedition has finished; it cannot be cancelled.")
    UNKNOWN_EXPEDITION_TYPE = ("UNKNOWN_EXPEDITION_TYPE", (422,), "Unknown expedition type",
        "No expedition type has this name; `known_types` lists them.")
    INVALID_PARAMETERS = ("INVALID_PARAMETERS", (422,), "Invalid parameters",
        "The expedition's parameters do not fit its type (a source may use its own code).")
    SECRET_IN_PARAMETERS = ("SECRET_IN_PARAMETERS", (422,), "Secret in parameters",
        "A literal credential in the parameters; name a configured secret instead.")
    INVALID_SECRET_REFERENCE = ("INVALID_SECRET_REFERENCE", (422,), "Invalid secret reference",
        "A `{\"secret\": ...}` reference names no configured secret, or one not allowed there.")
    NO_COLLECTIONS = ("NO_COLLECTIONS", (422,), "No collections",
        "You own no collection yet: name one.")
    COLLECTION_OWNED = ("COLLECTION_OWNED", (409,), "Collection owned",
        "Another user owns this collection.")
    COLLECTION_NOT_FOUND = ("COLLECTION_NOT_FOUND", (404,), "Collection not found",
        "No collection you may read.")
    RECORD_NOT_FOUND = "RECORD_NOT_FOUND", (404,), "Record not found", "No record with this key."
    SEMANTIC_MEMORY_UNAVAILABLE = ("SEMANTIC_MEMORY_UNAVAILABLE", (503,),
        "Semantic memory unavailable",
        "The vector store is not reachable; search cannot answer.")
    INVALID_CRON = ("INVALID_CRON", (422,), "Invalid cron expression",
        "The schedule's cron does not parse.")
    SCHEDULE_EXISTS = ("SCHEDULE_EXISTS", (409,), "Schedule exists",
        "A schedule with this name exists.")
    SCHEDULE_NOT_FOUND = ("SCHEDULE_NOT_FOUND", (404,), "Schedule not found",
        "No schedule of yours has this name.")
    # Graph.
    QUERY_TOO_LONG = ("QUERY_TOO_LONG", (422,), "Query too long",
        "The query exceeds `GRAPH_MAX_QUERY_CHARS`.")
    TOO_MANY_ENTITIES = ("TOO_MANY_ENTITIES", (422,), "Too many entities",
        "More entities than `GRAPH_MAX_ENTITIES`.")
    # Edge: uploads and evidence.
    UNKNOWN_MEDIA_TYPE = ("UNKNOWN_MEDIA_TYPE", (404,), "Unknown media type",
        "The path names no media type; the known ones are listed.")
    EVIDENCE_NOT_FOUND = ("EVIDENCE_NOT_FOUND", (404,), "Evidence not found",
        "No Evidence Pack with this id that you may read.")
    CONTENT_MISSING = ("CONTENT_MISSING", (404,), "Content missing",
        "The pack exists but its bytes are gone from the blob store.")
    NO_THUMBNAIL = ("NO_THUMBNAIL", (404,), "No thumbnail",
        "The pack has no thumbnail: not an image or landscape pack, or its file cannot be "
        "rendered small (the detail says why).")
    MALFORMED_MULTIPART = ("MALFORMED_MULTIPART", (400,), "Malformed multipart",
        "The multipart body is malformed.")
    TRUNCATED_UPLOAD = ("TRUNCATED_UPLOAD", (400,), "Truncated upload",
        "The multipart body ended before its closing boundary.")
    MISSING_FILE = "MISSING_FILE", (422,), "Missing file", "The upload holds no `file` part."
    EMPTY_FILE = "EMPTY_FILE", (422,), "Empty file", "An uploaded file is empty."
    DUPLICATE_FIELD = ("DUPLICATE_FIELD", (422,), "Duplicate field",
        "A form field other than `file` repeats.")
    TOO_MANY_FILES = ("TOO_MANY_FILES", (413,), "Too many files",
        "More files than `EDGE_MAX_FILES_PER_REQUEST`.")
    TOO_MANY_FIELDS = "TOO_MANY_FIELDS", (413,), "Too many fields", "More form fields than allowed."
    FIELD_TOO_LARGE = ("FIELD_TOO_LARGE", (413,), "Field too large",
        "A form field other than a file is too long.")
    METADATA_TOO_LARGE = ("METADATA_TOO_LARGE", (422,), "Metadata too large",
        "`metadata` exceeds `EDGE_MAX_METADATA_BYTES`.")
    INVALID_METADATA = ("INVALID_METADATA", (422,), "Invalid metadata",
        "`metadata` is not a JSON object, or nests too deeply.")
    INVALID_COORDINATES = ("INVALID_COORDINATES", (422,), "Invalid coordinates",
        "Latitude or longitude in `metadata` is out of range or not a number.")
    CORRUPT_MEDIA = "CORRUPT_MEDIA", (422,), "Corrupt media", "The file's parser could not read it."
    PARSER_FAILED = ("PARSER_FAILED", (422,), "Parser failed",
        "No parser worker could be started, or it could not load the media type's plug-in.")
    PARSE_TIMEOUT = ("PARSE_TIMEOUT", (422,), "Parse timed out",
        "Parsing a file took longer than `EDGE_PARSE_TIMEOUT_SECONDS`, or all the files of the "
        "upload longer than `EDGE_PARSE_REQUEST_SECONDS`.")
    PARSERS_BUSY = ("PARSERS_BUSY", (503,), "Parsers busy",
        "Every parser worker stayed busy for `EDGE_PARSER_QUEUE_SECONDS`; `Retry-After` says when "
        "to retry.")
    SIGNATURE_REQUIRED = ("SIGNATURE_REQUIRED", (401,), "Signature required",
        "This device must sign its uploads.")
    INVALID_SIGNATURE = ("INVALID_SIGNATURE", (401,), "Invalid signature",
        "The upload signature does not match.")
    SIGNATURE_EXPIRED = ("SIGNATURE_EXPIRED", (401,), "Signature expired",
        "The signed timestamp is outside the accepted window.")
    NONCE_REQUIRED = ("NONCE_REQUIRED", (401,), "Nonce required",
        "A signed upload carries no fresh nonce.")
    INVALID_NONCE = "INVALID_NONCE", (401,), "Invalid nonce", "The nonce is not usable."
    REPLAYED_REQUEST = ("REPLAYED_REQUEST", (401,), "Replayed request",
        "This signed request was already used.")
    # Transparency logs: every service that publishes one (docs/transparency.md).
    LOG_NOT_FOUND = ("LOG_NOT_FOUND", (404,), "Log not found",
        "This service publishes no transparency log of this name.")
    BEYOND_LOG = ("BEYOND_LOG", (404,), "Beyond the log",
        "The leaf index or tree size is past the log's latest signed checkpoint; it may be there "
        "after the next one (within `CONCLAVE_TLOG_CHECKPOINT_INTERVAL_SECONDS`).")
    LEAF_NOT_FOUND = ("LEAF_NOT_FOUND", (404,), "Leaf not found",
        "No leaf of this leaf hash is in the log (a leaf queued moments ago is there once the "
        "next checkpoint is signed).")
    INVALID_LEAF_HASH = ("INVALID_LEAF_HASH", (422,), "Invalid leaf hash",
        "A leaf hash is written as 64 hexadecimal digits (SHA-256).")
    CHECKPOINT_NOT_FOUND = ("CHECKPOINT_NOT_FOUND", (404,), "Checkpoint not found",
        "The log signed no checkpoint of this tree size (it signs the sizes it integrated at).")
    INVALID_LOG_RANGE = ("INVALID_LOG_RANGE", (422,), "Invalid log range",
        "The index or sizes cannot be proven: an index at or beyond the tree size, a consistency "
        "proof to a smaller tree, a negative number.")
    LOG_CORRUPTED = ("LOG_CORRUPTED", (503,), "Log corrupted",
        "The stored log contradicts itself (a row edited in its database): nothing is proven from "
        "it until an operator audits it (`conclave log audit`) and repairs it.")
    # Operator console (docs/console.md).
    CSRF_FAILED = ("CSRF_FAILED", (403,), "Form not accepted",
        "A console form's CSRF token is missing or not the session's: a stale page, or a form "
        "another site made; reload the page and send it again.")
    SERVICE_UNREACHABLE = ("SERVICE_UNREACHABLE", (503,), "Service unreachable",
        "A service the console asks could not be reached, or did not answer in time.")
    UPSTREAM_ANSWER_INVALID = ("UPSTREAM_ANSWER_INVALID", (502,), "Service answer unusable",
        "A service answered the console with something it cannot show (not JSON, or too large).")
    # fmt: on


_MISNAMED = [member.name for member in ProblemCode if member.name != member.value]
if _MISNAMED:
    raise ValueError(f"problem codes whose value is not their name: {_MISNAMED}")

PROBLEM_TYPES: dict[str, ProblemType] = {member.value: member.problem for member in ProblemCode}


def type_uri(code: str) -> str:
    """The ``type`` URI of the problem ``code`` (stable: clients may dispatch on it)."""
    return TYPE_BASE + code.lower().replace("_", "-")


def title_of(code: str) -> str:
    """The one ``title`` of problem ``code``: registered, or derived from the code alone."""
    registered = PROBLEM_TYPES.get(code)
    if registered is not None:
        return registered.title
    words = code.replace("_", " ").replace("-", " ").strip().lower()
    return words.capitalize() or "Problem"
