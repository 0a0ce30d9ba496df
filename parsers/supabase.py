"""Supabase, self-hosted (docker compose or the Bitnami chart): one parser for all its components.

Every event carries the component that wrote the record as its ``backend``: ``supabase-kong``,
``supabase-rest`` (PostgREST), ``supabase-auth`` (GoTrue), ``supabase-storage``, ``supabase-db``
(Postgres), ``supabase-realtime``, ``supabase-analytics`` (Logflare), ``supabase-pooler``
(Supavisor). The component is told from the line's format (``supabase_lines``); records whose
format names none (an Elixir line, a Bitnami line of another module, another logger's JSON) take
the component the stream is named after (a file, container or compose service), else, for Elixir
lines, the service the record names (``supabase_elixir``) or the stream's last one, else Realtime;
else the parser's name, ``supabase``.

Requests (route templates: ``supabase_routes``), errors (one per record, typed by phrase, else by
SQLSTATE class, else by Elixir exception class), start-ups and readiness, and every other
recognised line in ``supabase_log_records_total{level}``: docs/parsers.md, "Supabase", says
which lines give what.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries, record_rule
from logmetrics.records import Record, split_records
from logmetrics.records.shapes import POSTGRES, PRETTY_JSON, Shape
from logmetrics.store.catalog import Family

from . import supabase_elixir as E
from . import supabase_lines as L
from . import supabase_patterns as P
from .common import HTTP_METHODS, OTHER, RouteLabels
from .supabase_routes import AUTH_RULES, REALTIME_RULES, REST_RULES, STORAGE_RULES, Rules, supabase_route

#: Lines that continue the record above: indented lines (a pino-pretty block, a Lua stack), but
#: not a Postgres background process's line, which starts with one space before its date.
INDENTED_NOT_PG = Shape("supabase_indented", lines=r"\t|[ ](?!\d{4}-\d{2}-\d{2} )|stack traceback:")
#: Error types started at 0 per component: those its log can give.
_ZERO_TYPES = {
    P.KONG: ("error", "connection_refused", "timeout", "dns"),
    P.REST: ("error", "connection_refused", "schema_cache", "auth_failed"),
    P.AUTH: ("error", "connection_refused", "migration", "jwt", "dns"),
    P.STORAGE: ("error", "connection_refused", "jwt", "timeout"),
    P.DB: ("error", "auth_failed", "too_many_connections", "deadlock", "connection_refused", "shutdown",
           "disk_full", "oom", "timeout"),
    P.REALTIME: ("error", "connection_refused", "auth_failed", "crash", "timeout"),
    P.ANALYTICS: ("error", "connection_refused", "auth_failed", "crash"),
    P.POOLER: ("error", "connection_refused", "auth_failed", "too_many_connections", "timeout"),
}
_ELIXIR_SERVICES = (P.REALTIME, P.ANALYTICS, P.POOLER)
#: Each component's own routes, for the paths it logs without Kong's mount.
_OWN_ROUTES: dict[str, Rules] = {P.STORAGE: STORAGE_RULES, P.AUTH: AUTH_RULES, P.REST: REST_RULES,
                                 P.REALTIME: REALTIME_RULES}
_SNIFF_STRONG = (
    r"^\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}: |PostgREST|GoTrue|\[POP\] |\"tenantId\":"
    r"|\"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /(?:rest|auth|storage|realtime|functions)/v1/"
    r"|^(?:postgresql|kong|gotrue|postgrest|supabase-[\w-]+) \d{2}:\d{2}:\d{2}\.\d{2} |kong_request_id: "
    r"|\[kong\]|server: kong|\"component\":\"api\",[^\n]*\"msg\":\"request completed\""
    r"|Kernel pid terminated \(application_controller\)|\bSupavisor(?:Web)?\.[A-Z]"
    r"|^supabase-(?:db|kong|rest|auth|storage|realtime|analytics|meta|studio|vector|pooler|imgproxy) +\|"
)
_SNIFF_SOME = (
    r"^(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} (?:\w+=\S+ )*\[(?:debug|info|notice|warning|warn|error)\] "
    r"|^[^\w\n]*(?:\S+ )?\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? [A-Z]{2,5} \[\d+\] (?:\S*@\S* )?[A-Z]+:  "
    r"|^time=\"[^\"]*\" level=\w+ msg=|^\{\"level\":\d\d,\"time\""
    r"|^\[[^\]\n]{8,32}\] (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL) \((?:[^\s/()]+/)?\d+ on [^)\n]+\): "
)
_SNIFF_WEAK = r'^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[\w+\] \d+#\d+: |^\S+ \S+ \S+ \[[^\]]+\] "'


class SupabaseParser(Parser):
    """Supabase's components (Kong, PostgREST, GoTrue, Storage, Postgres, Realtime, Logflare)."""

    name: ClassVar[str] = "supabase"
    claims: ClassVar[tuple[str, ...]] = (
        "supabase-*", "supabase_*", "*/supabase-*", "kong", "kong[-_.]*", "*postgrest*", "*gotrue*",
        "realtime", "realtime[-_.]*", "*supabase-realtime*", "storage", "storage[-_.]*", "storage-api*",
        "*supabase-storage*", "*supavisor*")
    shapes: ClassVar[tuple[Shape, ...]] = (POSTGRES, E.CRASH, PRETTY_JSON, INDENTED_NOT_PG)
    process_names: ClassVar[tuple[str, ...]] = ("postgrest", "gotrue", "kong", "realtime", "storage-api")
    #: Lines only Supabase's components print (PostgREST's diagnostics, GoTrue, Storage's tenant,
    #: Kong's service paths, Bitnami Supabase modules); Elixir and Postgres lines, logrus text and
    #: pino-pretty's ``(pid on host)`` lines (Storage); any nginx log.
    sniffs = ((0.9, _SNIFF_STRONG), (0.6, _SNIFF_SOME), (0.4, _SNIFF_WEAK))
    metrics: ClassVar[tuple[Family, ...]] = (
        Family("supabase_log_records_total", "counter", ("level",),
               "Log records of Supabase's components other than request lines, by level (debug, info, notice, "
               "warning, error, critical); the component is the backend label."),
    )

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._routes: dict[str, RouteLabels] = {}
        self._seen: set[str] = set()
        self._ready: set[str] = set()
        self._elixir = ""  # the Elixir service this stream is, once a record said it
        self._named = ""  # the component the stream is named after
        self._classes: set[str] = set()  # the Elixir exception classes counted as error types
        self._after = ""  # the kind of the record before: "schema_cache" or "erlang_halt"

    def state(self) -> dict[str, object]:
        """The components that were ready, which Elixir service this stream is, the kind of the
        record before (a crash's later records count with it), the exception classes counted as
        error types and the routes learned, per component."""
        return {"ready": sorted(self._ready), "elixir": self._elixir, "after": self._after,
                "classes": sorted(self._classes), "routes": {c: r.dump() for c, r in self._routes.items()}}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` gave; what is missing or malformed starts afresh."""
        ready, elixir = state.get("ready"), state.get("elixir")
        if isinstance(ready, list):
            self._ready = {c for c in ready if c in P.COMPONENTS}
        if elixir in P.COMPONENTS:
            self._elixir = str(elixir)
        if state.get("after") in ("schema_cache", "erlang_halt"):
            self._after = str(state["after"])
        classes = state.get("classes")
        if isinstance(classes, list):
            self._classes = {c for c in classes[:E.MAX_CLASSES] if isinstance(c, str)}
        routes = state.get("routes")
        for component, saved in routes.items() if isinstance(routes, dict) else ():
            if component in P.COMPONENTS:
                self._routes_of(component).load(saved)

    def named(self, names: tuple[str, ...]) -> None:
        """A stream named after a component (``supabase-analytics``, ``supavisor``: a file, compose
        service or container) is that component for its records whose format does not say whose
        they are (Elixir lines, a Bitnami line of another module, another logger's JSON)."""
        for name in names:
            component = L.component_named(name)
            if component:
                self._named = component
                return

    def learn(self, text: str) -> None:
        """Which components were ready, from the lines logged before reading began (no events)."""
        for rec in split_records(text, record_rule(type(self))):
            line = L.read(rec)
            if line is None or not line.life:
                continue
            component = self._component(line, rec)
            if line.life in (L.READY, L.START_READY):
                self._ready.add(component)
            else:
                self._ready.discard(component)

    def parse(self, record: Record) -> Iterable[Event]:
        """Events of one record, each with the component that wrote it as its backend."""
        line = L.read(record.text)
        after, self._after = self._after, ""
        if line is None:
            return []
        component = self._component(line, record.text)
        backend = component or None
        if component:
            self._seen.add(component)
        events: list[Event] = []
        if line.request is not None:
            self._request(line, component, events)
        else:
            events.append(Event("supabase_log_records_total", (line.level,), 1, backend, rule=line.kind))
        self._life(line.life, component, events)
        error = line.error
        if line.kind == "pgrst_json" and after == "schema_cache":
            error = False  # the error object of the schema-cache error just counted
        elif line.kind == "erlang" and record.text.startswith(P.ERLANG_DUMP) and after == "erlang_halt":
            error = False  # the second line of the crash just counted
        if line.kind == "pgrst" and "loading the schema cache" in record.text:
            self._after = "schema_cache"
        elif line.kind == "erlang" and record.text.startswith(P.ERLANG_HALT):
            self._after = "erlang_halt"
        if error:
            kind = E.error_type(record.text, self._classes) if line.kind == "elixir" else P.error_type(record.text)
            events.append(Event("backend_errors_total", (self.model, kind), 1, backend, rule="error"))
        return events

    def _component(self, line: L.Line, text: str) -> str:
        """The line's component; where its format does not tell (``""``), the one the stream is named
        after. An Elixir or Erlang record without either is from the service the text names (which the
        stream is then taken to be), else the one the stream was found to be, else Realtime."""
        if line.component:
            return line.component
        if line.kind not in ("elixir", "erlang"):
            return self._named
        if self._named in _ELIXIR_SERVICES:
            return self._named
        self._elixir = E.service(text) or self._elixir
        return self._elixir or P.REALTIME

    def zero_series(self, model: str) -> list[ZeroSeries]:
        """Each component's counters from its first line (a backend of its own): its error types,
        and its restarts (Kong's are Kong's own lines)."""
        zeros: list[ZeroSeries] = []
        for component in sorted(self._seen):
            kinds = _ZERO_TYPES.get(component, ("error",))
            zeros += [("backend_errors_total", (model, kind), component) for kind in kinds]
            if component != P.KONG:
                zeros.append(("backend_restarts_total", (), component))
        return zeros

    def _routes_of(self, component: str) -> RouteLabels:
        """The routes of ``component`` (made at its first access line)."""
        routes = self._routes.get(component)
        if routes is None:
            prefixes = P.KONG_PREFIXES if component == P.KONG else ("/object/",) if component == P.STORAGE else ()
            routes = self._routes[component] = RouteLabels(prefixes=prefixes)
        return routes

    def _request(self, line: L.Line, component: str, events: list[Event]) -> None:
        assert line.request is not None
        method, path, code = line.request
        routes = self._routes_of(component)
        route = supabase_route(path, _OWN_ROUTES, component) if path.startswith("/") else OTHER
        labels = routes.fold((method if method in HTTP_METHODS else "OTHER", route, code))
        events.append(Event("http_requests_total", labels, 1, component, rule="access"))
        if line.seconds is not None:
            events.append(Event("http_request_duration_seconds", labels[:2], line.seconds, component,
                                rule="duration"))

    def _life(self, life: str, component: str, events: list[Event]) -> None:
        if not life or not component:
            return
        if life in (L.START, L.START_READY):
            if component in self._ready and life == L.START:
                events.append(Event("backend_ready", (self.model,), 0, component, rule="startup"))
                self._ready.discard(component)
            events.append(Event("backend_restarts_total", (), 1, component, rule="startup"))
        if life in (L.READY, L.START_READY):
            self._ready.add(component)
            events.append(Event("backend_ready", (self.model,), 1, component, rule="ready"))
        elif life == L.DOWN and component in self._ready:
            self._ready.discard(component)
            events.append(Event("backend_ready", (self.model,), 0, component, rule="down"))
