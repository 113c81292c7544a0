"""L0: structured search filters, one definition applied the same way by every search arm.

A filter is validated when built and turns into one SQL condition on the entries table (alias
``e``) with its parameters; the lexical arm joins it into the full-text query, the dense arm
checks its candidates against it. Each condition is written once and rendered in the dialect
of the store's database (``SQLITE``, ``POSTGRESQL``: how a parameter is marked, how "true" is
spelled); both stores name their tables and columns alike.

Every field is a condition and the conditions are joined with AND; ``any_of`` and ``all_of``
nest filters, so a scope can say "my entries, or the shared graphs, and never an input"
(``gliding_core.store.scope``). Exclusions hold at query time, in the same SQL as the rest: an entry
written between two searches is filtered like every other.

Invariants: a built filter holds only labels (tags, types, graph) by the rule writes use, so
every tag, type or graph a write accepts can be filtered on; its numbers are finite floats
(numpy scalars are converted), so they bind as SQL parameters. The prefix conditions compare
strings by code point, so a PostgreSQL store keeps its labels in the "C" collation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gliding_core.checks import check_real
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import check_label, preview
from gliding_core.store.entry import check_importance


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a database's SQL spells what a filter's condition needs.

    Attributes:
        mark: the placeholder of one parameter.
        true: the condition that holds for every row.
        own_tags: an expression of the row's own tags as an array, for a probe's tag
            conditions (``None``: probed in the tag table by key).
    """

    mark: str
    true: str
    own_tags: str | None = None


SQLITE = Dialect(mark="?", true="1")
# psycopg's placeholder. An entry row keeps its tags joined by ``staging.SEPARATOR`` (the tag
# table is made from them), so a probe compares them as an array, with no look-up: the tag
# table's key leads with the tag, so looking one entry up in it costs a descent per tag asked
# for (50 tags: 47,000 descents, 70 ms, to check 1,000 candidates; 3 ms as arrays).
POSTGRESQL = Dialect(mark="%s", true="TRUE", own_tags="string_to_array(e.tags, chr(31))")

# The most results one search may ask for: the dense index's bindings overflow near 2**31.
MAX_RESULTS = 1_000_000
# How deep ``any_of`` / ``all_of`` may nest (a filter without them is 1 level): SQLite's parser
# overflows its stack near 35 levels. The limits hold for the filter the store is given, so the
# memory's own conditions count too (a scope's reader adds two levels and a few conditions).
MAX_NESTING = 24
# How long a chain of joined conditions one filter may make (``_terms``): SQLite parses a chain
# of conditions as a tree as deep as it is long and refuses one deeper than 1,000.
MAX_TERMS = 900

