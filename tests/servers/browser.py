"""A browser for the tests of `bundlectl auth login` (set as $BROWSER, which Python's
`webbrowser` runs): it opens the authorization URL, where the test authorization server grants
at once, and follows its redirect back to bundlectl's loopback callback, as a person's browser
does after they click "allow". `--deny` goes back with `error=access_denied` instead."""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.parse
import urllib.request


class _Stop(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # each hop is taken by hand below


def main() -> None:
    url, deny = sys.argv[-1], "--deny" in sys.argv
    opener = urllib.request.build_opener(_Stop)
    try:
        opener.open(url, timeout=30)
        raise SystemExit("the authorization server did not redirect")
    except urllib.error.HTTPError as exc:
        location = exc.headers["Location"]
    if deny:
        parts = urllib.parse.urlsplit(location)
        state = urllib.parse.parse_qs(parts.query).get("state", [""])[0]
        query = urllib.parse.urlencode({"error": "access_denied", "state": state})
        location = urllib.parse.urlunsplit((*parts[:3], query, ""))
    with contextlib.suppress(urllib.error.HTTPError):  # a refused sign-in's page answers 400
        urllib.request.urlopen(location, timeout=30).read()


if __name__ == "__main__":
    main()
