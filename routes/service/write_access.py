"""Who may write which document, decided from the principal and the request alone.

Two rules, both checked before any document is looked up, so neither answer depends on what
the index holds (routes/service/writes.py has the read rule that follows them, and why):

- `check_target`: the id must start with one of the principal's write prefixes
  (`Principal.may_write`). Outside them every write (put, delete, ACL change, in a batch or
  a tool) is the same 403 with one fixed message, whatever the id names.
- `check_changes` (`check_target` for each change, then): a put or an ACL change by a
  principal without the `admin` scope must leave an ACL its writer can read (its id, one of
  its groups, or `public`), so no write key can make a document that no key but an admin's
  can manage.

An admin here is a principal with the `admin` scope (`Principal.is_admin`), the operations
scope; membership of `group:admin` stays a read right like any group's (it reads the documents
the ingest default keeps to admins), so an IdP group or a key's groups alone never grant the
management of documents their holder cannot read.
"""

from __future__ import annotations

from typing import Callable, Sequence

from indexes.live import Change, Delete, Put, changed_id
from retrieval.errors import Forbidden
from retrieval.types import AccessScope, Principal, check_doc_id

OUTSIDE_PREFIXES = "this key may not write this document id: it is outside the key's write prefixes"


def check_target(principal: Principal | None, doc_id: object) -> str:
    """The id in normal form when `principal` may write it (None: the local operator, who may
    write any); an invalid id is `InvalidRequest`, one outside the prefixes `Forbidden` with
    the fixed `OUTSIDE_PREFIXES`, which says nothing of the id."""
    normal = check_doc_id(doc_id)
    if principal is not None and not principal.may_write(normal):
        raise Forbidden(OUTSIDE_PREFIXES)
    return normal


def check_changes(principal: Principal | None, changes: Sequence[Change]) -> None:
    """Every change's id is writable by `principal`, and no put or ACL change leaves an ACL
    its writer cannot read (unless it holds the `admin` scope). None: the local operator."""
    if principal is None:
        return
    for change in changes:
        check_target(principal, changed_id(change))
    if principal.is_admin:
        return
    for change in changes:
        if isinstance(change, Delete):
            continue
        acl = change.doc.acl if isinstance(change, Put) else change.acl
        if not principal.can_read(acl):
            own = ", ".join(repr(t) for t in sorted(principal.access_tokens()))
            raise Forbidden(f"the acl {list(acl)[:10]!r} of {changed_id(change)[:80]!r} leaves out its writer: "
                            f"a write must keep the writing key among the readers (one of {own}), so that it and "
                            "the admins can still manage the document (without an acl a document gets the "
                            "index's default)")


def read_scope(principal: Principal | None) -> AccessScope | None:
    """What changing an existing document needs (indexes/live.py `authorize`): the right to
    read it, as this scope; None (any document) for the local operator and for the `admin`
    scope, so an admin can always delete, or give a readable ACL to, a document no one else
    can manage."""
    return None if principal is None or principal.is_admin else principal.access_scope()


def read_rule(principal: Principal | None) -> Callable[[tuple[str, ...]], bool] | None:
    """`read_scope` as the predicate `authorize` takes."""
    scope = read_scope(principal)
    return scope.can_read if scope is not None else None
