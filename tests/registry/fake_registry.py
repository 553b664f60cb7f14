"""A registry that speaks just enough of the OCI distribution API to serve one
component, and misbehaves as it is told: the tests' hostile registry.

    python3 fake_registry.py PORT_FILE WASM MODE

MODE is one of:
  bearer        every request needs a bearer token from /token (asked with Basic alice:s3cret)
  redirect      blobs answer 307 to /storage/<digest>, which serves them without auth
  huge-manifest the manifest is 5 MiB of JSON
  long-blob     the blob carries more bytes than its descriptor says
The port it listens on (127.0.0.1) is written to PORT_FILE.
"""

import base64
import hashlib
import http.server
import json
import os
import sys

port_file, wasm_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
wasm = open(wasm_path, "rb").read()
layer = "sha256:" + hashlib.sha256(wasm).hexdigest()
config = json.dumps({"created": "2026-01-01T00:00:00Z", "architecture": "wasm", "os": "wasip2",
                     "layerDigests": [layer]}).encode()
config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
manifest = json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": config_digest,
               "size": len(config)},
    "layers": [{"mediaType": "application/wasm", "digest": layer, "size": len(wasm)}],
}).encode()
TOKEN = "tok-123"
BASIC = "Basic " + base64.b64encode(b"alice:s3cret").decode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if mode != "bearer" or self.path.startswith("/token"):
            return True
        if self.headers.get("Authorization") == "Bearer " + TOKEN:
            return True
        realm = "http://127.0.0.1:%d/token" % self.server.server_port
        self.send(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"token needed"}]}',
                  [("WWW-Authenticate",
                    'Bearer realm="%s",service="fake",scope="repository:team/tool:pull"' % realm)])
        return False

    def do_GET(self):
        if not self.authorized():
            return
        path = self.path
        if path.startswith("/token"):
            if self.headers.get("Authorization") != BASIC or "scope=repository%3Ateam%2Ftool%3Apull" not in path:
                return self.send(401, b"{}")
            return self.send(200, json.dumps({"token": TOKEN}).encode())
        if path == "/v2/":
            return self.send(200, b"{}")
        if path.startswith("/v2/team/tool/manifests/"):
            body = manifest
            if mode == "huge-manifest":
                body = b'{"schemaVersion":2,"pad":"' + b"x" * (5 * 1024 * 1024) + b'"}'
            return self.send(200, body, [("Content-Type", "application/vnd.oci.image.manifest.v1+json")])
        if path == "/v2/team/tool/blobs/" + layer:
            if mode == "redirect":
                return self.send(307, b"", [("Location", "/storage/" + layer)])
            if mode == "long-blob":
                return self.send(200, wasm + b"\0" * 1024)
            return self.send(200, wasm)
        if path == "/storage/" + layer and mode == "redirect":
            if self.headers.get("Authorization"):
                return self.send(400, b"credentials sent to storage")
            return self.send(200, wasm)
        self.send(404, b'{"errors":[{"code":"NAME_UNKNOWN","message":"unknown"}]}')


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_port))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
