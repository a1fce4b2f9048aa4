"""A validator for the small subset of JSON Schema that tool arguments and API inputs use (pure:
the routes that answer before the core import it, so it lives outside the tools package).

Supported: `type` (object, string, integer, number, boolean, array; or a list of them, which
may add null), `properties`, `required`, `additionalProperties: false`, `enum`, `const`,
`minimum`, `maximum`, `minLength`, `maxLength`, `pattern` (searched, as JSON Schema says),
`items`, `minItems`, `maxItems`, `minProperties`, `maxProperties`, `anyOf` of `required`
lists (which fields go together), `oneOf` of objects told apart by one property's `const`
(OpenAPI's discriminator), and the annotations `description`,
`default` and `examples` (a schema of annotations alone takes any value). `problems()` finds
every problem at once, each with the field, the rule and the schema that was broken;
`validate()` words them ("offset: must be an integer ≥ 1") so that a model can fix all of them
in one retry, and the REST API words them its own way from the same problems. `check_schema()`
refuses any other keyword, so a typo in a schema fails when it is declared instead of silently
validating nothing.

Must not: import a third-party package, coerce values, or know about any particular tool or action.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

SUPPORTED_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum",
    "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "minProperties", "maxProperties",
    "anyOf", "oneOf", "const",
    "description", "default", "examples",
})
ANNOTATIONS = frozenset({"description", "default", "examples"})
SUPPORTED_TYPES = frozenset({"object", "string", "integer", "number", "boolean", "array"})
NULL = "null"
ROOT_NAME = "arguments"


@dataclass(frozen=True)
class Problem:
    """One broken rule: `where` the value is ("" for the whole value, "o.n", "items[2]"), which
    rule (type, enum, range, length, pattern, count, size, required, unknown), its schema and value."""

    where: str
    rule: str
    schema: dict
    value: Any = None


def check_schema(schema: dict, where: str = ROOT_NAME) -> None:
    """Refuse a schema that uses anything this validator does not understand.

    Raises ValueError naming the place and the keyword.
    """
    if not isinstance(schema, dict):
        raise ValueError(f"{where}: a schema must be an object")
    for keyword in schema:
        if keyword not in SUPPORTED_KEYWORDS:
            raise ValueError(f"{where}: unsupported schema keyword {keyword!r}")
    if "oneOf" in schema:
        _check_one_of(schema, where)
        return
    if "const" in schema and "type" not in schema:
        return  # a constant of any type (the discriminator of a branch of oneOf)
    if not set(schema) - ANNOTATIONS:
        return  # no rule: any value
    kinds = types_of(schema)
    if not kinds or not set(kinds) <= SUPPORTED_TYPES | {NULL} or kinds == (NULL,) or len(set(kinds)) != len(kinds):
        raise ValueError(f"{where}: type must be one of {', '.join(sorted(SUPPORTED_TYPES))} (or a list of "
                         "them, which may add null)")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError(f"{where}: only additionalProperties: false is supported")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, _join(where, name))
    for name in schema.get("required", ()):
        if name not in schema.get("properties", {}):
            raise ValueError(f"{where}: required {name!r} is not among the properties")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")
    for branch in schema.get("anyOf", ()):
        if not isinstance(branch, dict) or set(branch) - {"required", "description"} \
                or not set(branch.get("required", ())) <= set(schema.get("properties", {})):
            raise ValueError(f"{where}: each branch of anyOf is a required list of the properties")
    if "pattern" in schema:
        try:
            _compiled(schema["pattern"])
        except re.error as exc:
            raise ValueError(f"{where}: pattern does not compile: {exc}") from None


def _check_one_of(schema: dict, where: str) -> None:
    branches = schema["oneOf"]
    if set(schema) - {"oneOf", "description"} or not isinstance(branches, list) or not branches:
        raise ValueError(f"{where}: oneOf stands alone, as a non-empty list of object schemas")
    keys = set()
    for index, branch in enumerate(branches):
        check_schema(branch, f"{where}.oneOf[{index}]")
        keys.add(_discriminator(branch))
    if len(keys) != 1 or None in keys:
        raise ValueError(f"{where}: each branch of oneOf must be an object with the same one required "
                         "property set by const")


def _discriminator(branch: dict) -> str | None:
    """The property that tells a branch of oneOf apart: the one required property with a const."""
    if types_of(branch) != ("object",):
        return None
    named = [name for name in branch.get("required", ()) if "const" in branch.get("properties", {}).get(name, {})]
    return named[0] if len(named) == 1 else None


def types_of(schema: dict) -> tuple[str, ...]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,)
    return tuple(kind) if isinstance(kind, list) and all(isinstance(k, str) for k in kind) else ()


def problems(schema: dict, value, where: str = "") -> list[Problem]:
    """Every problem of `value` against `schema`; [] when valid. A value breaks at most one rule
    of its own (its type first), and an object's or array's members are checked when it has the
    right type."""
    if "oneOf" in schema:
        return _one_of_problems(schema, value, where)
    if "const" in schema and "type" not in schema:
        return [] if value == schema["const"] else [Problem(where, "enum", schema, value)]
    if not set(schema) - ANNOTATIONS:
        return []
    kinds = types_of(schema)
    if not any(_has_type(value, kind) for kind in kinds):
        return [Problem(where, "type", schema, value)]
    if value is None:
        return []
    rule = None
    if "enum" in schema and value not in schema["enum"] or "const" in schema and value != schema["const"]:
        rule = "enum"
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and not _in_range(value, schema):
        rule = "range"
    elif isinstance(value, str) and not _in_length(value, schema):
        rule = "length"
    elif isinstance(value, str) and "pattern" in schema and not _compiled(schema["pattern"]).search(value):
        rule = "pattern"
    elif isinstance(value, list) and not _in_count(value, schema):
        rule = "count"
    if rule is not None:
        return [Problem(where, rule, schema, value)]
    if isinstance(value, dict):  # how many fields it has, and what each of them is
        size = [] if _in_size(value, schema) else [Problem(where, "size", schema, value)]
        return size + _object_problems(schema, value, where)
    if isinstance(value, list) and "items" in schema:
        return [problem for index, item in enumerate(value)
                for problem in problems(schema["items"], item, f"{where or ROOT_NAME}[{index}]")]
    return []


def validate(schema: dict, value, where: str = "") -> list[str]:
    """Every problem of `value` against `schema`, as "field: must be ..." texts; [] when valid."""
    return [_words(problem) for problem in problems(schema, value, where)]


def _words(problem: Problem) -> str:
    name = problem.where or ROOT_NAME
    if problem.rule == "required":
        return f"{name}: is required"
    if problem.rule == "unknown":
        known = ", ".join(problem.schema.get("properties", {})) or "none"
        return f"{name}: is not a known argument (known: {known})"
    if problem.rule == "count":
        return f"{name}: must have {count_words(problem.schema)} items"
    if problem.rule == "size":
        return f"{name}: must have {count_words(problem.schema, 'Properties')} fields"
    return f"{name}: must be {describe(problem.schema)}"


def count_words(schema: dict, of: str = "Items") -> str:
    """How many items an array may have (or with of="Properties", fields an object): "at most
    5", "from 1 to 50"."""
    fewest, most = schema.get(f"min{of}", 0), schema.get(f"max{of}")
    if most is None:
        return f"at least {fewest}"
    return f"from {fewest} to {most}" if fewest else f"at most {most}"


