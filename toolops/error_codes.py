"""Every error code ToolOps can show a client, with what it means and what the client should do.

One table, three surfaces:

* ``HTTP`` — the ``code`` of an RFC 9457 problem document from the REST API (an error of the API
  itself: auth, unknown ids, malformed requests, conflicts, limits);
* ``INVOCATION`` — an invocation's ``error.code`` and its tool message's ``error.code``: a
  proposal the pipeline rejected, or a call that ended without an effect (these are recorded
  states, never HTTP errors), plus the interim codes of a call still open;
* ``CONSOLE`` — refusals on the staff pages (decisions by people), listed for completeness.

A code is registered once: a refusal both people's surfaces show — the Approvals API as a problem
document and the console as a message — is one ``DECISIONS`` entry listed in ``HTTP`` and in
``CONSOLE`` (same status, meaning and action on both); every other code is in exactly one table,
except the few whose HTTP problem and recorded outcome are different events (``unknown_tool``,
``budget_exhausted``, ``rate_limited``, ``digest_mismatch``).

The OpenAPI schema (``agent_api.schema``) and ``tests/test_error_codes.py`` (which scans the
source for every code raised) are checked against this module, and the docs' error-codes page is
generated from it (``docs/gen/reference.py``), so the lists cannot drift apart. Pure data; no Django import.
"""
from __future__ import annotations

from typing import NamedTuple


class ErrorCode(NamedTuple):
    code: str
    status: int | None  # the HTTP status of a problem document; None for recorded codes
    meaning: str
    action: str  # what the client (agent runtime, or person) should do


# A person's decision refused the same way by the Approvals API (a problem document) and by the
# console (a message on the page): one definition each, listed in both tables below. A code is
# written once in this module; ``tests/test_error_codes.py`` checks it.
DECISIONS: list[ErrorCode] = [
    ErrorCode("reason_required", 400, "a denial, an edit or a revocation needs a reason (a denial's is read by the model word for word)", "give a reason"),
    ErrorCode("edit_rejected", 400, "the edited arguments fail parsing, validation or normalization (`error`)", "fix the edit"),
    ErrorCode("separation_of_duties", 403, "the run acts for this person (the user `on_behalf_of` named, or its agent's `acts_for`): they may not approve its calls", "ask another approver"),
    ErrorCode("already_decided", 409, "the confirmation was decided (or expired) meanwhile (`state`)", "nothing to do"),
    ErrorCode("duplicate_approver", 409, "this person already approved the confirmation; a quorum needs different people", "wait for another approver"),
    ErrorCode("already_revoked", 409, "the standing approval was revoked meanwhile", "nothing to do"),
]

