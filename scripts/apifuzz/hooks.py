"""Schemathesis hooks of `make fuzz-api` (scripts/apifuzz/run.sh).

run.sh loads this file through SCHEMATHESIS_HOOKS and sets APIFUZZ_COLLECTION,
the name of the collection it indexed before the run. The hooks:

- send the upsert route's application/x-ndjson bodies (Schemathesis has no
  serializer for that media type);
- make the served spec require a key, as the server under test does;
- keep Schemathesis from dropping the indexed collection;
- drop the failures that are false positives of a check (filter_failure;
  Schemathesis's summary counts them as "dropped by filter_failure"): a
  schema-valid request refused for naming what this server or collection
  does not have, for a limit set by a flag, or for a restore's body that
  is not a whole backup (NOT_IN_SPEC); a cancelled task read after the
  DELETE that cancelled it; and the kinds of invalid upsert body that the
  server does refuse, though not with a 4xx (in a 200's errors, or in the
  errors of the task a 202 names). docs/apifuzz.md lists them with the
  reasons.

Nothing here disables a check: every check runs on every operation.
"""

import json
import os
import re
import time
import urllib.parse
import urllib.request

import schemathesis
from schemathesis.core.parameters import ParameterLocation

NDJSON = "application/x-ndjson"
COLLECTION = os.environ.get("APIFUZZ_COLLECTION", "")
UPSERT = ("POST", "/v1/collections/{name}/documents")
DROP = ("DELETE", "/v1/collections/{name}")
TASK = ("GET", "/v1/tasks/{id}")


