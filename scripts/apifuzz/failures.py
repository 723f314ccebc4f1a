"""The distinct failures of a Schemathesis run, from its event stream.

Usage: python failures.py EVENTS.ndjson BASE_URL KEY

Schemathesis's own summary counts failures by check and operation. This
groups every failing check of the run by operation, check, status and the
server's error code and message (numbers and quoted values blanked), so
that one cause shows once however often the fuzzer hit it, and prints each
group with its count and a curl command that sends the first request that
showed it, byte for byte ($URL and $KEY stand for the server's address and
admin key; docs/apifuzz.md says how to start one as the run did). Prints
nothing when the run had no failure. Used by run.sh, which keeps the output
in failures.md.
"""

import base64
import json
import re
import sys


def decode(body):
    if body is None:
        return b""
    if isinstance(body, dict) and "$base64" in body:
        return base64.b64decode(body["$base64"])
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def shell_bytes(data):
    """A bash $'...' word that stands for exactly these bytes."""
    out = []
    for b in data:
        c = chr(b)
        if c in "\\'":
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        elif c == "\n":
            out.append("\\n")
        else:
            out.append("\\x%02x" % b)
    return "$'" + "".join(out) + "'"


def shell_word(s):
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]*", s) and s:
        return s
    return shell_bytes(s.encode("utf-8", "surrogatepass"))


def curl(request, base, key):
    uri = request["uri"]
    if uri.startswith(base):
        uri = "$URL" + uri[len(base):]
    words = ["curl", "-sS", "-X", request["method"]]
    for name, values in (request.get("headers") or {}).items():
        for value in values if isinstance(values, list) else [values]:
            value = value.replace(key, "$KEY") if len(key) >= 16 else value
            words += ["-H", '"%s: %s"' % (name, value) if "$KEY" in value else shell_word("%s: %s" % (name, value))]
    body = decode(request.get("body"))
    if body:
        words += ["--data-binary", shell_bytes(body)]
    words.append('"%s"' % uri if uri.startswith("$URL") else shell_word(uri))
    return " ".join(words)


def server_error(response):
    try:
        doc = json.loads(decode(response.get("content") or response.get("body")))
        err = doc["error"]
    except (ValueError, KeyError, TypeError):
        return "", ""
    if not isinstance(err, dict):
        return "", ""  # not an API error: a task's own "error", a string
    return str(err.get("code", "")), str(err.get("message", ""))


def blank(message):
    """The message without the values that vary from one request to the
    next: quoted text, lists, parentheses, the field or filter path before
    a colon, and numbers."""
    message = re.sub(r'"(?:[^"\\]|\\.)*"', '"…"', message)
    message = re.sub(r"'(?:[^'\\]|\\.)*'", "'…'", message)
    message = re.sub(r"\[.*\]", "[…]", message)
    message = re.sub(r"\([^)]*\)", "(…)", message)
    message = re.sub(r"^filter: [^:]*:", "filter: …:", message)
    return re.sub(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", "N", message)


def main():
    events, base, key = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
    groups = {}
    with open(events) as f:
        for line in f:
            event = json.loads(line)
            finished = event.get("ScenarioFinished")
            if not finished:
                continue
            recorder = finished.get("recorder") or {}
            interactions = recorder.get("interactions") or {}
            for case_id, checks in (recorder.get("checks") or {}).items():
                for check in checks:
                    info = check.get("failure_info")
                    if not info:
                        continue
                    failure = info["failure"]
                    interaction = interactions.get(case_id) or {}
                    response = interaction.get("response") or {}
                    status = response.get("status_code", "-")
                    code, message = server_error(response)
                    key_ = (failure.get("operation") or recorder.get("label", "?"), failure["code"], check["name"], status, code, blank(message))
                    group = groups.setdefault(key_, {"count": 0, "title": failure.get("title", ""), "message": message,
                                                      "detail": failure.get("message", ""), "request": interaction.get("request"),
                                                      "phase": finished.get("phase")})
                    group["count"] += 1
    if not groups:
        return
    print("Distinct failures: %d (by operation, check, status and the server's error)" % len(groups))
    for i, (k, g) in enumerate(sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])), 1):
        operation, code, check, status, err, _ = k
        print()
        print("%d. %s: %s %s (%s), %s %s, %d time%s, %s phase" % (i, operation, code, g["title"], check, status, err or "",
                                                                  g["count"], "" if g["count"] == 1 else "s", g["phase"]))
        detail = g["detail"].replace("\n", "; ")
        if detail:
            print("   check: " + detail)
        if g["message"]:
            print("   server: " + g["message"][:300])
        if g["request"]:
            print("   " + curl(g["request"], base, key))


if __name__ == "__main__":
    main()