def describe(schema: dict) -> str:
    """What a value must be, in words: "an integer from 1 to 5000", "a non-empty string"."""
    if "oneOf" in schema:
        return "an object"
    kinds = types_of(schema)
    kind = next((k for k in kinds if k != NULL), NULL)
    text = _describe_kind(schema, kind)
    return f"{text} or null" if NULL in kinds and "enum" not in schema else text


def _describe_kind(schema: dict, kind: str) -> str:
    if "enum" in schema or "const" in schema:
        options = schema["enum"] if "enum" in schema else [schema["const"]]
        return "one of " + ", ".join(json.dumps(option) for option in options)
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
            noun = f"a string of {shortest} to {longest} characters"
        elif shortest > 1:
            noun = f"a string of at least {shortest} characters"
        elif longest is not None:
            noun = f"{noun} of at most {longest} characters"
        return noun + (f" matching {schema['pattern']}" if "pattern" in schema else "")
    return {"boolean": "true or false", "array": "an array", "object": "an object", NULL: "null"}[kind]


def _object_problems(schema: dict, value: dict, where: str) -> list[Problem]:
    found = []
    properties = schema.get("properties", {})
    required = list(schema.get("required", ()))
    branches = schema.get("anyOf", ())
    if branches and not any(all(name in value for name in branch["required"]) for branch in branches):
        # The fields of the branch closest to what was given: the most of them there, then the last.
        closest = max(reversed(branches), key=lambda branch: sum(name in value for name in branch["required"]))
        required += closest["required"]
    for name in required:
        if name not in value:
            found.append(Problem(_join(where, name), "required", properties[name]))
    for name, item in value.items():
        if name in properties:
            found.extend(problems(properties[name], item, _join(where, name)))
        elif schema.get("additionalProperties", True) is False:
            found.append(Problem(_join(where, name), "unknown", schema, item))
    return found


def _one_of_problems(schema: dict, value, where: str) -> list[Problem]:
    """The branch whose discriminator matches decides; without one, the discriminator is wrong."""
    branches = schema["oneOf"]
    if not isinstance(value, dict):
        return [Problem(where, "type", branches[0], value)]
    key = _discriminator(branches[0])
    assert key is not None  # check_schema made sure
    for branch in branches:
        if value.get(key, _ABSENT) == branch["properties"][key]["const"]:
            return problems(branch, value, where)
    choices = {**branches[0]["properties"][key]}
    choices.pop("const")
    choices["enum"] = [branch["properties"][key]["const"] for branch in branches]
    if key not in value:
        return [Problem(_join(where, key), "required", choices)]
    return [Problem(_join(where, key), "enum", choices, value[key])]


_ABSENT = object()


def _has_type(value, kind: str) -> bool:
    if kind == NULL:
        return value is None
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


@cache
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _in_range(value, schema: dict) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    return (low is None or value >= low) and (high is None or value <= high)


def _in_length(value: str, schema: dict) -> bool:
    longest = schema.get("maxLength")
    return len(value) >= schema.get("minLength", 0) and (longest is None or len(value) <= longest)


def _in_size(value: dict, schema: dict) -> bool:
    most = schema.get("maxProperties")
    return len(value) >= schema.get("minProperties", 0) and (most is None or len(value) <= most)


def _in_count(value: list, schema: dict) -> bool:
    most = schema.get("maxItems")
    return len(value) >= schema.get("minItems", 0) and (most is None or len(value) <= most)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
