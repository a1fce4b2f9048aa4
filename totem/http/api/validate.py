"""The input of an action checked against its declaration, listing every problem at once.

`Input` wraps a JSON body (or a query), checks it against the action's JSON Schema with
totem/schema.py and words each problem for the `$.invalid` answer ("is required", "must be at
most 200 characters"); the handler reads the fields, may add problems of its own (a rule that a
schema cannot say), and `done()` raises them all as one BadRequest. It knows types, ranges and
patterns, not meaning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from totem.errors import BadRequest
from totem.http.api.contract import TEXT_PATTERN, WHITE_SPACE, Schema, properties_of
from totem.schema import Problem, count_words, problems, types_of

# What a number in a query string may be: ASCII digits (str.isdigit() also takes "²" and int()
# then fails), one optional minus.
INTEGER_TEXT = re.compile(r"-?[0-9]+")
ITEM = re.compile(r"\[[0-9]+\]$")  # the end of the name of a list's item: models[3]
TYPE_WORDS = {"string": "must be text", "boolean": "must be true or false", "integer": "must be a whole number",
              "number": "must be a number", "array": "must be a list", "object": "must be an object",
              "null": "must be null"}
SURROGATE_WORDS = "must be valid Unicode text (no lone surrogates)"


class Input:
    """The fields of one request, checked against `schema`; read each, then call done(). The
    values read are JSON as the schema checked it (Any: this is the JSON boundary)."""

    def __init__(self, data: object, schema: Schema, where: str = "body") -> None:
        if not isinstance(data, dict):
            raise BadRequest((where, "a JSON object is required"))
        properties = self._properties = properties_of(schema)
        if where == "query":
            data = {name: _from_query(value, properties.get(name)) for name, value in data.items()}
        # null is taken as absent where the field's type does not take it: a required one is missing.
        self.data: dict[str, Any] = {name: value for name, value in data.items()
                     if value is not None or name not in properties or _takes_null(properties[name])}
        self.errors: list[tuple[str, str]] = check(schema, self.data)
        self._invalid = {name.split(".")[0].split("[")[0] for name, _ in self.errors}

    def value(self, name: str, default: Any = None) -> Any:
        """The field as given, or `default` when it is absent, null or invalid."""
        value = self.data.get(name)
        if value is None or name in self._invalid or "body" in self._invalid:
            return default
        if self.errors and not self._fits(name, value):
            return default  # a field no problem names, since a failed branch of a oneOf hid it
        return value

    def _fits(self, name: str, value: object) -> bool:
        schema = self._properties.get(name)
        return schema is not None and not problems(schema, value)

    def take(self, name: str) -> Any:
        """The field removed from the input, so that a large value goes when its reader lets it
        go; None when it is absent or invalid."""
        value = self.data.pop(name, None)
        return None if name in self._invalid else value

    def text(self, name: str, default: str | None = None, strip: bool = True) -> Any:
        """A text field trimmed of white space around it (unless not `strip`), or `default`."""
        value = self.value(name)
        if value is None:
            return default
        return value.strip(WHITE_SPACE) if strip else value

    def done(self) -> None:
        """Raises BadRequest listing every problem found, if any."""
        if self.errors:
            raise BadRequest(self.errors)


def check(schema: Schema, data: object) -> list[tuple[str, str]]:
    """Every problem of `data` against `schema` as (field, reason); text with a lone surrogate
    (which JSON can carry and UTF-8 cannot) is refused wherever it is."""
    found = [_named(problem) for problem in problems(schema, data)]
    named = {name for name, _ in found}
    found += [(where, SURROGATE_WORDS) for where in _surrogates(data, "") if where not in named]
    return found


def _named(problem: Problem) -> tuple[str, str]:
    """A problem as (field, reason); an item of a list of values is named by its list."""
    where = problem.where or "body"
    item = ITEM.search(where)
    if item is not None and problem.rule not in ("required", "unknown"):
        return where[:item.start()], "each item " + reason(problem)
    return where, reason(problem)


def reason(problem: Problem) -> str:
    """A problem in the words of the API's 400 answers."""
    schema, value = problem.schema, problem.value
    if problem.rule == "required":
        return "is required"
    if problem.rule == "unknown":
        return "unknown field"
    if problem.rule == "type":
        kinds = [kind for kind in types_of(schema) if kind != "null"] or ["object"]
        return TYPE_WORDS[kinds[0]]
    if problem.rule == "enum":
        options = schema["enum"] if "enum" in schema else [schema.get("const")]
        return "must be one of " + ", ".join(str(option) for option in options if option is not None)
    if problem.rule == "range":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"must be from {low} to {high}"
        return f"must be at least {low}" if low is not None else f"must be at most {high}"
    if problem.rule == "length":
        shortest = schema.get("minLength", 0)
        if len(value) < shortest:
            return "must not be empty" if shortest == 1 else f"must be at least {shortest} characters"
        return f"must be at most {schema['maxLength']} characters"
    if problem.rule == "pattern":
        if "\x00" in value:
            return "must not contain a NUL character"
        if schema["pattern"] == TEXT_PATTERN:
            return "must not be empty"
        return f"must be {schema.get('description', 'text that matches ' + schema['pattern'])}"
    if problem.rule == "count":
        return f"must hold {count_words(schema)} items"
    if problem.rule == "size":  # an object's rule about which fields go together, said in its description
        return f"must be {schema['description']}" if "description" in schema else \
            f"must have {count_words(schema, 'Properties')} fields"
    return "is not valid"


def _takes_null(schema: Schema) -> bool:
    return "type" not in schema or "null" in types_of(schema)


def _from_query(value: str, schema: Schema | None) -> str | int:
    """A query parameter as its declared type: query strings carry numbers as text."""
    if schema is not None and "integer" in types_of(schema) and INTEGER_TEXT.fullmatch(value.strip()):
        return int(value)
    return value


def _surrogates(value: object, where: str) -> Iterator[str]:
    """The places of the texts (keys too) that hold a lone surrogate."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                yield where or "body"
    elif isinstance(value, dict):
        for key, item in value.items():
            place = f"{where}.{key}" if where else key
            if not key.isascii():
                yield from _surrogates(key, place)
            yield from _surrogates(item, place)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _surrogates(item, f"{where or 'body'}[{index}]")
