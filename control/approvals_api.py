"""Approvals API: people decide confirmations over REST (docs/reference/approvals-api.md).

Authenticated by a person's token only (``auth.PersonTokenAuthentication``; an agent's token is
refused here, and a person's token on the agent API). What a person sees and decides is the
console's rule, read through the console's own selectors (guardian ``approve_toolspec``), so the
queue page and this API can never disagree. Views parse, call a service, serialize.
"""
from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_api.schema import problem_responses
from toolops.errors import ApplicationError, Conflict

from agent_api.views import _valid
from agent_api.auth import PersonTokenAuthentication
from invocations_app.confirmation_edits import confirmation_approve_with_edits, confirmation_preview_edit
from invocations_app.confirmation_summaries import confirmation_summary
from invocations_app.confirmations import StaleDigest, confirmation_approve, confirmation_deny
from control.selectors import confirmation_get_for_user, confirmations_visible_to, standing_approval_get_for_user
from invocations_app.models import Confirmation
from invocations_app.standing_approvals import standing_approval_revoke

STATES = [s.value for s in Confirmation.Status]


class DigestMismatch(Conflict):
    code, title = "digest_mismatch", "The digest is not the one awaiting approval"


# --- serializers ---------------------------------------------------------------------------

class ConfirmationOut(serializers.Serializer):
    id = serializers.UUIDField()
    invocation_id = serializers.UUIDField()
    tool = serializers.CharField(help_text="name@version")
    tenant = serializers.CharField()
    state = serializers.ChoiceField(STATES)
    arguments_display = serializers.CharField(help_text="what a person reads: one `field: value` line per argument, "
                                              "values by meaning (`amount: 12.50 EUR`)")
    arguments = serializers.ListField(child=serializers.DictField(), help_text="the same, structured: "
                                      "`{field, kind, text, value}` per top-level argument")
    normalized_arguments = serializers.JSONField()
    digest = serializers.CharField(help_text="send this back to approve exactly these arguments")
    why = serializers.CharField(help_text="why this call needs a person: the grant or rule, its limits in major units of their currency")
    risk = serializers.CharField(help_text="side-effect class, what a retry does, whether it can be undone")
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    approvals_needed = serializers.IntegerField()
    approvals = serializers.ListField(child=serializers.DictField(), help_text="`{user, at}` per approval so far")
    escalated_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    replacement_invocation_id = serializers.UUIDField(allow_null=True)
    record_url = serializers.URLField()
    console_url = serializers.URLField()

    class Meta:
        ref_name = "Confirmation"


class InterpretationOut(serializers.Serializer):
    raw_arguments = serializers.CharField(help_text="the bytes the model wrote (UTF-8, replacement characters where invalid)")
    normalization_context = serializers.JSONField(help_text="clock, time zone and locale used")
    trace = serializers.JSONField(help_text="each normalization: raw value → normalized value")


class ConfirmationDetailOut(ConfirmationOut):
    interpretation = InterpretationOut()

    class Meta:
        ref_name = "ConfirmationDetail"


