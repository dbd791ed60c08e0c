"""A person's consent: this OAuth client may act as this agent subject, for this resource."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from specs_app.models import Subject


class AgentConsent(models.Model):
    """Written when the person allows the client on the consent page (with the authorization
    code, by its SHA-256); bound to the refresh-token family when the code is redeemed, so every
    access token of that family acts as ``subject`` (and only for ``resource``). The subject's
    tenant is the only tenant such a token ever acts in."""

    application = models.ForeignKey("oauth2_provider.Application", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+",
                             help_text="the person who consented")
    subject = models.ForeignKey(Subject, on_delete=models.CASCADE, related_name="+",
                                help_text="the agent the client acts as")
    resource = models.CharField(max_length=2000, help_text="the RFC 8707 resource (the MCP server URL) tokens are bound to")
    code_checksum = models.CharField(max_length=64, unique=True)
    token_family = models.UUIDField(null=True, blank=True, unique=True)
    redeemed_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP client consent"

    def __str__(self) -> str:
        return f"{self.application} as {self.subject}"
