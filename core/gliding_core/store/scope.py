"""L0: scopes, whose memory an adapter reads and writes (a user, a thread, or a task).

An adapter serving several users on one agent resolves a scope for every run
(``resolve_scope``: the ``user_id`` when given, else the ``thread_id``, else the task it was
built for) and reads and writes through it. The scope maps to L0 like LangMem's
``("memories", "{user_id}")`` namespace template:

=============  ====================  =====================================  ===================
scope          name                  task IRI (L1 session, inputs)          tag of its entries
=============  ====================  =====================================  ===================
user alice     ``user:alice``        ``urn:gliding:scope:user:alice``       ``scope:user:alice``
thread t1      ``thread:t1``         ``urn:gliding:scope:thread:t1``        ``scope:thread:t1``
task (built)   ``task:<iri>``        ``<iri>`` itself                       ``scope:task:<iri>``
=============  ====================  =====================================  ===================

The key is percent-encoded in the IRI and the tag, so a ``:`` or ``/`` in a user id cannot
make two scopes meet. A scope's turns keep their L1 session's named graph
(``urn:gliding:session:<id>``) and carry the scope's tag; its supplementary inputs are put for
its task IRI (``scope_task_iri`` gives it to a producer). A LlamaIndex ``session_id`` is a thread.

Reading (``reader_filters``, ``Scope.filters``): a scope reads the entries carrying its tag,
and the named graphs or scopes the caller shares explicitly (``shared=("urn:kg:common",)``);
never a supplementary input, pending, consumed or archived as the L1 turn that delivered it
(the delivered message is the only place the model sees an input). An entry without a scope tag
belongs to no scope: a scope reads it only through a shared graph, and a reader without a scope
(a retriever built without one) reads only such entries, never a scope's. The conditions are
SQL (``SearchFilters``), so they hold for an entry written while a search runs.

Turns archived before scopes existed carry no scope tag, so no scope reads them:
``adopt_unscoped_turns`` tags each with the scope of its task (``Scope.task``, what a
single-tenant adapter reads), once, after an upgrade.

Invariants: the mapping from scope to task IRI and to tag is injective (a task scope's IRI may
not lie under ``urn:gliding:scope:``, where the users' and threads' are); a scope is immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview, validate_iri
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore

SCOPE_PREFIX = "urn:gliding:scope:"
TAG_PREFIX = "scope:"
# The type of a supplementary input in L0, and of the L1 turn that archives a delivered one.
INPUT_TYPE = "SupplementaryInput"
# Never recalled: supplementary inputs (the delivered message is where one is seen), the chat
# log's entries keeping a large message's record (its turn is what recall finds), and the L1
# sessions' state entries (they have no text; this keeps a reader off them all the same).
UNREAD_TYPES = (INPUT_TYPE, "ChatMarks", "SessionState")

Kind = Literal["user", "thread", "task"]
KINDS: tuple[Kind, ...] = ("user", "thread", "task")


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory is read and written: a user, a thread, or the task an adapter was built for.

    Attributes:
        kind: ``user``, ``thread`` or ``task``.
        key: the user id, the thread id, or the task IRI.

    Example:
        >>> Scope.user("alice").task_iri
        'urn:gliding:scope:user:alice'
        >>> Scope.user("alice").tag
        'scope:user:alice'
    """

    kind: Kind
    key: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidInputError(f"scope kind must be one of {KINDS}, got {preview(self.kind)}")
        if self.kind == "task":
            validate_iri(self.key, what="task IRI")
            if self.key.startswith(SCOPE_PREFIX):  # a user's or a thread's: theirs alone
                raise InvalidInputError(
                    f"task IRI {preview(self.key)} is under {SCOPE_PREFIX!r}, which names the"
                    " scopes of users and threads: use Scope.user or Scope.thread"
                )
        else:
            _encoded(_check_id(self.key, f"{self.kind} id"))

    @classmethod
    def user(cls, user_id: str) -> Scope:
        """Return the scope of one user (every thread of the user shares it)."""
        return cls("user", user_id)

    @classmethod
    def thread(cls, thread_id: str) -> Scope:
        """Return the scope of one thread (a LangGraph ``thread_id``, a LlamaIndex session)."""
        return cls("thread", thread_id)

    @classmethod
    def task(cls, task_iri: str) -> Scope:
        """Return the scope of a task: what a single-tenant adapter reads and writes."""
        return cls("task", task_iri)

    @classmethod
    def of_task(cls, task_iri: str) -> Scope:
        """Return the scope whose task IRI is ``task_iri``: the user's or the thread's for one
        under ``urn:gliding:scope:`` (what ``task_iri`` of that scope gives), else the task's.

        Raises:
            InvalidInputError: ``task_iri`` is no IRI, or lies under ``urn:gliding:scope:``
                without being a user's or a thread's task IRI.
        """
        if isinstance(task_iri, str) and task_iri.startswith(SCOPE_PREFIX):
            kind, _, key = task_iri.removeprefix(SCOPE_PREFIX).partition(":")
            if kind in ("user", "thread") and key:
                scope = cls(kind, unquote(key))  # type: ignore[arg-type]
                if scope.task_iri == task_iri:
                    return scope
        return cls.task(task_iri)

    @property
    def name(self) -> str:
        """``kind:key``, the key percent-encoded (``user:alice``)."""
        return f"{self.kind}:{_encoded(self.key)}"

    @property
    def task_iri(self) -> str:
        """The task IRI of the scope's L1 session and supplementary inputs."""
        return self.key if self.kind == "task" else SCOPE_PREFIX + self.name

    @property
    def tag(self) -> str:
        """The L0 tag every entry written for the scope carries."""
        return TAG_PREFIX + self.name

    def filters(
        self, shared: Sequence[Shared] = (), *, base: SearchFilters | None = None
    ) -> SearchFilters:
        """Return the search filters of what this scope may read.

        Args:
            shared: named graph IRIs or other scopes this reader may read as well.
            base: further conditions (the caller's own filters), all of which must hold too.

        Raises:
            InvalidInputError: ``shared`` holds something that is neither a graph IRI nor a
                ``Scope``, or ``base`` is not ``SearchFilters``.
        """
        return reader_filters(self, shared, base=base)

    def __str__(self) -> str:
        return self.name


