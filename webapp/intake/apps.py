from django.apps import AppConfig


class IntakeConfig(AppConfig):
    """Who owns each run (RunClaim), and the HTTP intake that write tokens publish through."""

    name = "webapp.intake"
    label = "intake"
    verbose_name = "HTTP telemetry intake"

    def ready(self):
        from webapp.accounts.models import SCOPE_CHECKS
        from webapp.intake.models import RunClaim

        if RunClaim.refusal not in SCOPE_CHECKS:
            SCOPE_CHECKS.append(RunClaim.refusal)
