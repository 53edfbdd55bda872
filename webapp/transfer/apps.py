from django.apps import AppConfig


class TransferConfig(AppConfig):
    """Runs in and out: W&B and TensorBoard import, W&B export (their commands), CSV/JSON/Parquet series exports."""

    name = "webapp.transfer"
    label = "transfer"
