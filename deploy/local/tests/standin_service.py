"""A stand-in for a KnowSphere service, run by the launcher tests instead of ``python -m knowsphere_<name>``.

``standin_service.py NAME [options]`` serves ``grpc.health.v1`` (service "" SERVING) on
``KS_<NAME>_GRPC_HOST:KS_<NAME>_GRPC_PORT`` and, when ``KS_<NAME>_HTTP_PORT`` is set (the gateway),
``GET /healthz`` on that port. It writes the wiring it received (``KS_*``, ``OTEL_SERVICE_NAME``,
``MASTER_KEY``) and its pid to ``$KS_<NAME>_DATA_DIR/standin-<NAME>.json``. Its health service also
answers SERVING for ``instance/<name of its data dir>`` (``conversation-2``), so a test tells which
replica a call reached.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


class _Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _event(path: str | None, text: str) -> None:
    if path:
        with open(path, "a") as out:
            out.write(f"{text}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument(
        "--no-grpc", action="store_true", help="serve nothing (a worker, or a broken service)"
    )
    parser.add_argument("--serve-after", type=float, default=0.0, help="seconds before serving")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (forces SIGKILL)")
    parser.add_argument("--spawn-grandchild", help="start `sleep` as a child and write its pid to this file")
    parser.add_argument("--events", help="append 'start|serving|stop NAME' lines to this file")
    args = parser.parse_args()

    prefix = f"KS_{args.name.upper()}_"
    print(f"stand-in {args.name} starting, pid {os.getpid()}", flush=True)
    data_dir = os.environ.get(f"{prefix}DATA_DIR")
    if data_dir:
        wiring = {
            k: v
            for k, v in os.environ.items()
            if k.startswith("KS_") or k in ("OTEL_SERVICE_NAME", "MASTER_KEY")
        }
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        Path(data_dir, f"standin-{args.name}.json").write_text(
            json.dumps({"pid": os.getpid(), "env": wiring})
        )

    stop = threading.Event()

    def on_term(_signum: int, _frame: object) -> None:
        _event(args.events, f"stop {args.name}")
        stop.set()

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else on_term)
    _event(args.events, f"start {args.name}")

    if args.spawn_grandchild:
        child = subprocess.Popen(["sleep", "600"])
        Path(args.spawn_grandchild).write_text(str(child.pid))

    time.sleep(args.serve_after)
    server = None
    if not args.no_grpc:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        servicer = health.HealthServicer()
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        if data_dir:
            servicer.set(f"instance/{Path(data_dir).name}", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        host = os.environ.get(f"{prefix}GRPC_HOST", "127.0.0.1")
        server.add_insecure_port(f"{host}:{os.environ[f'{prefix}GRPC_PORT']}")
        server.start()
    http_port = os.environ.get(f"{prefix}HTTP_PORT")
    if http_port and not args.no_grpc:
        httpd = ThreadingHTTPServer(
            (os.environ.get(f"{prefix}HTTP_HOST", "127.0.0.1"), int(http_port)), _Healthz
        )
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(f"stand-in {args.name} serving", flush=True)
    _event(args.events, f"serving {args.name}")
    while not stop.wait(0.2):
        pass
    if server is not None:
        server.stop(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
