from django.urls import path

from agent_api import views as inv
from control import approvals_api as approvals
from agent_api import tools as specs

urlpatterns = [
    path("tools", specs.ToolListView.as_view(), name="tools"),
    path("runs", inv.RunCreateView.as_view(), name="runs"),
    path("runs/<str:run_id>", inv.RunDetailView.as_view(), name="run-detail"),
    path("runs/<str:run_id>/finish", inv.RunFinishView.as_view(), name="run-finish"),
    path("runs/<str:run_id>/model-calls", inv.ModelCallCreateView.as_view(), name="model-calls"),
    path("model-calls/<str:model_call_id>/proposals", inv.ProposalCreateView.as_view(), name="proposals"),
    path("invocations/<str:invocation_id>", inv.InvocationDetailView.as_view(), name="invocation-detail"),
    path("invocations/<str:invocation_id>/events", inv.InvocationEventsView.as_view(), name="invocation-events"),
    path("invocations/<str:invocation_id>/cancel", inv.InvocationCancelView.as_view(), name="invocation-cancel"),
    path("invocations/<str:invocation_id>/tool-message", inv.InvocationToolMessageView.as_view(), name="invocation-tool-message"),
    path("invocations/<str:invocation_id>/result", inv.InvocationResultView.as_view(), name="invocation-result"),
    path("invocations/<str:invocation_id>/binary", inv.InvocationBinaryView.as_view(), name="invocation-binary"),
    # The Approvals API (people, personal tokens).
    path("confirmations", approvals.ConfirmationListView.as_view(), name="confirmations"),
    path("confirmations/<uuid:confirmation_id>", approvals.ConfirmationDetailView.as_view(), name="confirmation-detail"),
    path("confirmations/<uuid:confirmation_id>/approve", approvals.ConfirmationApproveView.as_view(), name="confirmation-approve"),
    path("confirmations/<uuid:confirmation_id>/deny", approvals.ConfirmationDenyView.as_view(), name="confirmation-deny"),
    path("confirmations/<uuid:confirmation_id>/approve-with-edits", approvals.ConfirmationApproveWithEditsView.as_view(),
         name="confirmation-approve-with-edits"),
    path("standing-approvals/<uuid:standing_id>/revoke", approvals.StandingApprovalRevokeView.as_view(),
         name="standing-approval-revoke"),
]
