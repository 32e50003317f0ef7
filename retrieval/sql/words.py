"""How the SQL translator reads a question's words: the normalised text, general filler that
carries no schema meaning, number words, and when a word names a column."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

from retrieval.text import stem

if TYPE_CHECKING:  # schema.py asks this module for the words of a column's name
    from retrieval.sql.schema import ColumnInfo

# General English relation words and names of a record's container: "faults concerning
# brakes", "entries in the defect log". They say which records, never which column. The verb
# forms ("faults that concern brakes") are relation words only before a value the question
# links (schema_linking), since "raised a concern" uses the noun.
RELATION = frozenset("concerning regarding related relating pertaining re against because".split())
RELATION_VERBS = frozenset("concern concerns concerned relate relates regard regards".split())
CONTAINERS = frozenset("log logs register registers entries entry tracker sheet spreadsheet database ledger".split())
# General English that carries no schema meaning in a record question.
FILLER = frozenset("""
a an the of in on at to for from with by and or is are was were be been being has have had do does did
what which who whom whose when where how there their its it this that these those any all each every
me my we our us you your i show list give tell find get display return please much many so far
total overall ever recorded record records single one value values table data number numbers
took take taken takes spent needed currently still now amount among first assigned then than went go gone
up down out along across over into onto about around within during after before since until ever
include including included includes put puts shows show shown showed appear appears appeared ended end ends
happen happened happens occur occurred affect affected affects involve involved involving belong belonged
got get gets go goes going come came make made give given gave see saw seen often times time whole overall
both also only just very all any some such other same own per across so far yet again too
as owned owns own handled handle handles
hey hi hello could would can will please provide tell know want like need curious m fine just well kindly
level hit hits id ids
rack racked racking clock clocked incur incurred incurring caught
""".split()) | RELATION

WORD = re.compile(r"[a-z0-9][a-z0-9_.$-]*")
NUM = r"(\d+|two|three|four|five|six|seven|eight|nine|ten)"  # a count in digits or words
WORD_NUMBERS = {"one": 1, "a": 1, "an": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10}
# Verbs of recording: a record was logged, reported, raised... They mean the table's rows and
# the date each was recorded on (schema_linking picks that date column).
RECORDING = frozenset("""
log logged logs report reported reports raise raised raises record recorded file filed enter entered register
registered submit submitted lodge lodged create created note noted book booked open opened
place placed
""".split())

# A column's unit, read from a part of its name (`cost_gbp`, `downtime_hrs`, `height_m`): the
# unit's own words ("pounds") and the words of what it measures ("spend", "long") name that
# column. General units and currencies, no column of any corpus; a part is a unit only when it
# is a whole part of the name (`_m`, never the "m" inside "amount").
_MONEY = ("cost", "costs", "costing", "spend", "spent", "spending", "paid", "pay", "payment", "price", "priced", "charge",
          "charges", "charged", "worth", "money", "expense", "expenses", "expenditure", "bill", "billed", "value")
_DURATION = ("long", "time", "duration", "took", "lasted", "lost", "lose")
_DISTANCE = ("far", "distance", "driven", "travelled", "traveled", "covered", "mileage")
_MASS = ("heavy", "weight", "weigh", "weighed", "weighs")
_VOLUME = ("volume", "consumed")
_CURRENCIES = {"usd": ("dollar", "dollars", "usd", "$"), "eur": ("euro", "euros", "eur"),
               "gbp": ("pound", "pounds", "gbp", "sterling"),
               "chf": ("franc", "francs", "chf"), "jpy": ("yen", "jpy"), "cad": ("dollar", "dollars", "cad"),
               "aud": ("dollar", "dollars", "aud"), "nzd": ("dollar", "dollars", "nzd"), "sek": ("krona", "kronor", "sek"),
               "nok": ("krone", "kroner", "nok"), "dkk": ("krone", "kroner", "dkk"), "inr": ("rupee", "rupees", "inr"),
               "cny": ("yuan", "renminbi", "cny"), "pln": ("zloty", "pln")}
UNIT_SYNONYMS: dict[str, tuple[str, ...]] = {
    **{code: words + _MONEY for code, words in _CURRENCIES.items()},
    "hours": ("hour", "hours", "hrs", "hr", *_DURATION), "hrs": ("hour", "hours", "hrs", "hr", *_DURATION),
    "h": ("hour", "hours", "hrs", *_DURATION), "minutes": ("minute", "minutes", "mins", "min", *_DURATION),
    "mins": ("minute", "minutes", "mins", *_DURATION), "min": ("minute", "minutes", "mins", *_DURATION),
    "seconds": ("second", "seconds", "secs", *_DURATION), "secs": ("second", "seconds", "secs", *_DURATION),
    "s": ("second", "seconds", "secs", *_DURATION), "ms": ("millisecond", "milliseconds", *_DURATION),
    "days": ("day", "days", *_DURATION), "weeks": ("week", "weeks", *_DURATION),
    "km": ("kilometre", "kilometres", "kilometer", "kilometers", "km", *_DISTANCE),
    "miles": ("mile", "miles", *_DISTANCE), "mi": ("mile", "miles", *_DISTANCE),
    "m": ("metre", "metres", "meter", "meters"), "cm": ("centimetre", "centimetres", "centimeter", "centimeters"),
    "mm": ("millimetre", "millimetres", "millimeter", "millimeters"),
    "kg": ("kilogram", "kilograms", "kilo", "kilos", "kg", *_MASS), "t": ("tonne", "tonnes", "ton", "tons", *_MASS),
    "tonnes": ("tonne", "tonnes", "ton", "tons", *_MASS), "lb": ("pound", "pounds", "lbs", *_MASS),
    "l": ("litre", "litres", "liter", "liters", *_VOLUME), "litres": ("litre", "litres", "liter", "liters", *_VOLUME),
    "kwh": ("kilowatt", "kwh", "energy"), "mwh": ("megawatt", "mwh", "energy"),
    "pct": ("percent", "percentage", "per cent"), "percent": ("percent", "percentage"),
    "count": ("number",),
    # a rate per period: "yearly", "a year" for `annual_value_eur`
    "annual": ("annual", "annually", "yearly", "year", "per year"), "yearly": ("annual", "annually", "yearly", "year"),
    "monthly": ("monthly", "month", "per month"), "weekly": ("weekly", "week", "per week"), "daily": ("daily", "day", "per day"),
    # a column of kinds: "of each kind", "what type"
    "category": ("kind", "kinds", "type", "types", "sort", "sorts", "category", "categories"),
    "type": ("kind", "kinds", "type", "types", "sort", "sorts"), "kind": ("kind", "kinds", "type", "types", "sort", "sorts"),
}


def normalise_question(question: str) -> str:
    """Lower case, contractions and possessives undone, punctuation to spaces, one space apart."""
    text = question.lower().replace("\u2019", "'")
    text = re.sub(r"\b(what|who|where|when|how|that|it|there)'s\b", r"\1 is", text)
    text = re.sub(r"'s\b|s'(?=\s)", "", text)
    return " ".join(re.sub(r"[?,;:!()]|\.(?=\s|$)", " ", text).split())


def words_in(text: str) -> set[str]:
    return set(WORD.findall(text))


def number_value(token: str) -> int:
    """A count written in digits or as a word ("three")."""
    return int(WORD_NUMBERS.get(token, token))


def root(word: str) -> str:
    """A crude stem for linking verbs and nouns to column names: resolve ~ resolution."""
    for suf in ("ations", "ation", "ions", "ion", "ing", "ed", "es", "ee", "s", "e"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    return word[:5]


def matches(word: str, col: ColumnInfo) -> bool:
    """Does a question word name the column?"""
    return word in col.words or stem(word) in col.words or (len(word) >= 4 and root(word) in col.roots)


def names(word: str, col: ColumnInfo) -> bool:
    """Does a question word name the column by one of its words, their stems or singulars
    (not only by the crude root `matches` also accepts)?"""
    return word in col.words or stem(word) in col.words or singular(word) in col.words


def same_root(word: str, parts: Iterable[str]) -> bool:
    """Does a word of six letters or more share its root with one of `parts` of as many
    ("rejections" and "rejected", "inspections" and "inspected")? Shorter words are compared
    whole: a five-letter root of a short word is most of it ("cover" ~ "covid")."""
    return len(word) >= 6 and any(len(p) >= 6 and root(p) == root(word) for p in parts)


def singular(word: str) -> str:
    """The singular of an English noun by its ending ("expenditures" -> "expenditure",
    "categories" -> "category", "boxes" -> "box", "statuses" -> "status"); other words as
    they are. The stemmer cannot be used for this: it reads "purchases" as "purchas" and
    "purchase" as "purchase"."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes", "zes", "uses")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def plural(word: str) -> str:
    """The plural of an English noun by its ending ("category" -> "categories")."""
    w = singular(word)
    if len(w) > 2 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    if w.endswith(("s", "x", "z", "ch", "sh")):
        return w + "es"
    return w + "s"


