"""Start moto's S3 server (moto[server] 5.2.6) for talosprov's tests, on a loopback
address, with the buckets asked for; then take commands (JSON lines on stdin, answers
on stdout) until stdin closes.

    python moto_launch.py '{"host": "127.0.0.1", "buckets": ["backups"]}'

The first line on stdout is {"url": "http://127.0.0.1:<port>"} once it listens.

Commands (answered {"ok": true, "result": ...}, or {"ok": false, "error": ...}):
- {"fault": {"status": 500, "code": "InternalError"}}: every later request is
  answered with that S3 error until {"fault": null};
- {"objects": "bucket"}: {"objects": {"key": size, ...}} as moto's backend holds them;
- {"get": ["bucket", "key"]}: {"body": "<base64>"};
- {"requests": true}: {"requests": ["PUT /bucket/key", ...]}, every request so far;
- {"uploads": "bucket"}: {"uploads": ["key", ...]}, the multipart uploads in progress.
"""

import base64
import json
import logging
import sys
import threading
import urllib.request

from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

# One line per request on stderr would drown the test's own output.
logging.getLogger("werkzeug").setLevel(logging.ERROR)

FAULT = {"now": None}
SEEN = []
LOCK = threading.Lock()

ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>{message}</Message>"
    "<RequestId>talosprov-test</RequestId></Error>"
)


def with_faults(app):
    """moto's WSGI app, answering with the configured S3 error while one is set."""

    def wrapped(environ, start_response):
        with LOCK:
            SEEN.append(f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO', '')}")
            fault = FAULT["now"]
        if fault:
            body = ERROR_XML.format(
                code=fault.get("code", "InternalError"),
                message=fault.get("message", "injected by the test"),
            ).encode()
            start_response(
                f"{fault['status']} Injected",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            return [body]
        return app(environ, start_response)

    return wrapped


def bucket(name):
    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[name]


def answer(command):
    if "fault" in command:
        with LOCK:
            FAULT["now"] = command["fault"]
        return {"ok": True}
    if "objects" in command:
        keys = bucket(command["objects"]).keys
        return {"objects": {k: len(keys[k].value) for k in keys.keys()}}
    if "get" in command:
        name, key = command["get"]
        return {"body": base64.b64encode(bucket(name).keys[key].value).decode()}
    if "uploads" in command:
        return {"uploads": sorted(m.key_name for m in bucket(command["uploads"]).multiparts.values())}
    if "requests" in command:
        with LOCK:
            return {"requests": list(SEEN)}
    raise ValueError(f"unknown command {command!r}")


def main():
    config = json.loads(sys.argv[1])
    app = with_faults(DomainDispatcherApplication(create_backend_app))
    server = make_server(
        config.get("host", "127.0.0.1"), 0, app, True, request_handler=MotoRequestHandler
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}"
    for name in config.get("buckets", []):
        urllib.request.urlopen(urllib.request.Request(f"{url}/{name}", method="PUT")).read()
    with LOCK:
        SEEN.clear()
    print(json.dumps({"url": url}), flush=True)
    for line in sys.stdin:
        if line.strip():
            try:
                print(json.dumps({"ok": True, "result": answer(json.loads(line))}), flush=True)
            except Exception as e:  # noqa: BLE001: the test reads the reason
                print(json.dumps({"ok": False, "error": repr(e)}), flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
