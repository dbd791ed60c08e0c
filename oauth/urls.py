"""The authorization server's URLs, at the console's origin. Named in the ``oauth2_provider``
namespace: the toolkit's metadata view finds its endpoints by these names."""
from django.urls import path
from oauth2_provider import views as toolkit

from oauth.views import ConsentView, RegistrationManagementView, RegistrationView, ServerMetadataView

app_name = "oauth2_provider"

urlpatterns = [
    path(".well-known/oauth-authorization-server", ServerMetadataView.as_view(), name="oauth-server-metadata"),
    path(".well-known/openid-configuration", ServerMetadataView.as_view(), name="openid-configuration"),
    path("oauth/authorize/", ConsentView.as_view(), name="authorize"),
    path("oauth/token/", toolkit.TokenView.as_view(), name="token"),
    path("oauth/revoke/", toolkit.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", RegistrationView.as_view(), name="dcr-register"),
    path("oauth/register/<str:client_id>/", RegistrationManagementView.as_view(), name="dcr-register-management"),
]
