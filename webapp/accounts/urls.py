from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.accounts import views
from webapp.accounts.permissions import declare


def _auth(view_class):
    """Django's own auth views, declared in the matrix as `account.auth` (open to everyone)."""
    return declare("account.auth", view_class.as_view())


urlpatterns = [
    path("accounts/signup/", views.signup, name="account-signup"),
    path("accounts/confirm/<str:uidb64>/<str:token>/", views.confirm, name="account-confirm"),
    path("accounts/profile/", views.profile, name="account-profile"),
    path("accounts/tokens/", views.token_create, name="account-token-create"),
    path("accounts/tokens/<int:token_id>/revoke/", views.token_revoke, name="account-token-revoke"),
    path("accounts/login/", _auth(views.RateLimitedLoginView), name="login"),
    path("accounts/logout/", _auth(auth_views.LogoutView), name="logout"),
    path("accounts/password_reset/", _auth(views.RateLimitedPasswordResetView), name="password_reset"),
    path("accounts/password_reset/done/", _auth(auth_views.PasswordResetDoneView), name="password_reset_done"),
    path("accounts/reset/<uidb64>/<token>/", _auth(auth_views.PasswordResetConfirmView),
         name="password_reset_confirm"),
    path("accounts/reset/done/", _auth(auth_views.PasswordResetCompleteView), name="password_reset_complete"),
]
