"""Errors the trainer's entry points turn into exit statuses."""


class ConfigError(ValueError):
    """A bad config value. `key` is the dotted path of the offending field (e.g. `model.moe.top_k`).

    Entry points print `config error: <key>: <message>` on one line and exit with status 2.
    """

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
