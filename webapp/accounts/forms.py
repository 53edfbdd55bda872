"""Sign-up and profile forms (Django's own auth forms cover log-in and password reset)."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

from webapp.accounts.models import Profile


class SignupForm(UserCreationForm):
    email = forms.EmailField(help_text="We send a confirmation link here; it is never shown publicly.")
    display_name = forms.CharField(max_length=80, required=False, help_text="Shown on your annotations.")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self):
        email = self.cleaned_data["email"].strip().lower()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this email address exists; reset its password instead.")
        return email


class ProfileForm(forms.ModelForm):
    class Meta:
        model = Profile
        fields = ("display_name",)
