"""Structured logs: with OBS_LOG_FORMAT=json every log record is one JSON object per line (time, level, logger,
message, process, and the exception text when there is one), for log shippers."""

from __future__ import annotations

import json
import logging
import os
import socket
import time

_HOST = socket.gethostname()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "host": _HOST, "pid": os.getpid()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)