_LABEL_LISTS = (
    "named_graphs",
    "exclude_tags",
    "exclude_tag_prefixes",
    "exclude_types",
    "exclude_graph_prefixes",
)


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Conditions an entry must meet; unset fields do not filter.

    Attributes:
        tags_all: the entry carries every one of these tags.
        tags_any: the entry carries at least one of these tags.
        types: the entry has at least one of these JSON-LD types.
        named_graph: the entry is in this named graph.
        min_importance, max_importance: the importance range, inclusive.
        since, until: the creation time range (UNIX seconds), inclusive.
        named_graphs: the entry is in one of these named graphs.
        exclude_tags: the entry carries none of these tags.
        exclude_tag_prefixes: the entry carries no tag that starts with one of these.
        exclude_types: the entry has none of these JSON-LD types.
        exclude_graph_prefixes: the entry is in no named graph whose IRI starts with one of
            these (an entry in no graph passes).
        any_of: the entry passes at least one of these filters (none given: no condition).
        all_of: the entry passes every one of these filters.
    """

    tags_all: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    named_graph: str | None = None
    min_importance: float | None = None
    max_importance: float | None = None
    since: float | None = None
    until: float | None = None
    named_graphs: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    exclude_tag_prefixes: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()
    exclude_graph_prefixes: tuple[str, ...] = ()
    any_of: tuple[SearchFilters, ...] = ()
    all_of: tuple[SearchFilters, ...] = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("tags_all", "tags_any", "types", *_LABEL_LISTS):
            value = getattr(self, name)
            if name in _LABEL_LISTS and not isinstance(value, (list, tuple)):
                raise InvalidInputError(f"{name} must be a list of strings, got {preview(value)}")
            set_(self, name, _check_labels(value, name))
        if self.named_graph is not None:
            set_(self, "named_graph", check_label(self.named_graph, what="named_graph"))
        for name in ("min_importance", "max_importance"):
            if getattr(self, name) is not None:
                set_(self, name, check_importance(getattr(self, name)))
        for name in ("since", "until"):
            if getattr(self, name) is not None:
                set_(self, name, check_real(getattr(self, name), what=f"{name} (UNIX seconds)"))
        for name in ("any_of", "all_of"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, SearchFilters) for v in value
            ):
                raise InvalidInputError(
                    f"{name} must be a list of SearchFilters, got {preview(value)}"
                )
            set_(self, name, tuple(value))
        if (self.any_of or self.all_of) and _levels(self) > MAX_NESTING:
            raise InvalidInputError(
                f"filters nest more than {MAX_NESTING} levels deep (any_of, all_of; a scope's"
                f" own conditions count too): "
                f"{preview(self)}"
            )
        wide = self.any_of or self.all_of or self.exclude_tag_prefixes
        if (wide or self.exclude_graph_prefixes) and _terms(self) > MAX_TERMS:
            raise InvalidInputError(
                f"filters join a chain of {_terms(self)} conditions (each prefix excluded, each"
                f" alternative of any_of and all_of; a scope's own conditions count too), over"
                f" {MAX_TERMS}: "
                f"{preview(self)}"
            )
        low, high = self.min_importance, self.max_importance
        if low is not None and high is not None and low > high:
            raise InvalidInputError(f"importance range is empty: {low} > {high}")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidInputError(f"time range is empty: since {self.since} > until {self.until}")

    @property
    def empty(self) -> bool:
        """Whether the filter lets every entry through."""
        return self == SearchFilters()

    def label_lookups(self) -> int:
        """Return how many labels (tags and types) the filter's conditions name, nested ones
        included: the look-ups of one entry when probed (see ``sql``)."""
        own = sum(
            len(set(values))
            for values in (
                self.tags_all,
                self.tags_any,
                self.types,
                self.exclude_tags,
                self.exclude_types,
            )
        )
        return own + sum(part.label_lookups() for part in (*self.any_of, *self.all_of))

    def sql(self, dialect: Dialect = SQLITE, *, probe: bool = False) -> tuple[str, list[Any]]:
        """Return the SQL condition on alias ``e`` and its parameters, in ``dialect``
        (``dialect.true`` when empty).

        ``probe``: for a statement that reads a few given entries (by IRI) rather than one
        that finds the entries passing: each tag and type condition then looks up the entry's
        own labels by key (a correlated ``EXISTS``), where the default form collects every
        entry holding the labels (``IN``), which SQLite does once per statement whatever the
        number of entries it checks (a tag on 14,000 entries: 50 ms to check 1,100 of them,
        2 ms probed). A prefix condition keeps its one range read either way.
        """
        if not isinstance(probe, bool):
            raise InvalidInputError(f"probe must be a bool, got {preview(probe)}")
        parts: list[str] = []
        params: list[Any] = []
        mark = dialect.mark
        own = dialect.own_tags if probe else None
        if self.tags_all:
            tags = _unique(self.tags_all)
            held = _marks(tags, mark)
            if own is not None:
                parts.append(f"{own} @> ARRAY[{held}]::text[]")
            elif probe:
                parts.append(
                    f"(SELECT COUNT(*) FROM entry_tags AS t WHERE t.tag IN ({held})"
                    f" AND t.entry_id = e.id) = {len(tags)}"
                )
            else:
                parts.append(
                    f"e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN ({held})"
                    f" GROUP BY entry_id HAVING COUNT(*) = {len(tags)})"
                )
            params += tags
        for values, table, column in (
            (self.tags_any, "entry_tags", "tag"),
            (self.types, "entry_types", "type"),
        ):
            if values:
                unique = _unique(values)
                parts.append(_member(table, column, _marks(unique, mark), probe=probe, own=own))
                params += unique
        for column, operator, value in (
            ("e.named_graph", "=", self.named_graph),
            ("e.importance", ">=", self.min_importance),
            ("e.importance", "<=", self.max_importance),
            ("e.created_at", ">=", self.since),
            ("e.created_at", "<=", self.until),
        ):
            if value is not None:
                parts.append(f"{column} {operator} {mark}")
                params.append(value)
        _nested_sql(self, parts, params, dialect, probe)
        return (" AND ".join(parts) or dialect.true), params


def _member(
    table: str,
    column: str,
    marks: str,
    *,
    probe: bool,
    negated: bool = False,
    own: str | None = None,
) -> str:
    """The condition that the entry holds one of the labels ``marks`` stand for (``negated``:
    none of them), probed by the entry's key or collected (see ``SearchFilters.sql``); a tag
    probed against the row's own tags when the dialect has them (``own``)."""
    if probe and own is not None and table == "entry_tags":
        found = f"{own} && ARRAY[{marks}]::text[]"
        return f"NOT ({found})" if negated else found
    if probe:
        found = (
            f"EXISTS (SELECT 1 FROM {table} AS t"
            f" WHERE t.{column} IN ({marks}) AND t.entry_id = e.id)"
        )
        return f"NOT {found}" if negated else found
    membership = "NOT IN" if negated else "IN"
    return f"e.id {membership} (SELECT entry_id FROM {table} WHERE {column} IN ({marks}))"


