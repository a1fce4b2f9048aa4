"""The words of an action's contract: JSON Schemas of its input and its answer.

Each action declares its body, its query and its answer once, beside its handler, as JSON Schema
dicts made with these helpers; the same dicts check the input (validate.py, through
totem/schema.py), make the OpenAPI document (openapi_document.py) and the tool schemas of the
MCP route. Every limit is a named constant of the module that enforces it. The input schemas
keep to what totem/schema.py validates: a pattern's field has a `description` that says the
rule in words, and the 400 answer says "must be <description>" when the pattern fails.

Conventions of the input: text never holds a NUL character; a text field is trimmed of white
space around it before use and must not be blank unless it says it may be empty; an optional
body field may be null, which is taken as absent; an id is at most MAX_ID_CHARS characters,
without "/", as the router takes the id of a URL.

Must not: import the API package (the package imports this), or check anything itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# A JSON Schema, as a dict of its keywords.
Schema = dict[str, Any]
# The fields of an object schema by name.
Fields = dict[str, Schema]

MAX_ID_CHARS = 64
MAX_TEXT_CHARS = 100_000

# White space as every regular expression dialect reads it alike (\s differs among them): what a
# text field is trimmed of.
WHITE_SPACE = " \t\n\r\f\v"
# A text that is not blank: some character other than white space, and no NUL anywhere.
TEXT_PATTERN = r"^[ \t\n\r\f\v]*[^ \t\n\r\f\v\x00][^\x00]*$"
# Any text without a NUL (it may be empty or blank).
ANY_TEXT_PATTERN = r"^[^\x00]*$"
# What the router takes as the id of a URL (find_action), and what ids in bodies and queries are.
ID_PATTERN = r"^[^/\x00]+$"
ID_WORDS = f"an id: 1 to {MAX_ID_CHARS} characters, without /"
# Base64 of RFC 4648: groups of four, padding only at the end.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def text(max_chars: int = MAX_TEXT_CHARS, *, empty: bool = False, description: str | None = None) -> Schema:
    """A text field of at most `max_chars` characters, never blank unless `empty` (then it may
    be empty too). The handler trims it, or keeps it as given (a prompt, a token)."""
    schema: Schema = {"type": "string", "minLength": 0 if empty else 1, "maxLength": max_chars,
                    "pattern": ANY_TEXT_PATTERN if empty else TEXT_PATTERN}
    if description:
        schema["description"] = description
    return schema


def patterned(pattern: str, words: str, max_chars: int) -> Schema:
    """A text that matches `pattern` (which must exclude NUL); `words` say the rule, as a noun
    phrase ("an absolute path"), in the documentation and in the answer that refuses one."""
    return {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": pattern, "description": words}


ID = patterned(ID_PATTERN, ID_WORDS, MAX_ID_CHARS)
BOOLEAN = {"type": "boolean"}
BASE64 = {"type": "string", "pattern": BASE64_PATTERN, "description": "base64 (RFC 4648)"}


def integer(low: int, high: int, description: str | None = None) -> Schema:
    schema: Schema = {"type": "integer", "minimum": low, "maximum": high}
    if description:
        schema["description"] = description
    return schema


def choice(options: Iterable[str], description: str | None = None) -> Schema:
    """One of a closed list of texts (the tuple that the code uses)."""
    schema: Schema = {"type": "string", "enum": list(options)}
    if description:
        schema["description"] = description
    return schema


def texts(max_items: int, max_chars: int = MAX_TEXT_CHARS, description: str | None = None) -> Schema:
    """A list of 1 to `max_items` non-empty texts, each kept as given (not trimmed)."""
    schema: Schema = {"type": "array", "minItems": 1, "maxItems": max_items,
                    "items": {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": ANY_TEXT_PATTERN}}
    if description:
        schema["description"] = description
    return schema


def nullable(schema: Schema) -> Schema:
    """`schema` that also takes null (an optional body field: null is taken as absent)."""
    if "oneOf" in schema or "type" not in schema:
        return schema
    widened = dict(schema)
    kinds = [widened["type"]] if isinstance(widened["type"], str) else list(widened["type"])
    if "null" not in kinds:
        widened["type"] = [*kinds, "null"]
    if "enum" in widened and None not in widened["enum"]:
        widened["enum"] = [*widened["enum"], None]
    return widened


def body(required: Fields | None = None, optional: Fields | None = None) -> Schema:
    """A JSON object body: these fields and no others; the optional ones may be null."""
    properties = dict(required or {}) | {name: nullable(schema) for name, schema in (optional or {}).items()}
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def query(required: Fields | None = None, optional: Fields | None = None) -> Schema:
    """The parameters of a query string: these and no others (a query has no null)."""
    schema: Schema = {"type": "object", "properties": dict(required or {}) | dict(optional or {}),
                    "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


NO_QUERY = query()


def variants(key: str, branches: dict[str, Schema], description: str | None = None) -> Schema:
    """A body whose fields depend on the value of one field, `key`: one body() per value."""
    schema: Schema = {"oneOf": [dict(branch, properties={key: {"const": value}} | branch["properties"],
                                   required=[key, *branch.get("required", ())])
                              for value, branch in branches.items()]}
    if description:
        schema["description"] = description
    return schema


def properties_of(schema: Schema) -> Fields:
    """The fields an object schema names (in any branch of a oneOf)."""
    found: Fields = {}
    for branch in schema.get("oneOf", [schema]):
        found.update(branch.get("properties", {}))
    return found

# -- answers -----------------------------------------------------------------------------------
# Answers are documentation and the measure of a test: they may use any JSON Schema keyword, and
# an object answer may hold more than it lists (a new field is not a break).

STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
ANY: Schema = {}
TIME_MS = {"type": "integer", "description": "milliseconds since 1970-01-01 UTC"}


def maybe(schema: Schema) -> Schema:
    """`schema` or null."""
    if "type" not in schema:
        return {"anyOf": [schema, {"type": "null"}]} if schema else schema
    kinds = [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
    widened = dict(schema, type=[*kinds, "null"] if "null" not in kinds else kinds)
    if "enum" in widened and None not in widened["enum"]:
        widened["enum"] = [*widened["enum"], None]
    return widened


def record(required: Fields, optional: Fields | None = None, description: str | None = None) -> Schema:
    """An object that always has the `required` fields and may have the `optional` ones."""
    schema: Schema = {"type": "object", "required": list(required),
                    "properties": dict(required) | dict(optional or {})}
    if description:
        schema["description"] = description
    return schema


def listing(item: Schema, description: str | None = None) -> Schema:
    schema: Schema = {"type": "array", "items": item}
    if description:
        schema["description"] = description
    return schema


def mapping(value: Schema, description: str | None = None) -> Schema:
    """An object whose keys are names and whose values are all `value`."""
    schema: Schema = {"type": "object", "additionalProperties": value}
    if description:
        schema["description"] = description
    return schema


def success(value: Schema | None = None, description: str = "Done") -> Schema:
    """The `$.success(value)` answer; its value is the id of what the action acted on unless told."""
    return record({"success": {"const": True}, "value": STRING if value is None else value}, description=description)


ID_ANSWER = success()
