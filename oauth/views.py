"""The authorization server's pages and endpoints, as thin layers over django-oauth-toolkit.

* ``ConsentView``: the authorization endpoint. The person signs in with the console's login (its
  lockout included), sees the client and chooses the agent it will act as, among those of the
  tenants where they hold ``connect_agents``. Refused before the page is shown: PKCE other than
  S256, a ``resource`` other than one this server serves (RFC 8707; none sent = the MCP server).
* ``RegistrationView``: RFC 7591 registration, rate limited per address, redirect URIs checked.
* ``ServerMetadataView``: RFC 8414 metadata, also served at the OpenID discovery path.
"""
from __future__ import annotations

import json
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.http import JsonResponse
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import get_application_model
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, OAuthServerMetadataView
from oauth2_provider.views.dynamic_client_registration import (
    DynamicClientRegistrationManagementView, DynamicClientRegistrationView,
)
from oauthlib.oauth2.rfc6749 import errors

from specs_app.selectors import subjects_user_may_connect

from oauth.registration import redirect_uris_refusal, registration_window


def served_resources() -> list[str]:
    """The RFC 8707 resources tokens may be bound to: the MCP server (``TOOLOPS_OAUTH_RESOURCES``)."""
    return list(settings.TOOLOPS_OAUTH_RESOURCES)


class ConsentForm(AllowForm):
    subject = forms.ModelChoiceField(queryset=None, empty_label=None, required=False,
                                     help_text="the agent this client will act as")


class ConsentView(AuthorizationView):
    template_name = "oauth/consent.html"
    form_class = ConsentForm

    def get_form(self, form_class=None):
        form = super().get_form(form_class)
        form.fields["subject"].queryset = subjects_user_may_connect(user=self.request.user)
        return form

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["subjects"] = subjects_user_may_connect(user=self.request.user)
        if "application" not in context:  # the form shown again (no agent chosen): the same client
            form = context["form"]
            client_id = form.data.get("client_id") if form.is_bound else None
            context["application"] = get_application_model().objects.filter(client_id=client_id).first()
            context["redirect_uri"] = form.data.get("redirect_uri") if form.is_bound else None
        return context

    def render_to_response(self, context, **kwargs):
        """The page's form posts here and is answered with a redirect to the client: the
        Content-Security-Policy's ``form-action`` must let the browser follow it (Chromium checks
        redirects after a form submission), for the client's validated redirect origin only."""
        response = super().render_to_response(context, **kwargs)
        application, redirect_uri = context.get("application"), context.get("redirect_uri") or ""
        parts = urlsplit(redirect_uri)
        if application is not None and application.redirect_uri_allowed(redirect_uri) and parts.netloc:
            response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}
        return response

    def validate_authorization_request(self, request):
        scopes, credentials = super().validate_authorization_request(request)
        if credentials.get("code_challenge_method") != "S256" or not credentials.get("code_challenge"):
            raise _refusal("invalid_request", credentials, "PKCE with code_challenge_method=S256 is required")
        if any(r not in served_resources() for r in request.GET.getlist("resource")):
            raise _refusal("invalid_target", credentials, "this server issues tokens only for "
                           + ", ".join(served_resources()))
        return scopes, credentials

    def form_valid(self, form):
        self.chosen_subject = form.cleaned_data.get("subject")
        if form.cleaned_data.get("allow") and self.chosen_subject is None:
            form.add_error("subject", "choose the agent this client will act as")
            return self.form_invalid(form)
        return super().form_valid(form)

    def create_authorization_response(self, request, scopes, credentials, allow):
        if allow:
            # Re-checked here: the form's hidden fields come back from the browser.
            resources = credentials.get("resource") or served_resources()[:1]
            if credentials.get("code_challenge_method") != "S256" or len(resources) != 1 or resources[0] not in served_resources():
                raise _refusal("invalid_request", credentials, "PKCE S256 and one served resource are required")
            credentials["resource"] = resources
            credentials["toolops_subject"] = self.chosen_subject
        return super().create_authorization_response(request, scopes, credentials, allow)


def _refusal(code: str, credentials, description: str) -> OAuthToolkitError:
    error = errors.CustomOAuth2Error(error=code, description=description, state=credentials.get("state"))
    return OAuthToolkitError(error=error,
                             redirect_uri=credentials.get("redirect_uri"))


class RegistrationView(DynamicClientRegistrationView):
    """RFC 7591 registration: rate limited per address, redirect URIs checked."""

    def post(self, request, *args, **kwargs):
        window = registration_window(request.META.get("REMOTE_ADDR") or "unknown")
        if window is not None and not window.take():
            response = JsonResponse({"error": "slow_down", "error_description": "too many registrations from this address"},
                                    status=429)
            response["Retry-After"] = str(window.retry_after)
            return response
        return _redirects_refused(request) or super().post(request, *args, **kwargs)


class RegistrationManagementView(DynamicClientRegistrationManagementView):
    """RFC 7592 read/update/delete with the registration token; an update's redirect URIs checked."""

    def put(self, request, *args, **kwargs):
        return _redirects_refused(request) or super().put(request, *args, **kwargs)


def _redirects_refused(request) -> JsonResponse | None:
    """The RFC 7591 error for metadata whose redirect URIs this server does not take, else None
    (a body that is not JSON is left to the toolkit's own ``invalid_client_metadata``)."""
    try:
        metadata = json.loads(request.body)
    except ValueError:
        return None
    refusal = redirect_uris_refusal(metadata.get("redirect_uris")) if isinstance(metadata, dict) else None
    if refusal is None:
        return None
    return JsonResponse({"error": "invalid_redirect_uri", "error_description": refusal}, status=400)


class ServerMetadataView(OAuthServerMetadataView):
    """RFC 8414 metadata; its issuer is this server's origin at either discovery path."""

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        document = json.loads(response.content)
        document["issuer"] = oauth2_settings.oauth2_authorization_server_issuer(request)
        answer = JsonResponse(document)
        answer["Access-Control-Allow-Origin"] = "*"
        return answer
