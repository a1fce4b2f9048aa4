"""A validator for the small subset of JSON Schema that the tool arguments use.

Supported: `type` (object, string, integer, number, boolean, array), `properties`, `required`,
`additionalProperties: false`, `enum`, `minimum`, `maximum`, `minLength`, `maxLength`, `items`,
and the annotations `description` and `default`. `validate()` lists every problem at once, each
naming the field and the rule ("offset: must be an integer ≥ 1"), so that a model can fix all
of them in one retry. `check_schema()` refuses any other keyword, so a typo in a tool's schema
fails when the registry is built instead of silently validating nothing.

Must not: import a third-party package, coerce values, or know about any particular tool.
"""

from __future__ import annotations

import json
import math

SUPPORTED_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum",
    "minLength", "maxLength", "items", "maxItems", "description", "default",
})
SUPPORTED_TYPES = frozenset({"object", "string", "integer", "number", "boolean", "array"})
ROOT_NAME = "arguments"


def check_schema(schema: dict, where: str = ROOT_NAME) -> None:
    """Refuse a schema that uses anything this validator does not understand.

    Raises ValueError naming the place and the keyword.
    """
    if not isinstance(schema, dict):
        raise ValueError(f"{where}: a schema must be an object")
    for keyword in schema:
        if keyword not in SUPPORTED_KEYWORDS:
            raise ValueError(f"{where}: unsupported schema keyword {keyword!r}")
    kind = schema.get("type")
    if kind not in SUPPORTED_TYPES:
        raise ValueError(f"{where}: type must be one of {', '.join(sorted(SUPPORTED_TYPES))}")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError(f"{where}: only additionalProperties: false is supported")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, _join(where, name))
    for name in schema.get("required", ()):
        if name not in schema.get("properties", {}):
            raise ValueError(f"{where}: required {name!r} is not among the properties")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")


def validate(schema: dict, value, where: str = "") -> list[str]:
    """Every problem of `value` against `schema`, as "field: must be ..." texts; [] when valid."""
    name = where or ROOT_NAME
    if not _has_type(value, schema["type"]):
        return [f"{name}: must be {describe(schema)}"]
    problems: list[str] = []
    if (("enum" in schema and value not in schema["enum"])
            or (schema["type"] in ("integer", "number") and not _in_range(value, schema))
            or (schema["type"] == "string" and not _in_length(value, schema))):
        problems.append(f"{name}: must be {describe(schema)}")
    if schema["type"] == "object":
        problems.extend(_validate_object(schema, value, where))
    elif schema["type"] == "array" and len(value) > schema.get("maxItems", len(value)):
        problems.append(f"{name}: must have at most {schema['maxItems']} items")
    elif schema["type"] == "array" and "items" in schema:
        for index, item in enumerate(value):
            problems.extend(validate(schema["items"], item, f"{name}[{index}]"))
    return problems


def describe(schema: dict) -> str:
    """What a value must be, in words: "an integer from 1 to 5000", "a non-empty string"."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(option) for option in schema["enum"])
    kind = schema["type"]
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"{noun} from {low} to {high}"
        if low is not None:
            return f"{noun} ≥ {low}"
        if high is not None:
            return f"{noun} ≤ {high}"
        return noun
    if kind == "string":
        shortest, longest = schema.get("minLength", 0), schema.get("maxLength")
        noun = "a non-empty string" if shortest == 1 else "a string"
        if shortest > 1 and longest is not None:
            return f"a string of {shortest} to {longest} characters"
        if shortest > 1:
            return f"a string of at least {shortest} characters"
        if longest is not None:
            return f"{noun} of at most {longest} characters"
        return noun
    return {"boolean": "true or false", "array": "an array", "object": "an object"}[kind]


def _validate_object(schema: dict, value: dict, where: str) -> list[str]:
    problems = []
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            problems.append(f"{_join(where, name)}: is required")
    for name, item in value.items():
        if name in properties:
            problems.extend(validate(properties[name], item, _join(where, name)))
        elif schema.get("additionalProperties", True) is False:
            known = ", ".join(properties) or "none"
            problems.append(f"{_join(where, name)}: is not a known argument (known: {known})")
    return problems


def _has_type(value, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    # JSON Schema: 5.0 is an integer (the JSON text has no separate integer type).
    return kind == "number" or isinstance(value, int) or value.is_integer()


def _in_range(value, schema: dict) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    return (low is None or value >= low) and (high is None or value <= high)


def _in_length(value: str, schema: dict) -> bool:
    longest = schema.get("maxLength")
    return len(value) >= schema.get("minLength", 0) and (longest is None or len(value) <= longest)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
