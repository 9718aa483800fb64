"""A small OTLP/HTTP trace receiver for the tracing tests (tests/it/traces.rs).

Decodes each `POST /v1/traces` (protobuf `ExportTraceServiceRequest`, with the PyPI
`opentelemetry-proto` package's generated classes) and appends one JSON line per span to the
file given: trace and span ids (hex), the parent's, name, kind, status, attributes (plain
values; arrays as lists) and the resource's attributes.

    otlp_receiver.py OUT.jsonl [--hang]

Prints `listening PORT` once it listens on 127.0.0.1. With `--hang` it reads each request and
never answers (a collector that is stuck): the exporter's deadline is what ends the call.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]
HANG = "--hang" in sys.argv[2:]
LOCK = threading.Lock()
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which) if which else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if HANG:
            threading.Event().wait()
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        lines = []
        for rs in req.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(
                        json.dumps(
                            {
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent_span_id": s.parent_span_id.hex(),
                                "name": s.name,
                                "kind": KINDS.get(s.kind, str(s.kind)),
                                "status": s.status.code,
                                "attributes": attrs(s.attributes),
                                "resource": resource,
                                "scope": ss.scope.name,
                                "auth": self.headers.get("x-test-auth"),
                            }
                        )
                    )
        with LOCK, open(OUT, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