def _nested_sql(
    filters: SearchFilters, parts: list[str], params: list[Any], dialect: Dialect, probe: bool
) -> None:
    """Add the conditions of the fields that came with scoping: several graphs, exclusions and
    nested filters."""
    mark = dialect.mark
    if filters.named_graphs:
        graphs = _unique(filters.named_graphs)
        parts.append(f"e.named_graph IN ({_marks(graphs, mark)})")
        params += graphs
    for values, table, column in (
        (filters.exclude_tags, "entry_tags", "tag"),
        (filters.exclude_types, "entry_types", "type"),
    ):
        if values:
            unique = _unique(values)
            parts.append(
                _member(
                    table,
                    column,
                    _marks(unique, mark),
                    probe=probe,
                    negated=True,
                    own=dialect.own_tags,
                )
            )
            params += unique
    for prefix in _unique(filters.exclude_tag_prefixes):  # a range on the tag index
        bounds = _prefix_range(prefix)
        where = f"tag >= {mark} AND tag < {mark}" if len(bounds) == 2 else f"tag >= {mark}"
        parts.append(f"e.id NOT IN (SELECT entry_id FROM entry_tags WHERE {where})")
        params += bounds
    for prefix in _unique(filters.exclude_graph_prefixes):  # a range on the graph's IRI
        bounds = _prefix_range(prefix)
        inside = f"e.named_graph >= {mark}"
        if len(bounds) == 2:
            inside += f" AND e.named_graph < {mark}"
        parts.append(f"(e.named_graph IS NULL OR NOT ({inside}))")
        params += bounds
    for nested, joiner in ((filters.any_of, " OR "), (filters.all_of, " AND ")):
        if nested:
            alternatives = _merged(nested) if joiner == " OR " else nested
            conditions = [part.sql(dialect, probe=probe) for part in alternatives]
            parts.append("(" + joiner.join(f"({sql})" for sql, _ in conditions) + ")")
            params += [value for _, values in conditions for value in values]


def _levels(filters: SearchFilters) -> int:
    """How deep ``filters`` nests (1: no ``any_of`` nor ``all_of``), counted level by level."""
    depth, level = 0, [filters]
    while level:
        depth += 1
        level = [part for each in level for part in (*each.any_of, *each.all_of)]
    return depth


def _terms(filters: SearchFilters) -> int:
    """How deep a chain of joined conditions ``filters`` makes in SQL, at most (see
    ``MAX_TERMS``): its own conditions one after the other (each field given, each prefix
    excluded, each group of alternatives), then the longest way down one group: its
    alternatives one after the other, and the deepest of them. Alternatives naming only tags
    are one condition. (Recursive, but ``MAX_NESTING`` levels at most: checked first.)"""
    own = sum(1 for name in _SINGLE if getattr(filters, name) not in (None, ()))
    own += len(filters.exclude_tag_prefixes) + len(filters.exclude_graph_prefixes)
    groups = [g for g in (_merged(filters.any_of), list(filters.all_of)) if g]
    below = [len(group) + max(_terms(part) for part in group) for group in groups]
    return own + len(groups) + max(below, default=0)


_SINGLE = (
    "tags_all",
    "tags_any",
    "types",
    "named_graph",
    "min_importance",
    "max_importance",
    "since",
    "until",
    "named_graphs",
    "exclude_tags",
    "exclude_types",
)


def _merged(alternatives: Sequence[SearchFilters]) -> list[SearchFilters]:
    """The alternatives of an ``any_of``, those that only name tags (``tags_any``) as one: an
    entry holding any tag of any of them (one look-up, where each alternative would be one
    more condition every entry is checked against)."""
    tags = [part for part in alternatives if _only_tags(part)]
    if len(tags) < 2:
        return list(alternatives)
    union = tuple(dict.fromkeys(tag for part in tags for tag in part.tags_any))
    return [SearchFilters(tags_any=union), *(part for part in alternatives if part not in tags)]


def _only_tags(part: SearchFilters) -> bool:
    """Whether a filter names tags (``tags_any``) and sets nothing else."""
    return bool(part.tags_any) and all(
        getattr(part, field.name) in (None, ())
        for field in dataclasses.fields(part)
        if field.name != "tags_any"
    )


def prefix_bound(prefix: str) -> str | None:
    """Return the least string above every string that starts with ``prefix`` (``None``: none).

    The prefix without its trailing U+10FFFF characters (the last there is), its new last
    character moved to the next one, skipping the surrogates (no stored text holds one);
    ``None`` when every character is U+10FFFF.
    """
    head = prefix.rstrip("\U0010ffff")
    if not head:
        return None
    last = ord(head[-1])
    return head[:-1] + chr(0xE000 if last == 0xD7FF else last + 1)


def _prefix_range(prefix: str) -> list[str]:
    """The bounds of the strings that start with ``prefix``: itself, and the least string above
    them all (``prefix_bound``), when there is one."""
    upper = prefix_bound(prefix)
    return [prefix] if upper is None else [prefix, upper]


def _check_labels(values: object, name: str) -> tuple[str, ...]:
    """Return ``values`` as a tuple if it is a list of labels (see ``jsonld.label_problem``)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidInputError(f"{name} must be a list of strings, got {preview(values)}")
    items = tuple(values)
    for value in items:
        check_label(value, what=f"each of {name}")
    return items


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _marks(values: Sequence[str], mark: str) -> str:
    return ", ".join([mark] * len(values))
