"""The image's web process (deploy/Dockerfile's CMD): uvicorn as `make run` starts it (deploy/run_local.py's
web_command, one list of flags for both), reading proxy headers only from OBS_TRUSTED_PROXIES."""

from __future__ import annotations

import argparse
import os
import sys

from run_local import ROOT, web_command  # deploy/ is this script's directory, first on sys.path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args()
    try:
        argv = web_command(args.host, args.port, "uvicorn")
    except ValueError as e:
        print(f"[observatory] {e}", file=sys.stderr, flush=True)
        return 2
    os.chdir(ROOT)
    os.execv(argv[0], argv)  # uvicorn becomes this process: the container's signals reach it


if __name__ == "__main__":
    sys.exit(main())
