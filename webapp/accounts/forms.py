"""Sign-up and profile forms (Django's own auth forms cover log-in and password reset)."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

from webapp.accounts.models import Profile, WriteToken


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
        fields = ("display_name", "show_name_publicly")


class WriteTokenForm(forms.Form):
    label = forms.CharField(max_length=80, help_text="What it is for, e.g. “laptop experiments”.")
    scope = forms.CharField(max_length=2000, help_text="Run ids, or prefixes ending in * (alice-*), separated by "
                                                       "commas or spaces: the runs this token may publish to.")

    def clean_scope(self):
        try:
            return WriteToken.parse_scope(self.cleaned_data["scope"])
        except ValueError as e:
            raise forms.ValidationError(str(e)) from None
