"""`python -m api --host H --port P`: serve the app with uvicorn."""

from __future__ import annotations

import argparse
import logging

import uvicorn

LOG_FORMAT = "%(levelname)s:%(name)s: %(message)s"
"""The service's own log lines (warnings and errors) name their level and logger, like
uvicorn's: without a handler, Python's last resort prints the bare message."""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m api", description="Serve Precis.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING)
    uvicorn.run("api.main:app", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
