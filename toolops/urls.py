from django.contrib import admin
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularSwaggerSplitView

from agent_api.schema import SchemaView
from control.operations import metrics
from toolops.middleware import problem_response
from toolops.throttling import ThrottledAdminAuthenticationForm

# Failed admin logins are counted per address and username (toolops/throttling.py).
admin.site.login_form = ThrottledAdminAuthenticationForm


@csrf_exempt
def api_not_found(request, rest=""):
    """Any other path under /api/: a 404 problem, never the console's login redirect."""
    return problem_response(404, "not_found", f"no API endpoint at {request.path}")


urlpatterns = [
    path("metrics", metrics, name="metrics"),  # issue 31: Prometheus, bearer token only (control/operations.py)
    path("api/v1/", include("agent_api.urls")),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    # Swagger UI from drf-spectacular-sidecar's static files; its init script is a separate
    # request (?script), so the page runs under the Content-Security-Policy without inline code.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^api/(?P<rest>.*)$", api_not_found),
    path("console/", include("control.urls")),  # staff pages: control/
    path("", include("control.landing")),  # sign-in lands by role; the index lists one's tenants (issue 32)
    path("", include("oauth.urls")),  # issue 33: the MCP front door's OAuth server (metadata, authorize, token…)
    path("", admin.site.urls),
]
