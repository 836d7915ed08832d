"""One real HTTP server on 127.0.0.1 for the web tool tests: pages (an article among boilerplate, a PDF,
a redirect to a metadata address, a page too large), and search answers in the formats of SearXNG's JSON
API and Tavily's search API. The search answers are hand-written from the providers' documentation,
not recorded. Every request is recorded, so a test can assert that a refused fetch never arrived."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ARTICLE_SENTENCE = "Revenue grew 12 percent in the third quarter, driven by the cloud business in Europe."
PDF_SENTENCE = "Annual leave is 25 days for every employee."
TAVILY_KEY = "tvly-unit-test-key"
HUGE_BYTES = 3 * 1024 * 1024

ARTICLE_HTML = f"""<!doctype html><html><head><title>Example News | Quarterly results</title></head>
<body><nav><a href="/">Home</a> <a href="/about">About us</a> <a href="/jobs">Careers</a></nav>
<aside>Subscribe to our newsletter! Advertisement.</aside>
<article><h1>Quarterly results</h1>
<p>{ARTICLE_SENTENCE}</p>
<p>The company expects growth to continue next year, the chief financial officer said on Tuesday in a
call with analysts, adding that hiring would slow.</p>
<p>Operating margin rose to 31 percent, the highest level since the company listed its shares.</p>
</article>
<footer>Copyright 2026 Example News. Cookie settings. Privacy policy.</footer></body></html>"""


def minimal_pdf(text: str, title: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica and ``title`` in its document information."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        f"<< /Title ({title}) >>".encode(),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 6 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


SEARCH_RESULTS = [
    {"url": "https://example.com/q3", "title": "Q3 results", "content": "Revenue grew 12 percent."},
    {"url": "https://example.org/leave", "title": "Leave policy", "content": "25 days of annual leave."},
    {"url": "https://example.net/margin", "title": "Margins", "content": "Operating margin 31 percent."},
]


@dataclass
class Site:
    port: int = 0
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    """(method, path with query, headers, body) of each request."""

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        return [urlsplit(path).path for _, path, _, _ in self.requests]


def serve(site: Site) -> tuple[ThreadingHTTPServer, threading.Thread]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def _record(self) -> bytes:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            site.requests.append(
                (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            return body

        def do_GET(self) -> None:
            self._record()
            parts = urlsplit(self.path)
            if parts.path == "/article":
                self._answer(200, ARTICLE_HTML.encode(), "text/html; charset=utf-8")
            elif parts.path == "/handbook.pdf":
                self._answer(200, minimal_pdf(PDF_SENTENCE, "Employee handbook"), "application/pdf")
            elif parts.path == "/to-metadata":
                self._answer(302, b"", "text/plain", location="http://169.254.169.254/latest/meta-data/")
            elif parts.path == "/to-private":
                self._answer(301, b"", "text/plain", location="http://10.0.0.7/admin")
            elif parts.path == "/huge":
                self._answer(200, b"<p>" + b"x" * HUGE_BYTES + b"</p>", "text/html")
            elif parts.path == "/missing":
                self._answer(404, b"not here", "text/plain")
            elif parts.path == "/search":  # SearXNG
                query = parse_qs(parts.query)
                if query.get("format") != ["json"]:
                    self._answer(403, b"Forbidden", "text/html")
                    return
                answer = {"query": query["q"][0], "number_of_results": 3, "results": SEARCH_RESULTS}
                self._answer(200, json.dumps(answer).encode(), "application/json")
            else:
                self._answer(404, b"", "text/plain")

        def do_POST(self) -> None:
            body = self._record()
            if urlsplit(self.path).path != "/search":  # Tavily
                self._answer(404, b"", "text/plain")
                return
            if self.headers.get("authorization") != f"Bearer {TAVILY_KEY}":
                self._answer(
                    401,
                    b'{"detail":{"error":"Unauthorized: missing or invalid API key."}}',
                    "application/json",
                )
                return
            request = json.loads(body)
            results = [
                {
                    "title": r["title"],
                    "url": r["url"],
                    "content": r["content"],
                    "score": 0.9,
                    "raw_content": None,
                }
                for r in SEARCH_RESULTS[: request.get("max_results", 5)]
            ]
            answer = {
                "query": request["query"],
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.4,
            }
            self._answer(200, json.dumps(answer).encode(), "application/json")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
