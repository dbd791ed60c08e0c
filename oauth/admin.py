"""The console's view of connected MCP clients: each consent (client, agent, person), revocable.
Registered clients themselves are the toolkit's Applications (listed and deletable in its admin;
deleting one deletes its consents and tokens)."""
from django.contrib import admin, messages

from oauth.models import AgentConsent
from oauth.tokens import consent_revoke


@admin.register(AgentConsent)
class AgentConsentAdmin(admin.ModelAdmin):
    list_display = ["application", "subject", "user", "resource", "created_at", "redeemed_at", "revoked_at"]
    list_filter = ["subject__tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["application__name", "application__client_id", "subject__name", "user__username"]
    list_select_related = ["application", "subject__tenant", "user"]
    fields = ["application", "subject", "user", "resource", "created_at", "redeemed_at", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # a consent is given on the consent page, by the person

    @admin.action(description="Revoke (and every token issued under it)")
    def revoke(self, request, queryset):
        for consent in queryset:
            consent_revoke(consent)
        self.message_user(request, f"{queryset.count()} consent(s) revoked", messages.SUCCESS)