HTTP: dict[str, ErrorCode] = {c.code: c for c in [
    ErrorCode("malformed_request", 400, "the body, a query parameter or a header is not what the operation takes (`errors` says which field)", "fix the request; do not retry it unchanged"),
    ErrorCode("invalid_timezone", 400, "`timezone` is not an IANA zone name", "send a zone such as `Asia/Shanghai`"),
    ErrorCode("unknown_person", 400, "`on_behalf_of` names no single person of the subject's tenant: nobody, two people whose names look alike, or a name with an invisible or control character (`character`)", "send the username or email of a user who holds a permission on the tenant, exactly as they sign in"),
    ErrorCode("on_behalf_of_conflict", 400, "an admin bound this agent to a person (`acts_for`); `on_behalf_of` names someone else", "leave `on_behalf_of` out, or use an agent that acts for that person"),
    ErrorCode("invalid_format", 400, "`format` is not one of openai, anthropic, mcp", "use one of the three"),
    ErrorCode("unknown_tool", 400, "a `tools` entry is not a published `name@version` this subject may see", "list the tools with `GET /api/v1/tools`; never guess a version"),
    ErrorCode("duplicate_tool", 400, "a `tools` entry is listed twice", "list each tool once"),
    ErrorCode("unknown_context", 400, "`context` names invocations that do not exist in this tenant (`invocation_ids`)", "send only ids of your own invocations"),
    ErrorCode("invalid_idempotency_key", 400, "`Idempotency-Key` is not 1–255 visible ASCII characters", "send a valid key or none"),
    ErrorCode("invalid_cursor", 400, "the result cursor is not one ToolOps issued for this result", "use `next_cursor` from the tool message or the previous page"),
    ErrorCode("unauthenticated", 401, "no, an unknown or a revoked bearer token", "send a valid token; ask an admin for a new one"),
    ErrorCode("forbidden", 403, "the token may not do this", "do not retry; ask an admin"),
    ErrorCode("not_found", 404, "no such run, model call or invocation for this subject (or no such endpoint)", "check the id; ids of other subjects look absent"),
    ErrorCode("method_not_allowed", 405, "the path exists but not with this method (`Allow` lists them)", "use a listed method"),
    ErrorCode("not_acceptable", 406, "the `Accept` header excludes JSON", "accept `application/json`"),
    ErrorCode("run_ended", 409, "the run has finished or exhausted a budget", "start a new run for new work"),
    ErrorCode("proposal_conflict", 409, "this `(model call, proposal_id)` was posted before with other bytes", "use a new proposal id for new arguments"),
    ErrorCode("idempotency_key_in_use", 409, "a call with this `Idempotency-Key` is still in progress (`invocation_id`)", "wait for that invocation; do not send a second one"),
    ErrorCode("not_cancellable", 409, "the call is past the point where cancel can stop it (`state`); the effect, if any, stands", "read the invocation; compensate if needed"),
    ErrorCode("not_final", 409, "the call is still running: no tool message yet (`state`)", "poll again, or use `?wait=` on the invocation"),
    ErrorCode("no_result", 409, "the invocation has no stored result to page through", "read the tool message instead"),
    ErrorCode("no_binary_result", 409, "the invocation's result is not binary", "read the tool message instead"),
    ErrorCode("transition_conflict", 409, "another writer moved the invocation at the same moment", "re-read the invocation; retry if still meaningful"),
    # The Approvals API (people with personal tokens; docs/reference/approvals-api.md); its decision
    # refusals are the shared DECISIONS, added below.
    ErrorCode("edit_not_authorized", 400, "the agent's grants would not allow the edited call (`reasons`); nothing changed", "edit within the grants, or deny"),
    ErrorCode("digest_mismatch", 409, "the digest you sent is not the one awaiting approval (`digest`): the arguments changed, nothing approved", "review the call again and approve what you see"),
    ErrorCode("result_expired", 410, "the binary result's retention (`TOOLOPS_BINARY_RETENTION_SECONDS`) has passed; its bytes are purged, its media type, size and SHA-256 stay in the record", "call the tool again as a new proposal if still needed"),
    ErrorCode("payload_too_large", 413, "the request body exceeds the size limit", "send less"),
    ErrorCode("too_many_tool_calls", 413, "an OpenAI `tool_calls` batch has more entries than `max_tool_calls`", "split the batch"),
    ErrorCode("unsupported_media_type", 415, "the body is not `application/json`", "send JSON"),
    ErrorCode("idempotency_key_reused", 422, "this `Idempotency-Key` was used with other arguments", "use a new key for new arguments"),
    ErrorCode("idempotency_key_expired", 422, "the key's record outlived its retention and the ToolSpec says reject", "use a new key"),
    ErrorCode("budget_exhausted", 429, "the run's budget (`budget`) refuses further work", "finish the run; start a new one if the user wants more"),
    ErrorCode("rate_limited", 429, "this token sent too many requests (`Retry-After`)", "wait `Retry-After` seconds, then retry"),
    ErrorCode("internal_error", 500, "an unexpected error (the body carries `trace_id`)", "retry later; report the trace id"),
    ErrorCode("service_unavailable", 503, "the database or broker is unavailable (`Retry-After`)", "retry after `Retry-After` seconds"),
    *DECISIONS,
]}

