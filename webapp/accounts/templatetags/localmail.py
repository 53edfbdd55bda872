"""`{% local_mail_dir %}`: where a development site writes its mail (file backend), for "check your email" pages."""

from pathlib import Path

from django import template
from django.conf import settings

register = template.Library()

FILE_BACKEND = "django.core.mail.backends.filebased.EmailBackend"


@register.simple_tag
def local_mail_dir() -> str:
    """The mail folder, relative to the checkout when inside it (`var/mail`); '' unless debug writes mail to files
    (a public site does not show its folders)."""
    if not settings.DEBUG or settings.EMAIL_BACKEND != FILE_BACKEND:
        return ""
    folder = Path(settings.EMAIL_FILE_PATH)
    return str(folder.relative_to(settings.BASE_DIR)) if folder.is_relative_to(settings.BASE_DIR) else str(folder)
