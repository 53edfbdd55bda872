"""The wire contract between the training worker and the web: Redis keys, messages, commands, metric names.

Both sides import this package and nothing else of each other. It is pure: no I/O library, no framework.

    keys      Redis key names, consumer groups, TTLs
    messages  telemetry stream entries: schema version, kinds, encoding, validation, dead letters
    commands  operator commands: the schema (names, arguments, ranges), validation, command and ack entries
    metrics   the metric-name registry
    intake    the HTTP intake: path, limits and body of a telemetry POST (for loops without Redis access)
"""

from observatory.contract.commands import *  # noqa: F401,F403
from observatory.contract.commands import __all__ as _commands_all
from observatory.contract.intake import *  # noqa: F401,F403
from observatory.contract.intake import __all__ as _intake_all
from observatory.contract.keys import *  # noqa: F401,F403
from observatory.contract.keys import __all__ as _keys_all
from observatory.contract.messages import *  # noqa: F401,F403
from observatory.contract.messages import __all__ as _messages_all
from observatory.contract.metrics import *  # noqa: F401,F403
from observatory.contract.metrics import __all__ as _metrics_all

__all__ = [*_keys_all, *_messages_all, *_commands_all, *_metrics_all, *_intake_all]
