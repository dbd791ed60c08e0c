"""django-oauth-toolkit's validator, taught ToolOps' consent.

* An authorization code is only saved with a consent (the subject the person chose): no subject,
  no code.
* Redeeming the code binds the consent to the refresh-token family the toolkit starts, so every
  token of that family (rotation keeps the family) carries the subject.
* A code presented again is refused and revokes everything it issued (OAuth 2.1 §4.1.3): the
  consent keeps its code's checksum after the toolkit deletes the grant.
"""
from __future__ import annotations

from django.utils import timezone
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from oauth.models import AgentConsent
from oauth.tokens import checksum, consent_revoke


class ToolOpsValidator(OAuth2Validator):
    def save_authorization_code(self, client_id, code, request, *args, **kwargs):
        subject = getattr(request, "toolops_subject", None)
        resources = getattr(request, "resource", None) or []
        if subject is None or len(resources) != 1:
            raise errors.AccessDeniedError(description="no agent was chosen for this client", request=request)
        super().save_authorization_code(client_id, code, request, *args, **kwargs)
        AgentConsent.objects.create(application=request.client, user=request.user, subject=subject,
                                    resource=resources[0], code_checksum=checksum(code["code"]))

    def validate_code(self, client_id, code, client, request, *args, **kwargs):
        consent = AgentConsent.objects.filter(code_checksum=checksum(code), application=client).first()
        if consent is None:
            return False
        if consent.redeemed_at is not None or consent.revoked_at is not None:
            consent_revoke(consent)  # a replayed code: what it issued is revoked
            return False
        if not super().validate_code(client_id, code, client, request, *args, **kwargs):
            return False
        request.toolops_consent = consent
        return True

    def _create_refresh_token(self, request, refresh_token_code, access_token, previous_refresh_token):
        refresh_token = super()._create_refresh_token(request, refresh_token_code, access_token, previous_refresh_token)
        consent = getattr(request, "toolops_consent", None)
        if consent is not None and previous_refresh_token is None:
            bound = AgentConsent.objects.filter(pk=consent.pk, redeemed_at__isnull=True).update(
                token_family=refresh_token.token_family, redeemed_at=timezone.now())
            if not bound:  # the same code redeemed concurrently: this one loses (and rolls back)
                raise errors.InvalidGrantError(request=request)
        return refresh_token
