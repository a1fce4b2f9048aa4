"""The registry, the OpenAI tool specs, argument parsing and the schema validator."""

from __future__ import annotations

import json

import pytest

from totem.schema import check_schema, describe, validate
from totem.tools import Registry, Tool, ToolError, default_registry

# A 20-tool request must stay lean for small local models: three tools stay well under this.
SPEC_BUDGET_BYTES_PER_TOOL = 600  # lean: small local models pay for every byte


def parse(name: str, arguments: str):
    return default_registry().parse_arguments(name, arguments)


def error_of(name: str, arguments) -> str:
    with pytest.raises(ToolError) as caught:
        default_registry().parse_arguments(name, arguments)
    return str(caught.value)


def test_registry_default_names():
    """The default registry holds the built-in tools, read-only ones first."""
    registry = default_registry()
    assert registry.names()[:3] == ["read", "glob", "grep"]
    assert {"skill", "todo", "ask"} <= set(registry.names())
    assert registry.get("read").name == "read"
    assert registry.get("nosuch") is None
    assert {"write", "edit", "patch", "bash"} <= set(registry.names())


def test_registry_specs_shape():
    """Each spec is an OpenAI function tool whose parameters are an object schema."""
    for spec in default_registry().specs():
        assert set(spec) == {"type", "function"}
        assert spec["type"] == "function"
        function = spec["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert function["parameters"]["type"] == "object"
        assert function["parameters"]["additionalProperties"] is False
        assert set(function["parameters"]["required"]) <= set(function["parameters"]["properties"])


def test_registry_specs_compact():
    """Descriptions are short single lines without doubled spaces, and the whole array is small."""
    specs = default_registry().specs()
    texts = [spec["function"]["description"] for spec in specs]
    for spec in specs:
        texts += [p.get("description", "") for p in spec["function"]["parameters"]["properties"].values()]
    for text in texts:
        assert "\n" not in text and "  " not in text and text == text.strip()
        assert len(text) <= 80
    size = len(json.dumps(specs))
    print(f"default_registry().specs(): {size} bytes")
    assert size < SPEC_BUDGET_BYTES_PER_TOOL * len(specs)


def test_registry_duplicate_name_refused():
    """Two tools with one name are a programming error, caught when the registry is built."""
    first, second = Tool(), Tool()
    first.name = second.name = "twin"
    with pytest.raises(ValueError):
        Registry([first, second])


def test_registry_unsupported_schema_refused():
    """A schema keyword the validator does not know fails at build time, not silently."""
    tool = Tool()
    tool.name = "odd"
    tool.schema = {"type": "object", "properties": {"x": {"type": "string", "format": "email"}}}
    with pytest.raises(ValueError, match="format"):
        Registry([tool])


def test_parse_arguments_valid():
    """Valid JSON arguments come back as the tool and a dict."""
    tool, args = parse("read", '{"path": "a.py", "offset": 3, "limit": 10}')
    assert tool.name == "read"
    assert args == {"path": "a.py", "offset": 3, "limit": 10}


def test_parse_arguments_unknown_tool():
    """An unknown tool name is refused with the list of known tools."""
    message = error_of("cat", '{"path": "a"}')
    assert message == "unknown tool 'cat'; the tools are: " + ", ".join(default_registry().names())


def test_parse_arguments_malformed_json():
    """Malformed JSON is refused, saying where the problem is."""
    message = error_of("read", '{"path": "a.py" "offset": 2}')
    assert message.startswith("the arguments of read are not valid JSON: Expecting ',' delimiter")
    assert "line 1, column 17" in message


def test_parse_arguments_not_an_object():
    """Arguments that are valid JSON but not an object are refused."""
    assert error_of("read", '["a.py"]') == "the arguments of read must be a JSON object, not an array"


def test_parse_arguments_missing_required():
    """A missing required argument is named."""
    assert error_of("read", "{}") == "invalid arguments for read: path: is required"


def test_parse_arguments_empty_text_means_no_arguments():
    """An empty arguments text is an empty object (then the schema decides)."""
    assert error_of("glob", "") == "invalid arguments for glob: pattern: is required"


def test_parse_arguments_wrong_type():
    """A value of the wrong type names the field and the whole rule."""
    assert error_of("read", '{"path": "a", "offset": "10"}') == \
        "invalid arguments for read: offset: must be an integer ≥ 1"
    assert error_of("grep", '{"pattern": "x", "ignore_case": "yes"}') == \
        "invalid arguments for grep: ignore_case: must be true or false"


def test_parse_arguments_out_of_range():
    """A number out of range names the range."""
    assert error_of("read", '{"path": "a", "limit": 6000}') == \
        "invalid arguments for read: limit: must be an integer from 1 to 5000"
    assert error_of("read", '{"path": "a", "offset": 0}') == \
        "invalid arguments for read: offset: must be an integer ≥ 1"


def test_parse_arguments_additional_property():
    """An argument the tool does not have is named, with the known ones."""
    assert error_of("read", '{"path": "a", "lines": 5}') == \
        "invalid arguments for read: lines: is not a known argument (known: path, offset, limit)"


def test_parse_arguments_every_problem_listed():
    """All problems are listed at once, so one retry can fix them all."""
    message = error_of("read", '{"offset": -1, "x": 1}')
    assert message == ("invalid arguments for read: path: is required; "
                       "offset: must be an integer ≥ 1; x: is not a known argument "
                       "(known: path, offset, limit)")


def test_parse_arguments_empty_string_refused():
    """A required string with minLength 1 refuses the empty string."""
    assert error_of("glob", '{"pattern": ""}') == \
        "invalid arguments for glob: pattern: must be a non-empty string"


def test_parse_arguments_null_optional_is_absent():
    """An optional argument sent as null counts as absent (OpenAI strict mode sends null)."""
    _, args = parse("read", '{"path": "a.py", "offset": null}')
    assert args == {"path": "a.py"}
    assert error_of("read", '{"path": null}') == \
        "invalid arguments for read: path: must be a non-empty string"


def test_parse_arguments_boolean_is_not_an_integer():
    """true is not accepted where an integer is required."""
    assert "offset: must be an integer" in error_of("read", '{"path": "a", "offset": true}')


def test_parse_arguments_integral_float_accepted():
    """5.0 is an integer in JSON Schema."""
    _, args = parse("read", '{"path": "a", "limit": 5.0}')
    assert args["limit"] == 5.0


def test_parse_arguments_nan_refused():
    """NaN and Infinity are not JSON and are refused."""
    assert "not valid JSON" in error_of("read", '{"path": "a", "offset": NaN}')


def test_parse_arguments_deep_nesting_refused():
    """Absurdly nested JSON is refused as an error, not a crash."""
    assert "not valid JSON" in error_of("read", "[" * 100_000 + "]" * 100_000)


def test_parse_arguments_decoded_dict_accepted():
    """Arguments already decoded by a provider are validated the same way."""
    tool, args = default_registry().parse_arguments("grep", {"pattern": "x"})
    assert (tool.name, args) == ("grep", {"pattern": "x"})


@pytest.mark.parametrize("schema, value, problems", [
    ({"type": "string", "enum": ["a", "b"]}, "c", ['arguments: must be one of "a", "b"']),
    ({"type": "string", "maxLength": 3}, "abcd", ["arguments: must be a string of at most 3 characters"]),
    ({"type": "string", "minLength": 2, "maxLength": 4}, "a", ["arguments: must be a string of 2 to 4 characters"]),
    ({"type": "number", "maximum": 1.5}, 2, ["arguments: must be a number ≤ 1.5"]),
    ({"type": "number"}, float("inf"), ["arguments: must be a number"]),
    ({"type": "array", "items": {"type": "string"}}, ["a", 1, "b", None],
     ["arguments[1]: must be a string", "arguments[3]: must be a string"]),
    ({"type": "object", "properties": {"o": {"type": "object", "properties": {"n": {"type": "integer"}},
                                             "required": ["n"]}}}, {"o": {}}, ["o.n: is required"]),
    ({"type": "object", "properties": {"o": {"type": "object", "properties": {"n": {"type": "integer"}}}}},
     {"o": {"n": 1.5}}, ["o.n: must be an integer"]),
    ({"type": "object", "properties": {}}, {"free": 1}, []),
    ({"type": "integer", "minimum": 1, "maximum": 3}, 2, []),
    ({"type": "string", "pattern": "^[a-z]+$"}, "aB", ["arguments: must be a string matching ^[a-z]+$"]),
    ({"type": ["string", "null"], "maxLength": 2}, None, []),
    ({"type": ["string", "null"]}, 3, ["arguments: must be a string or null"]),
    ({"type": "array", "minItems": 1, "maxItems": 2}, [], ["arguments: must have from 1 to 2 items"]),
    ({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}, "v": {"type": "integer"}}, "required": ["k"]},
                {"type": "object", "properties": {"k": {"const": "b"}, "v": {"type": "string"}}, "required": ["k"]}]},
     {"k": "b", "v": 1}, ["v: must be a string"]),
    ({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]}]},
     {"k": "c"}, ['k: must be one of "a"']),
])
def test_schema_validate_table(schema, value, problems):
    """The validator's answers for each supported keyword."""
    check_schema(schema)
    assert validate(schema, value) == problems


def test_schema_describe_plain_types():
    """Each type has a plain description used in every message."""
    assert describe({"type": "boolean"}) == "true or false"
    assert describe({"type": "integer"}) == "an integer"
    assert describe({"type": "string"}) == "a string"
    assert describe({"type": "array"}) == "an array"


def test_schema_check_refuses_bad_required():
    """A required name that is not a property is a mistake in the schema."""
    with pytest.raises(ValueError, match="required"):
        check_schema({"type": "object", "properties": {}, "required": ["x"]})
    with pytest.raises(ValueError, match="additionalProperties"):
        check_schema({"type": "object", "additionalProperties": True})
    with pytest.raises(ValueError, match="type"):
        check_schema({"type": "null"})
