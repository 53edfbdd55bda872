"""Sign up, confirm the email address, the profile page and its write tokens; log-in, log-out and password reset
are Django's."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView, PasswordResetView
from django.core.mail import send_mail
from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.encoding import force_bytes, force_str
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode
from django.views.decorators.http import require_http_methods
from django_ratelimit.decorators import ratelimit

from observatory import contract

from webapp.accounts import roles
from webapp.accounts.forms import ProfileForm, SignupForm, WriteTokenForm
from webapp.accounts.models import Profile, WriteToken
from webapp.accounts.permissions import can, requires
from webapp.accounts.tokens import confirmation_token
from webapp.public import absolute

WRITE_RATE = "10/m"  # per client address, on every account write (sign-up, log-in, reset, profile)


def _send_confirmation(request, user) -> None:
    link = absolute(request, reverse("account-confirm", kwargs={
        "uidb64": urlsafe_base64_encode(force_bytes(user.pk)), "token": confirmation_token.make_token(user)}))
    body = render_to_string("accounts/confirm_email.txt", {"user": user, "link": link})
    send_mail("Confirm your Observatory account", body, None, [user.email])


@requires("account.auth")
@require_http_methods(["GET", "POST"])
@ratelimit(key="ip", rate=WRITE_RATE, method="POST", block=True)
def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = form.save(commit=False)
            user.is_active = False  # until the emailed link is followed
            user.save()
            Profile.objects.create(user=user, display_name=form.cleaned_data["display_name"])
            roles.grant(user, roles.MEMBER)
        _send_confirmation(request, user)
        return render(request, "accounts/signup_sent.html", {"email": user.email})
    return render(request, "accounts/signup.html", {"form": form})


@requires("account.auth")
@require_http_methods(["GET"])
def confirm(request, uidb64: str, token: str):
    User = get_user_model()
    try:
        user = User.objects.get(pk=force_str(urlsafe_base64_decode(uidb64)))
    except (User.DoesNotExist, ValueError, TypeError, OverflowError):
        user = None
    if user is None or not confirmation_token.check_token(user, token):
        return render(request, "accounts/confirm_invalid.html", status=400)
    user.is_active = True
    user.save(update_fields=["is_active"])
    profile = Profile.of(user)
    profile.email_confirmed_at = timezone.now()
    profile.save(update_fields=["email_confirmed_at"])
    messages.success(request, "Your email address is confirmed. You can log in now.")
    return redirect("login")


@requires("account.profile")
@require_http_methods(["GET", "POST"])
@ratelimit(key="user_or_ip", rate=WRITE_RATE, method="POST", block=True)
def profile(request):
    prof = Profile.of(request.user)
    form = ProfileForm(request.POST or None, instance=prof)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Profile saved.")
        return redirect("account-profile")
    return _profile_page(request, form=form)


def _profile_page(request, status: int = 200, **context):
    user = request.user
    prof = Profile.of(user)
    may_publish = can(user, "run.publish")
    prefix = re.sub(f"[^{contract.RUN_ID_CHARS}]+", "-", user.get_username()).strip("-_.")
    return render(request, "accounts/profile.html", {
        "form": ProfileForm(instance=prof), "profile": prof, "roles": sorted(roles.roles_of(user)),
        "may_publish": may_publish, "tokens": user.write_tokens.all()[:50] if may_publish else [],
        "token_form": WriteTokenForm(initial={"scope": f"{prefix}-*" if prefix else ""}), **context}, status=status)


@requires("run.publish")
@require_http_methods(["POST"])
@ratelimit(key="user_or_ip", rate=WRITE_RATE, block=True)
def token_create(request):
    """Make a write token; the page shows its secret this once (only its hash is kept)."""
    form = WriteTokenForm(request.POST)
    if not form.is_valid():
        return _profile_page(request, status=400, token_form=form)
    try:
        token, secret = WriteToken.issue(request.user, form.cleaned_data["label"], form.cleaned_data["scope"])
    except ValueError as e:  # a run someone else owns (the trainer's, another user's)
        form.add_error("scope", str(e))
        return _profile_page(request, status=400, token_form=form)
    resp = _profile_page(request, status=201, new_token=token, new_secret=secret)
    resp["Cache-Control"] = "no-store"  # the one page that holds the secret must not be cached anywhere
    return resp


@requires("account.profile")
@require_http_methods(["POST"])
@ratelimit(key="user_or_ip", rate=WRITE_RATE, block=True)
def token_revoke(request, token_id: int):
    token = get_object_or_404(WriteToken, pk=token_id, user=request.user)  # someone else's token: 404
    token.revoke()
    messages.success(request, f"Token “{token.label}” revoked: it no longer works.")
    return redirect("account-profile")


@method_decorator(ratelimit(key="ip", rate=WRITE_RATE, method="POST", block=True), name="post")
class RateLimitedLoginView(LoginView):
    """Django's log-in; django-axes locks out repeated failures, this caps the request rate on top."""


@method_decorator(ratelimit(key="ip", rate=WRITE_RATE, method="POST", block=True), name="post")
class RateLimitedPasswordResetView(PasswordResetView):
    pass


def rate_limited(request, exception):
    """django-ratelimit's refusal as 429 Too Many Requests (JSON for API clients, text otherwise)."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "too many requests; slow down"}, status=429)
    return HttpResponse("Too many requests; wait a minute and try again.", status=429, content_type="text/plain")
