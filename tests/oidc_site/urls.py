"""The test provider's routes: its login form, and django-oidc-provider's endpoints at the root."""

from __future__ import annotations

from django.contrib.auth.views import LoginView
from django.urls import include, path

urlpatterns = [
    path("accounts/login/", LoginView.as_view(template_name="login.html"), name="login"),
    path("", include("oidc_provider.urls", namespace="oidc_provider")),
]
