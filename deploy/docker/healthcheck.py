"""The image's HEALTHCHECK: ``/healthz`` of the daemon in this container, 0 when it says 200.

Environment (set with ``docker run -e`` or compose, no rebuild needed):

* ``MONITOR_HEALTHZ_URL``: default ``http://127.0.0.1:9464/healthz``; set it when ``[server]
  listen`` (or ``--web.listen-address``) uses another port, and to ``https://...`` when the web
  config turns TLS on.
* ``MONITOR_HEALTHZ_CAFILE``: the CA that signed the daemon's certificate (a self-signed one is
  its own); the host name is not checked, as the probe connects to the loopback address.
* ``MONITOR_HEALTHZ_AUTHORIZATION``: the ``Authorization`` header's value when the web config
  sets basic auth (``Basic <base64 of user:password>``).

Only the standard library: it runs in the image's Python beside the daemon, in a second.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:9464/healthz"


def main() -> int:
    url = os.environ.get("MONITOR_HEALTHZ_URL") or DEFAULT_URL
    headers = {}
    if auth := os.environ.get("MONITOR_HEALTHZ_AUTHORIZATION"):
        headers["Authorization"] = auth
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=os.environ.get("MONITOR_HEALTHZ_CAFILE"))
        context.check_hostname = False  # the loopback address, not the certificate's name
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=4) as resp:
            ok = resp.status == 200
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
