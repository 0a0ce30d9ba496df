"""Route labels of Supabase's services, by position, from each service's own route table.

Kong mounts the services under ``/rest/v1``, ``/auth/v1``, ``/storage/v1``, ``/realtime/v1``,
``/functions/v1``, ``/graphql/v1``, ``/pg`` and ``/analytics/v1``; each service also logs its own
paths without the mount (Storage's ``/object/...``, GoTrue's ``/token``, PostgREST's ``/notes``).
A path is matched against its service's rules, one segment per position:

- ``a|b`` a fixed word of the route (kept);
- ``{bucket}``, ``{id}``: one segment chosen by a user or the service (replaced);
- ``{name}``: a table, function or edge-function name: kept when it is a plain identifier, else ``{id}``;
- ``{path}``: one or more segments (an object key, anything after an edge function's name), replaced.

A path no rule matches keeps the fixed words it starts with (as far as some rule has them) and
ends in ``{path}``: no segment a user chose reaches a label. Outside the mounts (Kong answering
a scanner) the path is ``route_template``'s, with any segment holding ``@``, ``=``, quotes,
spaces, control or non-ASCII characters made ``{id}``.
"""

from __future__ import annotations

import re

from logmetrics import lazyre

from .common import remember, route_template

Part = frozenset[str] | str  # fixed words, or a placeholder
Rules = tuple[tuple[Part, ...], ...]


def _rules(*specs: str) -> Rules:
    return tuple(tuple(p if p.startswith("{") else frozenset(p.split("|")) for p in s.split("/")) if s else ()
                 for s in specs)


#: supabase/storage ``src/http/routes``: the prefixes ``bucket``, ``object``, ``render/image``,
#: ``upload/resumable`` (TUS), ``s3``, ``cdn``, ``iceberg``, ``vector``; the more specific rule first.
STORAGE_RULES = _rules(
    "bucket", "bucket/{bucket}", "bucket/{bucket}/empty",
    "object/move|copy",
    "object/list|list-v2/{bucket}",
    "object/sign/{bucket}", "object/sign/{bucket}/{path}",
    "object/upload/sign/{bucket}/{path}",
    "object/info/public|authenticated/{bucket}/{path}",
    "object/public|authenticated|info/{bucket}/{path}",
    "object/{bucket}", "object/{bucket}/{path}",
    "render/image/public|authenticated|sign/{bucket}/{path}",
    "upload/resumable", "upload/resumable/sign", "upload/resumable/sign/{path}", "upload/resumable/{path}",
    "s3", "s3/{bucket}", "s3/{bucket}/{path}",
    "cdn/{bucket}/{path}",
    "iceberg/bucket", "iceberg/bucket/{bucket}", "iceberg/v1/config", "iceberg/v1/{bucket}/namespaces",
    "iceberg/v1/{bucket}/namespaces/{id}", "iceberg/v1/{bucket}/namespaces/{id}/tables",
    "iceberg/v1/{bucket}/namespaces/{id}/tables/{id}",
    "vector/CreateIndex|CreateVectorBucket|DeleteIndex|DeleteVectorBucket|DeleteVectors|GetIndex|GetVectorBucket"
    "|GetVectors|ListIndexes|ListVectorBuckets|ListVectors|PutVectors|QueryVectors",
    "health|healthcheck|status|version|metrics",
)
#: supabase/auth ``internal/api/api.go``.
AUTH_RULES = _rules(
    "health|callback|settings|authorize|invite|signup|recover|resend|magiclink|otp|token|verify|logout"
    "|reauthenticate|user|factors|sso|saml|jwks",
    ".well-known/jwks.json|openid-configuration|oauth-authorization-server",
    "user/identities/authorize", "user/identities/{id}", "user/oauth/grants",
    "factors/{id}", "factors/{id}/verify|challenge",
    "sso/saml/metadata|acs",
    "admin/audit|users|generate_link", "admin/users/{id}", "admin/users/{id}/factors",
    "admin/users/{id}/factors/{id}", "admin/sso/providers", "admin/sso/providers/{id}",
    "admin/scim-providers", "admin/scim-providers/{id}", "admin/scim-providers/{id}/rotate-token",
    "admin/oauth/clients", "admin/oauth/clients/{id}", "admin/oauth/clients/{id}/regenerate_secret",
    "scim/v2/ServiceProviderConfig|ResourceTypes|Schemas|Users", "scim/v2/Users/{id}",
    "oauth/clients/register", "oauth/token|authorize", "oauth/authorizations/{id}",
    "oauth/authorizations/{id}/consent",
)
#: PostgREST: the OpenAPI root, ``/<table or view>``, ``/rpc/<function>``.
REST_RULES = _rules("", "rpc/{name}", "{name}")
#: supabase/realtime's Phoenix router.
REALTIME_RULES = _rules(
    "websocket|metrics|healthcheck", "socket/websocket", "api/broadcast|ping|openapi|tenants|health",
    "api/tenants/{id}", "api/tenants/{id}/reload|health")