def noun_forms(word: str) -> set[str]:
    """A noun as a question may write it: singular, plural, and the stem of each."""
    one, many = singular(word), plural(word)
    return {word.lower(), one, many, stem(one), stem(many)}


def value_forms(value: str) -> set[str]:
    """The ways a categorical value may be written in a question ("in_progress", "in progress";
    a one-word value, singular or plural)."""
    v = value.lower()
    forms = {v, v.replace("_", " "), v.replace("-", " "), v.replace("_", " ").replace("-", " ")}
    last = v.replace("_", " ").replace("-", " ").split()[-1] if v.strip() else ""
    if len(last) >= 4 and last.isalpha():  # "brakes" for "brake", "analyser faults" for "analyser fault"
        head = v.replace("_", " ").replace("-", " ")[: -len(last)]
        forms |= {head + singular(last), head + plural(last)}
    return forms


_NAME_PARTS = re.compile(r"[^0-9a-z\u00c0-\uffff]+")  # what separates the words of a column name


def name_words(name: str) -> frozenset[str]:
    """The words that name a column called `name`: its name's parts, their stems and its
    unit's synonyms (`ColumnInfo.words` keeps them per column)."""
    parts = [p for p in _NAME_PARTS.split(name.lower()) if p]  # `repair_cost`, "Repair cost (EUR)"
    words = set(parts) | {stem(p) for p in parts} | {name.lower()}
    for p in parts:
        words.update(UNIT_SYNONYMS.get(p, ()))
    return frozenset(words - {"id", "at", "on"})


def name_roots(words: frozenset[str]) -> frozenset[str]:
    """The roots of a column's words of four letters or more, as `matches` compares them."""
    return frozenset(root(c) for c in words if len(c) >= 4)
