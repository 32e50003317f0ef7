"""Two small generated domains, each a table and some text documents, for the tests of
questions about a table that the SQL translator declines (test_declined_tables.py).

- A machine workshop: a `repairs` table (table ACL: workshop and board; a row ACL keeps the
  kiln's repairs to the board) and public documents that share its words ("lathe", "press",
  "repair", "machine") without answering questions about its records.
- A lending library: a `loans` table and a few public documents, a different domain whose
  questions the rule was not written for.

The documents never hold the everyday words the questions use and the tables cannot link
("logged", "fault log", "in euros", "renewed", "in pounds"), so the passages that share the
tables' words do not answer those questions.
"""

from __future__ import annotations

import csv
import json
import random
from decimal import Decimal
from pathlib import Path

WORKSHOP = ("group:workshop", "group:board")
MACHINES = ["lathe", "press", "grinder", "bandsaw", "welder"]
STATES = ["open", "closed", "waiting"]
TECHNICIANS = ["Ada Brook", "Noor Haddad", "Pim Janssen"]
BRANCHES = ["riverside", "hillcrest", "harbour"]
LOAN_STATES = ["returned", "overdue", "lost"]


def _doc(doc_id: str, title: str, day: str, text: str) -> dict:
    return {"id": doc_id, "title": title, "date": day, "acl": ["public"], "text": text}


WORKSHOP_DOCS = [
    _doc("rules-visitors", "House rules for visitors", "2024-02-01",
         "Visitors sign in at the front desk and wear safety glasses in the machine hall. Children may visit the "
         "workshop only with a guardian who stays beside them, and never stand near a running machine."),
    _doc("guide-machine-care", "Machine care guide", "2024-05-10",
         "The lathe and the press are cleaned every Friday after the last session. Oil the grinder weekly and check "
         "the bandsaw blade tension before each use. A broken machine is reported at the front desk, where a "
         "technician books the repair and hangs a warning card on it."),
    _doc("news-spring", "Workshop newsletter, spring", "2025-03-20",
         "The spring open day raised money for a second lathe. The welding course moves to Thursday evenings, and "
         "members may now book the press online."),
    _doc("hours", "Opening hours", "2024-09-01",
         "The workshop opens at nine on weekdays and at ten on Saturdays. It is closed on Sundays and public "
         "holidays. The machine hall closes half an hour before the building does."),
    _doc("rota", "Technician rota", "2025-01-05",
         "Ada Brook covers the machine hall on Mondays and Tuesdays, Noor Haddad on Wednesdays and Thursdays, and "
         "Pim Janssen on Fridays and Saturdays. Ask the technician on duty before changing a blade."),
    _doc("safety-press", "Using the press safely", "2023-11-12",
         "Keep both hands on the controls of the press while it runs. Never reach past the guard, and stop the "
         "machine at once if it makes an unusual noise."),
]

LIBRARY_DOCS = [
    _doc("lib-hours", "Library opening hours", "2024-01-15",
         "The riverside library opens at eight on weekdays; the hillcrest and harbour libraries open at ten. On "
         "Sundays only the riverside library is open, from noon to four."),
    _doc("lib-cards", "Getting a library card", "2023-06-01",
         "Anyone who lives or studies in the city can get a card at any desk with proof of address. Children "
         "under twelve need a parent to sign for them."),
    _doc("lib-rooms", "Study rooms", "2024-10-02",
         "Study rooms at the harbour library can be booked for two hours at a time. Bring your own headphones; the "
         "rooms are quiet spaces."),
    _doc("lib-returns", "Returning books", "2024-03-08",
         "Books can be returned at any branch or through the drop box outside each library. Returned books "
         "appear on your account within a day."),
]


def repairs_rows(rng: random.Random) -> list[dict]:
    """30 repairs the workshop reads, and 3 of the kiln that only the board reads."""
    rows = []
    for i in range(33):
        board_only = i >= 30
        cents = rng.randrange(2_000, 150_000)
        rows.append({"repair_id": f"RP-{1001 + i}", "machine": "kiln" if board_only else MACHINES[i % 5],
                     "status": STATES[i % 3], "cost_eur": f"{Decimal(cents) / 100:.2f}",
                     "reported_on": f"2025-{1 + i % 10:02d}-{3 + i % 20:02d}", "technician": TECHNICIANS[i % 3],
                     "acl": json.dumps(["group:board"] if board_only else list(WORKSHOP))})
    return rows


def loans_rows(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(27):
        rows.append({"loan_id": f"LN-{501 + i}", "branch": BRANCHES[i % 3], "status": LOAN_STATES[i % 3 if i % 4 else 0],
                     "fine_usd": f"{rng.randrange(0, 2_000) / 100:.2f}", "due_on": f"2025-{1 + i % 11:02d}-{1 + i % 27:02d}",
                     "member": f"M-{9100 + i % 9}"})
    return rows


def _table(folder: Path, name: str, rows: list[dict], sidecar: dict) -> None:
    with (folder / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / f"{name}.acl.json").write_text(json.dumps(sidecar))


def write_domains(folder: Path, tables: tuple[str, ...] = ("repairs", "loans"), reader: str | None = None) -> Path:
    """The documents of both domains and the `tables` named, as sources in `folder`; with
    `reader` (an ACL entry), only the repairs rows it may read: the index of what one caller
    reads, which a differential test compares the full index with."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in WORKSHOP_DOCS + LIBRARY_DOCS))
    if "repairs" in tables:
        repairs = [r for r in repairs_rows(random.Random(7)) if reader is None or reader in json.loads(r["acl"])]
        _table(folder, "repairs", repairs, {"acl": list(WORKSHOP), "key": "repair_id",
                                            "types": {"cost_eur": "DOUBLE", "reported_on": "DATE"}})
    if "loans" in tables:
        _table(folder, "loans", loans_rows(random.Random(11)), {"acl": ["public"], "key": "loan_id",
                                                                "types": {"fine_usd": "DOUBLE", "due_on": "DATE"}})
    return folder