#: Edge functions: the function's name, anything after it.
FUNCTION_RULES = _rules("{name}", "{name}/{path}")
GRAPHQL_RULES = _rules("")
#: postgres-meta's resources.
PG_RULES = _rules(
    "tables|columns|schemas|roles|functions|extensions|policies|publications|triggers|types|views"
    "|materialized-views|foreign-tables|column-privileges|table-privileges|indexes|config|query|health",
    "tables|columns|schemas|roles|functions|extensions|policies|publications|triggers|types|views"
    "|materialized-views|foreign-tables|column-privileges|table-privileges|indexes/{id}",
    "generators/typescript|go|swift|python", "config/version", "query/format")
#: Logflare's ingest and endpoint API.
ANALYTICS_RULES = _rules("api/logs", "api/endpoints/query/{id}")

MOUNTS: tuple[tuple[str, Rules], ...] = (
    ("/rest/v1", REST_RULES), ("/auth/v1", AUTH_RULES), ("/storage/v1", STORAGE_RULES),
    ("/realtime/v1", REALTIME_RULES), ("/functions/v1", FUNCTION_RULES), ("/graphql/v1", GRAPHQL_RULES),
    ("/pg", PG_RULES), ("/analytics/v1", ANALYTICS_RULES))
_NAME = lazyre.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,62}")
#: A character that never reaches a label: control, space, non-ASCII, ``@``, ``=``, quotes.
UNSAFE = lazyre.compile(r"[^\x21-\x7e]|[@=\"'`<>\\]")
_cache: dict[tuple[str, str], str] = {}
_CACHE_MAX = 4096


def supabase_route(path: str, rules_of: dict[str, Rules] | None = None, component: str = "") -> str:
    """The route label of a request path: under a Kong mount by that service's rules, else by the
    ``component``'s own rules (``rules_of``), else ``route_template`` with unsafe segments ``{id}``."""
    key = (path, component)
    route = _cache.get(key)
    if route is None:
        route = remember(_cache, key, _route(path, (rules_of or {}).get(component)), _CACHE_MAX)
    return route


def _route(path: str, own: Rules | None) -> str:
    raw = re.split(r"[?#]", path, maxsplit=1)[0]
    for mount, rules in MOUNTS:
        if raw == mount or raw.startswith(mount + "/"):
            return mount + _apply(rules, raw[len(mount):])
    if own is not None:
        return _apply(own, raw) or "/"
    route = route_template(path)
    return "/".join("{id}" if UNSAFE.search(s) else s for s in route.split("/"))


def _apply(rules: Rules, rest: str) -> str:
    """``rest`` (``""`` or ``/a/b``) by the first rule that matches it whole, else the fixed start
    some rule shares with it and ``{path}``."""
    if rest in ("", "/"):
        return rest
    segs = rest[1:].split("/")
    if segs[-1] == "":
        segs.pop()
    best: list[str] = []
    for rule in rules:
        out, whole = _match(rule, segs)
        if whole:
            return "/" + "/".join(out)
        if len(out) > len(best):
            best = out
    return "/" + "/".join(best if len(best) == len(segs) else [*best, "{path}"])


def _match(rule: tuple[Part, ...], segs: list[str]) -> tuple[list[str], bool]:
    """The labels of ``segs`` under ``rule``, and whether it matches them whole; when it does not,
    the labels of the leading segments it matches."""
    out: list[str] = []
    for i, part in enumerate(rule):
        if i >= len(segs):
            return out, False  # a longer route
        seg = segs[i]
        if part == "{path}":
            return [*out, "{path}"], bool(seg) or i + 1 < len(segs)
        if not seg or (isinstance(part, frozenset) and seg not in part):
            return out, False
        if isinstance(part, frozenset):
            out.append(seg)
        elif part == "{name}":
            out.append(seg if _NAME.fullmatch(seg) and route_template("/" + seg) == "/" + seg else "{id}")
        else:
            out.append(part)
    return out, len(out) == len(segs)
