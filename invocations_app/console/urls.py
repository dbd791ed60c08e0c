"""The console's URLs (under ``/console/``), each page group in its own namespace."""
from django.urls import include, path

from . import confirmations, dashboard, edits, record, support

urlpatterns = [
    path("confirmations/", include((confirmations.urlpatterns + edits.urlpatterns, "confirmations"))),
    path("", include((support.urlpatterns + record.urlpatterns, "support"))),  # unknown outcomes + the record of a call
    path("", include((dashboard.urlpatterns, "dashboard"))),  # operations dashboard (console home)
]