INVOCATION: dict[str, ErrorCode] = {c.code: c for c in [
    ErrorCode("unknown_tool", None, "the model named a tool that is not in this model call's visible set", "tell the model; never map it to a near name"),
    ErrorCode("parse_rejected", None, "the argument bytes are not one strict JSON value (duplicate keys, NaN, bad UTF-8, …)", "give the model the error; it may propose again"),
    ErrorCode("validation_rejected", None, "the arguments fail the ToolSpec's JSON Schema", "give the model the error; it may propose again"),
    ErrorCode("normalization_rejected", None, "a normalizer or precondition refused a value (e.g. an unparsable date)", "give the model the error; it may propose again"),
    ErrorCode("authorization_denied", None, "no grant of this subject allows the call", "do not retry; an admin grants capabilities"),
    ErrorCode("tool_quarantined", None, "the tool's upstream definition changed or vanished; nothing was sent", "wait until an admin confirms the new definition"),
    ErrorCode("confirmation_denied", None, "a person denied the call (the reason is in the message)", "tell the model why; do not re-propose the same call"),
    ErrorCode("confirmation_expired", None, "nobody confirmed the call in time", "propose again if still wanted"),
    ErrorCode("budget_exhausted", None, "the run's budget refused this call before it was admitted or sent", "end the run"),
    ErrorCode("deadline_exceeded", None, "the call's deadline passed before it could be sent or finished; nothing was committed", "propose again if still wanted"),
    ErrorCode("cancelled", None, "cancelled before the commit boundary; nothing was committed", "nothing to undo"),
    ErrorCode("business_rejected", None, "the tool refused the request (e.g. 422); nothing was committed", "give the model the error: new arguments are a new proposal"),
    ErrorCode("transient", None, "the tool failed transiently and the retry budget ran out; nothing was committed", "propose again later"),
    ErrorCode("rate_limited", None, "the tool kept answering 429 until the retry budget ran out; nothing was committed", "propose again later"),
    ErrorCode("not_reached", None, "the tool could not be reached within the retry budget; nothing was sent", "propose again later"),
    ErrorCode("permanent", None, "the tool answered with a failure that retrying cannot fix (4xx, a redirect not followed)", "do not retry the same call"),
    ErrorCode("timeout_unknown", None, "a read timed out without an answer within the retry budget", "propose again later"),
    ErrorCode("executor_error", None, "the executor itself failed (a ToolOps or configuration bug)", "report it; do not retry blindly"),
    ErrorCode("executor_misconfigured", None, "the ToolSpec's executor configuration does not resolve (e.g. a missing credential)", "report it to an admin"),
    ErrorCode("no_executor", None, "the ToolSpec has no executor", "report it to an admin"),
    ErrorCode("digest_mismatch", None, "the arguments about to be sent no longer hash to the approved digest; nothing was sent", "report it: the record was tampered with"),
    ErrorCode("not_committed", None, "the tool confirmed nothing was committed and no further attempt is allowed", "propose again if still wanted"),
    ErrorCode("outcome_unknown", None, "the effect may have happened; a person (or a lookup) is checking — also the interim message in OUTCOME_UNKNOWN", "do not retry; read the tool message again later"),
    ErrorCode("awaiting_confirmation", None, "interim: a person must confirm the call first", "do not retry; read the tool message again later"),
    ErrorCode("bad_url", None, "the request URL could not be built or parsed; nothing was sent", "fix the arguments: a new proposal"),
    ErrorCode("scheme_refused", None, "only http and https may be requested; nothing was sent", "fix the arguments: a new proposal"),
    ErrorCode("egress_out_of_scope", None, "the URL (or a redirect hop) is outside the granted URL scope; nothing was sent there", "do not retry; an admin widens grants"),
    ErrorCode("egress_address_denied", None, "the host resolves to a private, loopback or otherwise denied address; nothing was sent", "do not retry; an admin opens that address"),
    ErrorCode("response_too_large", None, "the response exceeded the result policy's size and the policy says reject", "ask for less"),
]}