@schemathesis.serializer(NDJSON)
def ndjson(ctx, value):
    """The body of an NDJSON upsert, as bytes.

    The spec declares the body a string: the NDJSON text itself, sent as
    it is. A body of another JSON type (negative generation) goes out as
    NDJSON too: an array as one line per element, anything else as one line.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    items = value if isinstance(value, list) else [value]
    return "".join(json.dumps(item) + "\n" for item in items).encode("utf-8", "surrogatepass")


@schemathesis.hook
def before_load_schema(context, raw_schema):
    """Require a key on every operation that takes one.

    The served spec lists {} (no credential) beside the bearer and
    X-API-Key schemes, because a server started without keys (loopback
    only) needs none. Schemathesis then takes authentication as optional
    and its ignored_auth check skips every operation. The server under
    test has a key, so the harness drops the {} alternative: ignored_auth
    then sends each operation without the key and with a wrong one and
    expects a refusal. Operations whose own security is [] (/healthz,
    /readyz, the page) stay open.
    """
    security = raw_schema.get("security")
    if security:
        raw_schema["security"] = [req for req in security if req]


def _is(case, route):
    return (case.operation.method.upper(), case.operation.path) == route


@schemathesis.hook
def before_call(context, case, kwargs):
    """Keep the indexed collection.

    A drop of the collection run.sh indexed (the stateful phase finds its
    name in GET /v1/collections) is sent to a name that does not exist, so
    that the searches of the rest of the run still have a real collection.
    Other collections, the fuzzer's own, are dropped as asked.
    """
    if COLLECTION and _is(case, DROP) and (case.path_parameters or {}).get("name") == COLLECTION:
        case.path_parameters["name"] = COLLECTION + "-kept"


# The refusals that positive_data_acceptance (ST202) takes for failures
# although the spec cannot describe them: a JSON Schema states the shape of
# a value, not whether it names something that exists on this server or in
# this collection, nor a limit the operator configures, nor (in OpenAPI
# 3.0) a rule that relates array items or query parameters to each other,
# nor a checksum over a body.
# Each is (the server's error code, a regular expression its message
# matches, the reason, the operation it is limited to or None for any). A
# schema-valid request refused for any other cause stays a failure.
# docs/apifuzz.md lists them too.
SEARCH_GET = ("GET", "/v1/collections/{name}/search")
RESTORE = ("POST", "/v1/collections/{name}/restore")
NOT_IN_SPEC = [
    ("k_too_large", r"over the limit of \d+ \(--max-k\)",
     "k + offset over --max-k: a limit on a sum, set by a flag", None),
    ("unknown_retriever", r"this collection has: ",
     "a retriever (mode, retrievers) this collection does not have", None),
    ("bad_request", r"query vectors for .*: the collection has no such model",
     "query vectors for a model this collection does not have", None),
    ("bad_request", r"fields: field .*: tandem: unknown field",
     "BM25 fields this collection's schema does not have", None),
    ("invalid_filter", r": unknown field ",
     "a filter on a field this collection's schema does not have", None),
    ("bad_request", r"text: the collection has no text field for bm25 to search",
     "text for bm25 in a collection whose schema has no text field (one the fuzzer made)", None),
    ("bad_request", r"(depth|weight) given for .*, which is not among the retrievers",
     "a depth or weight for a retriever the search does not use", None),
    ("bad_request", r"needs text or a query vector \(bm25 alone ranks a filter's documents\)",
     "a dense or late retriever with neither text nor a query vector: a rule across fields that depends on the retrievers", None),
    ("bad_model", r"is not installed on this server \(installed: ",
     "a model that is not installed on this server", None),
    ("bad_request", r"^give mode or retrievers, not both$",
     "mode and retrievers together in a GET: a rule across two query parameters, which OpenAPI cannot state (the POST body's schema states it with not)",
     SEARCH_GET),
    ("bad_schema", r"^schema field .*: declared twice$",
     "a field declared twice: unique names across the items of an array, which OpenAPI 3.0 cannot state", None),
    ("bad_schema", r"^schema field .*: is the id field$",
     "a field named as the schema's id_field: equality between two members, which OpenAPI cannot state", None),
    ("bad_schema", r"^schema model .*: listed twice$",
     "a model listed twice: unique names across the items of an array", None),
    ("bad_request", r"(late_index|late-interaction index) \".*\": ",
     "a late_index FAISS cannot build: its index descriptions are a grammar of FAISS's own, and what it builds depends on the library and the dimension", None),
    ("bad_request", r"facets\[\d+\] \(field .*\): ",
     "a facet on a field this collection's schema does not have, or whose kind (values, ranges, histogram) or range bounds do not suit the field's type, or whose histogram would pass the bucket limit on this collection's values: names and types of the schema, rules across a facet's members, and a bound that depends on the data", None),
    ("bad_parameter", r"^parameter facet=",
     "a facet parameter's text form (engine.ParseFacet: FIELD[:option,...]), a grammar the spec states in words", SEARCH_GET),
    ("bad_schema", r"(?s)^schema model .*: late_index \".*\": ",
     "a schema model's late_index FAISS cannot build (checked with the schema since the create checks analyzers and late indexes up front): the same grammar of FAISS's own", None),
    ("bad_backup", r"^engine: bad backup: .*the request body",
     "a restore's body that is not a whole Tandem backup (not one, cut short, or not matching the length and SHA-256 of its trailer): a checksum over the body, which no schema states", RESTORE),
]


def _server_error(response):
    try:
        err = json.loads(response.content)["error"]
        return err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        return None, None


def _not_in_spec(response, case):
    """The reason of NOT_IN_SPEC that a 400 answer is, or None."""
    if response.status_code != 400:
        return None
    code, message = _server_error(response)
    if code is None:
        return None
    route = (case.operation.method.upper(), case.operation.path)
    for c, rx, reason, op in NOT_IN_SPEC:
        if code == c and re.search(rx, message) and op in (None, route):
            return reason
    return None


# The file run.sh names for the record of what filter_failure drops, one
# JSON line per failure (dropped.py counts them by reason).
DROPPED = os.environ.get("APIFUZZ_DROPPED", "")
NDJSON_BODY = "an NDJSON body that is not a string: every body on the wire is text (Schemathesis's own exception for text/plain)"
REFUSED_DOCUMENTS = "an invalid document refused in the answer (200, failed > 0), as the spec documents for upserts"
CANCELLED_TASK = "a task read after DELETE /v1/tasks/{id}: the DELETE cancels the task, which stays readable as cancelled, as the spec says (finished tasks are kept)"
REFUSED_IN_TASK = "an invalid document refused in its task (202, then the task succeeded with refused > 0), as the spec documents for upserts that run as tasks"
# The admin key run.sh made, to follow a task; and how long a task may
# take to end (tasks run one at a time, each document encoded by the model).
KEY = os.environ.get("APIFUZZ_KEY", "")
TASK_WAIT = float(os.environ.get("APIFUZZ_TASK_WAIT", "120"))


def _drop(failure, case, reason):
    """Record a dropped failure; returns False, filter_failure's 'drop'."""
    if DROPPED:
        line = json.dumps({"check": failure.code, "operation": f"{case.operation.method.upper()} {case.operation.path}", "reason": reason})
        with open(DROPPED, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return False


def _upsert_result(response):
    """The answer's JSON object (an upsert's result, or a task), or None."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _ended_task(response):
    """The task a 202 upsert answer names, once it has ended; None when it
    cannot be followed (no task, no Location, a failed request) or has not
    ended within TASK_WAIT seconds."""
    body = _upsert_result(response)
    location = (response.headers.get("location") or [None])[0]
    if body is None or not isinstance(body.get("id"), int) or not location:
        return None
    url = urllib.parse.urljoin(response.request.url, location)
    headers = {"Accept": "application/json"}
    if KEY:
        headers["Authorization"] = "Bearer " + KEY
    deadline = time.monotonic() + TASK_WAIT
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
                task = json.loads(answer.read())
        except (OSError, ValueError):  # urllib's errors are OSErrors
            return None
        if not isinstance(task, dict):
            return None
        if task.get("state") in ("succeeded", "failed", "cancelled"):
            return task
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Drop the false positives of positive_data_acceptance (ST202) listed in
    NOT_IN_SPEC, of use_after_free (ST301) on a cancelled task (DELETE
    /v1/tasks/{id} cancels a task, which the spec says stays readable), and
    two of negative_data_rejection (ST201) on the upsert route; keep every
    other failure. The two ST201 ones concern a request
    whose only invalid part is its body (an undeclared query parameter,
    which the server ignores as Schemathesis expects, does not count; a
    wait other than true or false does).

    1. An NDJSON body whose only negative part is the body. The spec's
       schema of that body is "a string" (the NDJSON text), and every body
       on the wire is text, so a "non-string" body cannot be sent: the
       serializer turns it into NDJSON lines, which are a string. This is
       what Schemathesis itself does for text/plain.
    2. A body whose invalid documents the server refused one by one: 200
       with "failed" > 0, or 202 with a task (wait=false, or a body over
       --async-above) that then succeeds with "refused" > 0. The spec
       documents that each document of an upsert is checked on its own,
       the good ones stored and the bad ones reported with their line, so
       a bad document is refused in the answer's or the task's errors, not
       with a 4xx. An invalid body accepted with nothing refused (or whose
       task does not end within APIFUZZ_TASK_WAIT seconds) stays a failure.
    """
    if failure.code == "ST202":
        reason = _not_in_spec(response, case)
        return True if reason is None else _drop(failure, case, reason)
    if failure.code == "ST301" and _is(case, TASK):
        task = _upsert_result(response) if response.status_code == 200 else None
        return _drop(failure, case, CANCELLED_TASK) if task is not None and task.get("state") == "cancelled" else True
    if failure.code != "ST201" or not _is(case, UPSERT):
        return True
    meta = case.meta
    if meta is None or not meta.is_negative_at(ParameterLocation.BODY):
        return True
    if meta.is_negative_at(ParameterLocation.PATH) or (case.query or {}).get("wait", "true") not in ("true", "false"):
        return True  # something besides the body is wrong too: the server must refuse it
    if case.media_type == NDJSON:
        return _drop(failure, case, NDJSON_BODY)
    if response.status_code == 200:
        result = _upsert_result(response)
        if result is not None and isinstance(result.get("failed"), int) and result["failed"] > 0:
            return _drop(failure, case, REFUSED_DOCUMENTS)
    elif response.status_code == 202:
        task = _ended_task(response)
        if task is not None and task.get("state") == "succeeded" and isinstance(task.get("refused"), int) and task["refused"] > 0:
            return _drop(failure, case, REFUSED_IN_TASK)
    return True
