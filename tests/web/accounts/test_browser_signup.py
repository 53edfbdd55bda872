"""In Chromium against a real uvicorn: sign up, confirm by the emailed link, log in, see it, log out."""

from __future__ import annotations

import re

import pytest

from ..servers import free_port, sign_up, start_web, stop, wait_for, wait_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_sign_up_confirm_by_email_log_in_and_out(live_env, new_page, tmp_path):
    mail_dir = tmp_path / "mail"
    env = {**live_env, "OBS_EMAIL_DIR": str(mail_dir)}
    port = free_port()
    web = start_web(port, env)
    try:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        page = new_page()
        errors = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        sign_up(page, base, "ada", "ada@example.org", "Ada L.", "an unguessable passphrase 42")

        def emailed_link():
            for f in mail_dir.glob("*.log") if mail_dir.exists() else ():
                m = re.search(r"http://\S+/accounts/confirm/\S+", f.read_text())
                if m:
                    return m.group(0)
            return None

        link = wait_for(emailed_link, 30, "the confirmation email to be written")
        page.goto(link)
        page.wait_for_selector("text=Your email address is confirmed")
        page.fill("#id_username", "ada")
        page.fill("#id_password", "an unguessable passphrase 42")
        page.click("form:not(.inline) button[type=submit]")
        signed_in = page.wait_for_selector("[data-testid=signed-in-as]")
        assert signed_in.inner_text() == "Ada L."
        page.click("text=Log out")
        page.wait_for_selector("header >> text=Log in")
        assert page.query_selector("[data-testid=signed-in-as]") is None
        assert errors == []
        csp = page.request.get(f"{base}/").headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp
    finally:
        stop(web)