CONSOLE: dict[str, ErrorCode] = {c.code: c for c in [
    ErrorCode("stale_digest", 409, "the digest the person saw is not the call's digest (arguments changed)", "review the new arguments"),
    *DECISIONS,
    ErrorCode("invalid_standing_approval", 400, "a standing approval's minutes or limits are out of range", "fix the form"),
    ErrorCode("already_resolved", 409, "the unknown outcome was settled meanwhile", "nothing to do"),
    ErrorCode("resolution_pending", 409, "a resolution is waiting for a second person", "confirm or reject that one"),
    ErrorCode("stale_resolution_proposal", 409, "the resolution proposal changed meanwhile", "review it again"),
    ErrorCode("four_eyes_second_person_required", 409, "the same person may not confirm their own resolution", "ask a second person"),
    ErrorCode("evidence_required", 400, "a resolution needs evidence", "give evidence"),
    ErrorCode("external_resource_id_required", 400, "marking committed needs the external resource id", "give the id"),
    ErrorCode("resend_not_allowed", 409, "only write_idempotent calls may be re-sent with the same key", "mark committed or not committed instead"),
    ErrorCode("resend_cancelled", 409, "the call was cancelled; it is not re-sent", "mark it instead"),
    ErrorCode("resend_deadline", 409, "the call's deadline has passed; it is not re-sent", "mark it instead"),
]}

# Codes that appear in the source but never reach a client as such (the scan in
# tests/test_error_codes.py skips them), each with the reason.
NOT_EMITTED = {
    "bad_request": "ApplicationError's default; every raise names its own code",
    "conflict": "Conflict's default; every raise names its own code",
    "invalid_token": "a DRF detail code: the problem's code is `unauthenticated`",
    "null_characters_not_allowed": "a field validator's code inside `errors` of a `malformed_request`",
    "throttled": "the admin login form's refusal (a page, not the API)",
    "transition_not_allowed": "a programming error in the runtime core (surfaces as internal_error)",
    "canonicalization_failed": "refused inside admission, recorded as `validation_rejected`",
    "schema_refused": "refused when a ToolSpec is published (an admin's form error)",
    "invalid_tool_name": "refused when a ToolSpec is published (an admin's form error)",
    "secret_leak": "an internal guard: the encoder refuses to produce bytes holding a secret (never a message)",
    "failed_after_commit": "a state name used by the bulk loader's synthetic data",
    "unknown_run": "the MCP front door's JSON-RPC error (its own protocol, not the REST API)",
    "invalid_request_state": "the MCP front door's URL-elicitation refusal (JSON-RPC, not the REST API)",
    "request_state_expired": "the MCP front door's URL-elicitation refusal (JSON-RPC, not the REST API)",
    "request_state_replayed": "the MCP front door's URL-elicitation refusal (JSON-RPC, not the REST API)",
    "unsupported_dialect": "refused when a ToolSpec is published (an admin's form error)",
    "invalid_schema": "refused when a ToolSpec is published (an admin's form error)",
    "unresolvable_ref": "refused when a ToolSpec is published (an admin's form error)",
    "unsupported_vocabulary": "refused when a ToolSpec is published (an admin's form error)",
    "unsupported_format": "refused when a ToolSpec is published (an admin's form error)",
    "standing_approval": "a reason code in an authorization record (a standing approval let the call through), never an error",
}


# The invocation codes as an enum for drf-spectacular (one named component, not one per field).
INVOCATION_CHOICES = sorted(INVOCATION)


def all_codes() -> set[str]:
    return set(HTTP) | set(INVOCATION) | set(CONSOLE)
