"""The console's URLs (under ``/console/``), each page group in its own namespace."""
from django.urls import include, path

from control import confirmations
from control import dashboard
from control import edits
from control import grants
from control import links
from control import people
from control import record
from control import support
from control import tokens

urlpatterns = [
    path("confirmations/", include((confirmations.urlpatterns + edits.urlpatterns + links.urlpatterns, "confirmations"))),
    path("", include((people.urlpatterns, "people"))),  # a tenant's people and roles, your profile (issue 32)
    path("", include((grants.urlpatterns, "grants"))),  # a tenant's grants in words, the readable grant form (issue 32)
    path("tokens/", include((tokens.urlpatterns, "tokens"))),  # your Approvals API tokens
    path("", include((support.urlpatterns + record.urlpatterns, "support"))),  # unknown outcomes + the record of a call
    path("", include((dashboard.urlpatterns, "dashboard"))),  # operations dashboard (console home)
]
