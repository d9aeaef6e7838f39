"""The Django settings of the test provider; its directory comes from ``OIDC_SITE_DIRECTORY``."""

from __future__ import annotations

import os
from pathlib import Path

DIRECTORY = Path(os.environ["OIDC_SITE_DIRECTORY"])
SECRET_KEY = (DIRECTORY / "django-secret").read_text().strip()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SITE_URL = os.environ["OIDC_SITE_URL"]
ROOT_URLCONF = "oidc_site.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [str(Path(__file__).parent / "templates")],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(DIRECTORY / "provider.db")}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# Fast password hashing: these are test users.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OIDC_IDTOKEN_INCLUDE_CLAIMS = True
OIDC_EXTRA_SCOPE_CLAIMS = "oidc_site.claims.GroupsScopeClaims"
OIDC_USERINFO = "oidc_site.claims.userinfo"
LOGGING = {"version": 1, "disable_existing_loggers": False}
