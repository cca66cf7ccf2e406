from django.contrib.auth import views as auth_views
from django.urls import include, path

from authserver.login import DeviceAuthorizationView

urlpatterns = [
    # Before DOT's own route, so the patched view answers.
    path("o/device-authorization/", DeviceAuthorizationView.as_view()),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view()),
]