Shared = str | Scope  # what a reader may share: a named graph IRI, or another scope


def reader_filters(
    scope: Scope | None, shared: Sequence[Shared] = (), *, base: SearchFilters | None = None
) -> SearchFilters:
    """Return the search filters of what a reader in ``scope`` may read.

    A scope reads its own entries; a reader without one (``None``) reads the entries of no
    scope. Either also reads the ``shared`` graphs and scopes, never an entry of ``UNREAD_TYPES``
    (a supplementary input, a chat log's kept record), and only what ``base`` lets through.

    Raises:
        InvalidInputError: ``scope`` is not a ``Scope`` or ``None``, ``shared`` holds something
            that is neither a graph IRI nor a ``Scope``, or ``base`` is not ``SearchFilters``.
    """
    if scope is not None and not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope or None, got {preview(scope)}")
    if base is not None and not isinstance(base, SearchFilters):
        raise InvalidInputError(f"base must be SearchFilters or None, got {preview(base)}")
    items = _check_shared(shared)
    tags = [item.tag for item in items if isinstance(item, Scope)]
    graphs = tuple(item for item in items if isinstance(item, str))
    if scope is None:
        reach = [SearchFilters(exclude_tag_prefixes=(TAG_PREFIX,))]
    else:
        tags.insert(0, scope.tag)
        reach = []
    if tags:
        reach.append(SearchFilters(tags_any=tuple(tags)))
    if graphs:
        reach.append(SearchFilters(named_graphs=graphs))
    readable = SearchFilters(exclude_types=UNREAD_TYPES, any_of=tuple(reach))
    return readable if base is None else SearchFilters(all_of=(base, readable))


def resolve_scope(
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    default: Scope | str | None = None,
) -> Scope:
    """Return the scope of a run: its user when given, else its thread, else ``default``.

    Args:
        user_id: the run's user, if known.
        thread_id: the run's thread (conversation), if known.
        default: the scope (or task IRI) to use when neither is given.

    Raises:
        InvalidInputError: an id is not a non-empty string, ``default`` is neither a ``Scope``
            nor a task IRI, or nothing names a scope.
    """
    if user_id is not None:
        return Scope.user(user_id)
    if thread_id is not None:
        return Scope.thread(thread_id)
    if isinstance(default, Scope):
        return default
    if isinstance(default, str):
        return Scope.of_task(default)
    raise InvalidInputError(
        f"a scope needs a user_id, a thread_id or a default task, got {preview(default)}"
    )


def scope_task_iri(
    user_id: str | None = None,
    thread_id: str | None = None,
    default: Scope | str | None = None,
) -> str:
    """Return the task IRI an adapter uses for a user or thread: put input for it there.

    ``memory.supplements.put(scope_task_iri(user_id="alice"), text)`` reaches alice's run only
    (the run whose scope resolves to ``user:alice``); the arguments resolve as in
    ``resolve_scope``.
    """
    return resolve_scope(user_id=user_id, thread_id=thread_id, default=default).task_iri


def adopt_unscoped_turns(
    store: EntryStore, scope_of_task: Callable[[str], Scope] = Scope.of_task
) -> int:
    """Tag every L1 turn archive of no scope with the scope of its task; return how many.

    Args:
        store: the L0 store to upgrade (one transaction: all the turns or none).
        scope_of_task: the scope a turn of a task belongs to; ``Scope.of_task`` by default
            (a user's or a thread's task IRI gives that scope).
    """
    if not isinstance(store, EntryStore):
        raise InvalidInputError(f"store must be an EntryStore (an L0Store), got {preview(store)}")
    if not callable(scope_of_task):
        raise InvalidInputError(f"scope_of_task must be callable, got {preview(scope_of_task)}")
    adopted = 0
    with store.transaction():
        for entry in store.by_type("Turn"):  # an input is never read: it needs no scope
            task = entry.node.get("task")
            iri = task.get("@id") if isinstance(task, dict) else None
            if not isinstance(iri, str) or any(t.startswith(TAG_PREFIX) for t in entry.tags):
                continue
            scope = scope_of_task(iri)
            if not isinstance(scope, Scope):
                raise InvalidInputError(f"scope_of_task returned {preview(scope)}, not a Scope")
            store.retag(entry.iri, add=[scope.tag])
            adopted += 1
    return adopted


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{what} must be a non-empty string, got {preview(value)}")
    return value


def _encoded(key: str) -> str:
    try:
        return quote(key, safe="")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"scope key is not valid Unicode: {preview(key)}") from exc


def _check_shared(shared: object) -> list[Shared]:
    if isinstance(shared, (str, Scope)) or not isinstance(shared, (list, tuple)):
        raise InvalidInputError(
            f"shared must be a list of graph IRIs or scopes, got {preview(shared)}"
        )
    out: list[Shared] = []
    for item in shared:
        if isinstance(item, Scope):
            out.append(item)
        elif isinstance(item, str):
            out.append(validate_iri(item, what="shared graph IRI"))
        else:
            raise InvalidInputError(f"shared holds {preview(item)}: not a graph IRI or a Scope")
    return out
