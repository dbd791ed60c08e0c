"""The console's view of connected MCP clients: the registered clients (the toolkit's
Applications, with a *Remove* action) and each consent (client, agent, person), revocable."""
from django.contrib import admin, messages
from oauth2_provider.admin import ApplicationAdmin
from oauth2_provider.models import get_application_model

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


class RegisteredClientAdmin(ApplicationAdmin):
    """The toolkit's client admin, plus *Remove*: the toolkit forbids deleting access tokens one
    by one (an orphaned refresh token could mint more), which also blocks the admin's delete of a
    client that holds any; removing revokes its consents and deletes it with all its tokens."""

    list_display = ["name", "client_id", "registration_source", "client_type", "created"]
    actions = ["remove"]

    @admin.action(description="Remove (revoke its consents, delete it and its tokens)")
    def remove(self, request, queryset):
        removed = 0
        for application in queryset:
            for consent in AgentConsent.objects.filter(application=application):
                consent_revoke(consent)
            application.delete()
            removed += 1
        self.message_user(request, f"{removed} client(s) removed", messages.SUCCESS)


admin.site.unregister(get_application_model())
admin.site.register(get_application_model(), RegisteredClientAdmin)