class ConfirmationPageOut(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ConfirmationOut(many=True)


class ApproveIn(serializers.Serializer):
    digest = serializers.CharField(max_length=64, help_text="the digest the person saw")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class DenyIn(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000,
                                   help_text="required (400 reason_required if blank): the model reads it word for word")


class ApproveWithEditsIn(serializers.Serializer):
    digest = serializers.CharField(max_length=64, help_text="the digest of the original arguments the person saw")
    arguments = serializers.JSONField(help_text="the corrected arguments (a JSON object)")
    new_digest = serializers.CharField(required=False, max_length=64,
                                       help_text="optional: the digest the edit must produce (409 digest_mismatch otherwise)")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class StandingRevokeIn(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000,
                                   help_text="required (400 reason_required if blank): kept on the record")


class StandingRevokedOut(serializers.Serializer):
    id = serializers.UUIDField()
    revoked_at = serializers.DateTimeField()
    revoked_by = serializers.CharField()
    revoke_reason = serializers.CharField()
    calls_covered = serializers.IntegerField(help_text="calls it covered before it was revoked (they stand)")


class AwaitingOut(serializers.Serializer):
    confirmation_id = serializers.UUIDField()
    approvals = serializers.IntegerField(help_text="distinct people who approved it so far (an editor's own approval counts)")
    approvals_needed = serializers.IntegerField()


class DecisionOut(serializers.Serializer):
    confirmation = ConfirmationOut()
    invocation = serializers.DictField(help_text="`{id, state, digest}` of the call that goes on (the replacement, after an edit)")
    awaiting = AwaitingOut(allow_null=True, help_text=(
        "when that call still waits for other approvers (a quorum, or an edit another person must check): its "
        "confirmation and the count so far; null once it is released or ended"))


# --- views -----------------------------------------------------------------------------------

class ApprovalsView(APIView):
    authentication_classes = [PersonTokenAuthentication]


class ConfirmationPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        """A page size outside 1..max is the client's mistake (400), not silently clamped."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            raise ApplicationError(f"page_size must be an integer from 1 to {self.max_page_size}", code="malformed_request")
        return int(raw)


_DECIDE_ERRORS = {403: ["forbidden", "separation_of_duties"], 404: ["not_found"],
                  409: ["already_decided", "duplicate_approver", "transition_conflict"]}


class ConfirmationListView(ApprovalsView):
    @extend_schema(
        parameters=[
            OpenApiParameter("state", {"type": "string", "enum": STATES}, description="default `pending`: what you may decide now"),
            OpenApiParameter("page", int), OpenApiParameter("page_size", {"type": "integer", "minimum": 1, "maximum": 200}),
        ],
        responses={200: ConfirmationPageOut, **problem_responses({400: ["malformed_request"], 404: ["not_found"]})},
        summary="Confirmations this person may decide", tags=["approvals"], operation_id="confirmations_list",
    )
    def get(self, request):
        state = request.query_params.get("state", Confirmation.Status.PENDING)
        if state not in STATES:
            raise ApplicationError(f"state must be one of {', '.join(STATES)}", code="malformed_request")
        qs = confirmations_visible_to(user=request.user).filter(state=state)
        if state == Confirmation.Status.PENDING:
            qs = qs.filter(expires_at__gt=timezone.now())  # past its time: no longer decidable
        # Each summary reads the proposal's bytes (the approver view) and the approvals so far:
        # fetched with the page, not once per row.
        qs = (qs.select_related("tool_spec", "tenant", "invocation__proposal", "decided_by")
              .prefetch_related("approvals__user").order_by("created_at", "pk"))
        paginator = ConfirmationPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response([confirmation_summary(c) for c in page])


class ConfirmationDetailView(ApprovalsView):
    @extend_schema(responses={200: ConfirmationDetailOut, **problem_responses({403: ["forbidden"], 404: ["not_found"]})},
                   summary="One confirmation, with the interpretation trail and the record link", tags=["approvals"],
                   operation_id="confirmation_get")
    def get(self, request, confirmation_id):
        confirmation = confirmation_get_for_user(user=request.user, pk=confirmation_id)
        invocation = confirmation.invocation
        raw = bytes(invocation.proposal.arguments_bytes or b"")
        return Response({**confirmation_summary(confirmation), "interpretation": {
            "raw_arguments": raw.decode("utf-8", errors="replace"),
            "normalization_context": invocation.normalization_context,
            "trace": invocation.normalization_trace,
        }})


class ConfirmationApproveView(ApprovalsView):
    @extend_schema(request=ApproveIn, responses={200: DecisionOut, **problem_responses(
        {**_DECIDE_ERRORS, 409: ["digest_mismatch", *_DECIDE_ERRORS[409]]}, body=True)},
        summary="Approve the digest you saw", tags=["approvals"])
    def post(self, request, confirmation_id):
        confirmation = confirmation_get_for_user(user=request.user, pk=confirmation_id)  # 403/404 before anything changes
        data = _valid(ApproveIn, request.data)
        with _digest_mismatch():
            invocation = confirmation_approve(
                confirmation=confirmation, user=request.user, digest_seen=data["digest"], reason=data["reason"].strip(),
            )
        return _decision(confirmation, invocation)


class ConfirmationDenyView(ApprovalsView):
    @extend_schema(request=DenyIn, responses={200: DecisionOut, **problem_responses(
        {**_DECIDE_ERRORS, 400: ["reason_required"]}, body=True)},
        summary="Deny, with the reason the model will read", tags=["approvals"])
    def post(self, request, confirmation_id):
        confirmation = confirmation_get_for_user(user=request.user, pk=confirmation_id)
        data = _valid(DenyIn, request.data)
        invocation = confirmation_deny(confirmation=confirmation, user=request.user, reason=data["reason"].strip())
        return _decision(confirmation, invocation)


class ConfirmationApproveWithEditsView(ApprovalsView):
    @extend_schema(request=ApproveWithEditsIn, responses={200: DecisionOut, **problem_responses(
        {**_DECIDE_ERRORS, 400: ["edit_rejected", "edit_not_authorized"], 409: ["digest_mismatch", *_DECIDE_ERRORS[409]]}, body=True)},
        summary="Approve corrected arguments (re-validated, re-authorized; the approval binds the new digest; "
                "another approver must approve an edit that does more than narrow numbers: `awaiting`)",
        tags=["approvals"])
    def post(self, request, confirmation_id):
        confirmation = confirmation_get_for_user(user=request.user, pk=confirmation_id)
        data = _valid(ApproveWithEditsIn, request.data)
        # Without new_digest the person approves exactly the arguments they sent: the digest they produce.
        new_digest = data.get("new_digest") or confirmation_preview_edit(
            confirmation=confirmation, edited_arguments=data["arguments"]).digest or ""
        with _digest_mismatch():
            invocation = confirmation_approve_with_edits(
                confirmation=confirmation, user=request.user, digest_seen=data["digest"], edited_arguments=data["arguments"],
                new_digest_seen=new_digest, reason=data["reason"].strip() or "corrected through the Approvals API",
            )
        return _decision(confirmation, invocation)


class StandingApprovalRevokeView(ApprovalsView):
    @extend_schema(request=StandingRevokeIn, responses={200: StandingRevokedOut, **problem_responses(
        {400: ["reason_required"], 403: ["forbidden"], 404: ["not_found"], 409: ["already_revoked"]}, body=True)},
        summary="Revoke a standing approval, with the reason kept on the record", tags=["approvals"],
        operation_id="standing_approval_revoke")
    def post(self, request, standing_id):
        standing = standing_approval_get_for_user(user=request.user, pk=standing_id)  # 403/404 before anything changes
        data = _valid(StandingRevokeIn, request.data)
        standing = standing_approval_revoke(standing=standing, user=request.user, reason=data["reason"])
        return Response({"id": str(standing.pk), "revoked_at": standing.revoked_at.isoformat(),
                         "revoked_by": standing.revoked_by.get_username(), "revoke_reason": standing.revoke_reason,
                         "calls_covered": standing.calls_covered})


class _digest_mismatch:
    """Turn the services' ``StaleDigest`` into the API's ``409 digest_mismatch`` (nothing was decided)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, StaleDigest):
            raise DigestMismatch(exc.message, extra=exc.extra) from exc
        return False


def _decision(confirmation: Confirmation, invocation) -> Response:
    confirmation.refresh_from_db()
    waiting = Confirmation.objects.filter(invocation_id=invocation.pk, state=Confirmation.Status.PENDING).first()
    return Response({
        "confirmation": confirmation_summary(confirmation),
        "invocation": {"id": str(invocation.pk), "state": invocation.state, "digest": invocation.digest},
        "awaiting": None if waiting is None else {
            "confirmation_id": str(waiting.pk), "approvals": waiting.approvals.count(), "approvals_needed": waiting.approvals_needed},
    })
