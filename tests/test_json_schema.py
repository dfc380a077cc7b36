"""JSON schema -> grammar (edgellm._core.Grammar.from_json_schema): each supported keyword,
checked three ways -- hand-picked documents accepted/rejected, every accepted document valid
under the `jsonschema` package, and random walks through the grammar (random bytes among those
it allows) that must always end in a document `jsonschema` validates."""
import json
import random

import pytest

core = pytest.importorskip("edgellm._core")
jsonschema = pytest.importorskip("jsonschema")
Grammar = core.Grammar


def forms(doc):
    """The JSON texts of `doc` a model may write: compact, spaced, indented."""
    return [json.dumps(doc, separators=(",", ":"), ensure_ascii=False), json.dumps(doc, ensure_ascii=False),
            json.dumps(doc, indent=2, ensure_ascii=False)]


def random_walk(g, rng, max_len=400):
    """A random sentence of the grammar, built byte by byte (None if it ran too long)."""
    out = b""
    for _ in range(max_len):
        if g.accepts(out) and rng.random() < 0.3:
            return out
        choices = [b for b in range(256) if g.accepts_prefix(out + bytes([b]))]
        if not choices:
            assert g.accepts(out)
            return out
        # Favour closing characters so strings and containers end in reasonable time.
        weights = [12 if b in b'"]}' else 1 for b in choices]
        out += bytes([rng.choices(choices, weights)[0]])
    return None


def check_schema(schema, valid=(), invalid=(), walks=8, seed=0):
    g = Grammar.from_json_schema(schema)
    for doc in valid:
        jsonschema.validate(doc, schema)  # the test's own premise
        for text in forms(doc):
            assert g.accepts(text), (schema, text)
    for text in invalid:
        assert not g.accepts(text), (schema, text)
    rng = random.Random(seed)
    done = 0
    for _ in range(walks * 3):
        s = random_walk(g, rng)
        if s is None:
            continue
        doc = json.loads(s.decode("utf-8"))
        jsonschema.validate(doc, schema)
        done += 1
        if done == walks:
            break
    assert done >= walks // 2, "random walks rarely finished"
    return g


def test_nested_objects_required_optional_and_closed():
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"},
        "owner": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                  "required": ["name"], "additionalProperties": False},
        "active": {"type": "boolean"}},
        "required": ["id", "owner"], "additionalProperties": False}
    check_schema(schema,
                 valid=[{"id": 1, "owner": {"name": "a"}}, {"id": -7, "owner": {"name": "a", "email": "e"}, "active": True}],
                 invalid=['{"owner":{"name":"a"}}', '{"id":1}', '{"id":1,"owner":{"name":"a"},"x":1}',
                          '{"id":1,"owner":{"email":"e"}}', '{"id":1.5,"owner":{"name":"a"}}',
                          '{"id":1,"owner":{"name":"a"},}', '{"id":1,,"owner":{"name":"a"}}'])


def test_all_optional_members_any_subset_in_order():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                               "c": {"type": "integer"}}}
    g = check_schema(schema, valid=[{}, {"a": 1}, {"b": 2}, {"c": 3}, {"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3}])
    assert not g.accepts('{"a":1,}') and not g.accepts('{,"a":1}') and not g.accepts('{"d":1}')


def test_additional_properties_true_and_schema():
    open_schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
                   "additionalProperties": True}
    check_schema(open_schema, valid=[{"a": "x"}, {"a": "x", "extra": [1, {"y": None}]}], invalid=['{"extra":1}'])
    typed = {"type": "object", "additionalProperties": {"type": "integer"}}
    check_schema(typed, valid=[{}, {"k": 1, "j": 2}], invalid=['{"k":"v"}', '{"k":1.5}'])


def test_json_object_mode_is_any_object():
    g = check_schema({"type": "object"}, valid=[{}, {"a": [1, 2, {"b": None}], "c": "d"}],
                     invalid=['[]', '"x"', '1', '{"a":}', '{"a" 1}'])
    assert g.accepts('{"deep": {"deeper": {"deepest": [[[]]]}}}')


def test_arrays_min_max_items():
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}
    check_schema(schema, valid=[[1, 2], [1, 2, 3, 4]], invalid=["[1]", "[1,2,3,4,5]", "[]", "[1,,2]", '[1,"2"]'])
    check_schema({"type": "array", "maxItems": 0}, valid=[[]], invalid=["[1]"])
    check_schema({"type": "array", "items": {"type": "string"}}, valid=[[], ["a", "b"]], invalid=["[1]"])


def test_tuple_prefix_items():
    schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
    check_schema(schema, valid=[["a", 1]], invalid=['["a"]', '[1,"a"]', '["a",1,2]'])


def test_strings_enum_const_lengths_pattern_format():
    check_schema({"enum": ["red", "green", "blue"]}, valid=["red", "blue"], invalid=['"Red"', '"gree"', "red"])
    check_schema({"const": "fixed \"quoted\" é"}, valid=["fixed \"quoted\" é"], invalid=['"fixed"'])
    check_schema({"type": "string", "minLength": 2, "maxLength": 4}, valid=["ab", "abcd", "é\n€😀"],
                 invalid=['"a"', '"abcde"'])
    check_schema({"type": "string", "pattern": r"^\d{3}-[A-Z]{2}$"}, valid=["123-AB"], invalid=['"123-ab"', '"12-AB"'])
    # Pattern characters that need escaping inside a JSON string.
    check_schema({"type": "string", "pattern": r'^a"b\\c[^x]$'}, valid=['a"b\\cy'], invalid=['"a\\"b\\\\cx"'])
    check_schema({"type": "string", "format": "date"}, valid=["2024-02-29"], invalid=['"2024-13-01"', '"24-01-01"'])
    check_schema({"type": "string", "format": "date-time"}, valid=["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123+01:00"],
                 invalid=['"2024-01-02 03:04:05"'])
    check_schema({"type": "string", "format": "uuid"}, valid=["123e4567-e89b-12d3-a456-426614174000"],
                 invalid=['"123e4567e89b12d3a456426614174000"'])


@pytest.mark.parametrize("bounds", [
    {"minimum": 0, "maximum": 120}, {"minimum": -5, "maximum": 12}, {"minimum": -100, "maximum": -3},
    {"exclusiveMinimum": 10, "exclusiveMaximum": 100}, {"minimum": 7}, {"maximum": -7}, {"minimum": 95, "maximum": 1005},
    {"minimum": 0.5, "maximum": 9.5},
])
def test_integer_ranges_exact(bounds):
    schema = {"type": "integer", **bounds}
    g = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for n in range(-150, 1200):
        assert g.accepts(str(n)) == validator.is_valid(n), (bounds, n)
    assert not g.accepts("007") and not g.accepts("1.0")


def test_numbers_booleans_null():
    check_schema({"type": "number"}, valid=[0, -1.5, 3e10, 12], invalid=["01", "1.", ".5", "+1", "NaN"])
    check_schema({"type": "number", "minimum": 0}, valid=[0, 2.5], invalid=["-1", "-0.5"])
    check_schema({"type": "boolean"}, valid=[True, False], invalid=["True", "1"])
    check_schema({"type": "null"}, valid=[None], invalid=["nul", '"null"'])


def test_any_of_one_of_type_lists_nullable():
    check_schema({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]}, valid=[5, "abc"],
                 invalid=['"abcd"', "true"])
    check_schema({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                             "required": ["kind", "x"], "additionalProperties": False},
                            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
                             "required": ["kind", "y"], "additionalProperties": False}]},
                 valid=[{"kind": "a", "x": 1}, {"kind": "b", "y": "z"}], invalid=['{"kind":"a","y":"z"}'])
    check_schema({"type": ["string", "null"]}, valid=["s", None], invalid=["1"])
    # OpenAPI's nullable (jsonschema itself ignores the keyword, so no validation here).
    g = Grammar.from_json_schema({"type": "integer", "nullable": True})
    assert g.accepts("1") and g.accepts("null") and not g.accepts('"1"')


def test_defs_and_recursive_refs():
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}
    check_schema(schema, valid=[{"value": 1}, {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}],
                 invalid=['{"value":1,"children":[{"children":[]}]}'])
    legacy = {"definitions": {"color": {"enum": ["r", "g"]}},
              "type": "object", "properties": {"c": {"$ref": "#/definitions/color"}}, "required": ["c"]}
    check_schema(legacy, valid=[{"c": "r"}], invalid=['{"c":"b"}'])


def test_enum_and_const_of_any_json_value():
    check_schema({"enum": [1, "two", None, True, [1, 2], {"k": "v"}]},
                 valid=[1, "two", None, True], invalid=["2", '"one"', "false"])
    g = Grammar.from_json_schema({"const": {"a": [1, {"b": None}]}})
    assert g.accepts('{"a":[1,{"b":null}]}')
    assert not g.accepts('{"a":[1]}')


def test_all_of_merges_object_parts():
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    check_schema(schema, valid=[{"a": 1, "b": "x"}], invalid=['{"a":1}', '{"b":"x"}'])


def test_whitespace_is_bounded():
    g = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert g.accepts('{\n  "a": 1\n}')
    assert not g.accepts('{  "a": 1}')  # at most one space, or one newline plus indentation
    assert not g.accepts('{\n' + ' ' * 21 + '"a": 1}')
    assert not g.accepts(' {"a": 1}')


def test_true_and_empty_schema_mean_any_value():
    for schema in ({}, True):
        check_schema(schema, valid=[1, "s", None, [1], {"a": {}}], walks=4)


@pytest.mark.parametrize("schema,fragment", [
    ('{"type": "object",', "invalid JSON at offset"),
    ({"type": "strng"}, "unknown type 'strng'"),
    ({"$ref": "#/$defs/missing"}, "does not resolve"),
    ({"$ref": "http://example.com/s.json"}, "only local $ref"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "/properties/a"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "maxItems < minItems"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no integer"),
    ({"type": "string", "pattern": "(a"}, "/pattern"),
    ({"enum": []}, "non-empty"),
])
def test_schema_errors_name_the_path(schema, fragment):
    with pytest.raises(core.InvalidRequestError) as e:
        Grammar.from_json_schema(schema)
    assert fragment in str(e.value)


def test_gbnf_of_a_schema_is_readable_and_reparses():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    text = core.json_schema_to_gbnf(json.dumps(schema))
    assert text.startswith("root ::=") and "json-string" in text
    g = Grammar.from_gbnf(text)
    assert g.accepts('{"name": "x"}')


# ---- issue 17 item 7: every keyword honoured, or refused by name ----------------------------

HONOURED = [
    # allOf is an intersection
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, ["ab", ""], ['"abcd"', "1"]),
    ({"allOf": [{"type": "number", "minimum": 2}, {"type": "integer", "maximum": 5}]}, [2, 5], ["1", "6", "2.5"]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"b": {"type": "string"}}}]},
     [{"a": 1}, {}], ['{"a":1,"b":"x"}']),
    ({"allOf": [{"allOf": [{"type": "integer"}, {"minimum": 0}]}, {"maximum": 3}]}, [0, 3], ["-1", "4"]),
    ({"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]}, ["b", "c"], ['"a"', '"d"']),
    ({"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"anyOf": [{"type": "string"}, {"type": "null"}]}]},
     ["s"], ["1", "null"]),
    # keywords beside $ref, anyOf and enum hold too
    ({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2}, ["ab"], ['"abc"', "1"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "additionalProperties": False},
     [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}], ["{}"]),
    ({"type": "string", "enum": ["a", 1, "b"]}, ["a", "b"], ["1"]),
    ({"type": "integer", "minimum": 2, "enum": [1, 2, 3]}, [2, 3], ["1"]),
    ({"type": "integer", "const": 3}, [3], ["4"]),
    # number bounds (integer-valued) and multipleOf 1 / 10^-k
    ({"type": "number", "minimum": 0, "maximum": 1}, [0, 0.5, 1, 0.25], ["1.5", "-0.1", "2", "1.01"]),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [0.5, 9.99, 5], ["0", "10", "10.0", "-1"]),
    ({"type": "number", "minimum": -5, "maximum": -2}, [-5, -2.5, -2], ["-1.5", "-5.5", "0"]),
    ({"type": "number", "minimum": -1, "exclusiveMaximum": 1}, [-1, -0.5, 0, 0.75], ["1", "-1.5"]),
    ({"type": "number", "multipleOf": 0.01}, [1.25, 3, -0.5], ["1.255"]),
    ({"type": "number", "multipleOf": 1, "minimum": 0, "maximum": 9}, [3, 9], ["3.5", "10"]),
    ({"type": "integer", "multipleOf": 1}, [7], ["7.5"]),
    # arrays
    ({"type": "array", "uniqueItems": True, "maxItems": 1}, [[], [1]], ["[1,1]"]),
    ({"type": "array", "uniqueItems": False, "items": {"type": "integer"}}, [[1, 1]], ['["a"]']),
    ({"prefixItems": [{"type": "integer"}, {"type": "string"}], "maxItems": 1, "type": "array"}, [[1]], ['[1,"a"]']),
    ({"prefixItems": [{"type": "integer"}], "items": {"type": "string"}, "minItems": 2, "type": "array"},
     [[1, "a"], [1, "a", "b"]], ["[1]", "[1,2]"]),
    ({"type": "array", "items": False}, [[]], ["[1]"]),
    # objects
    ({"type": "object", "required": ["x"], "additionalProperties": {"type": "integer"}}, [{"x": 1}, {"x": 1, "y": 2}],
     ['{"x":"s"}', "{}"]),
    ({"type": "object", "properties": {"a": False, "b": {"type": "integer"}}}, [{"b": 1}, {}], ['{"a":1}']),
    # type-specific keywords without a type constrain only values of that type
    ({"maxLength": 2}, ["ab", 5, None, [1], {"k": 1}], ['"abc"']),
    # annotations are ignored
    ({"type": "integer", "title": "n", "description": "a number", "default": 1, "examples": [2], "$comment": "c",
      "deprecated": False, "x-vendor": {}}, [1], ['"1"']),
    ({"type": "string", "format": "email"}, ["a@b.c", "anything"], ["1"]),  # format: an annotation here
]


@pytest.mark.parametrize("schema,valid,invalid", HONOURED, ids=[json.dumps(s)[:60] for s, _, _ in HONOURED])
def test_keywords_are_honoured(schema, valid, invalid):
    check_schema(schema, valid=valid, invalid=invalid, walks=6)


REFUSED = [
    # unsatisfiable
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf is unsatisfiable"),
    ({"allOf": [{"enum": ["a"]}, {"enum": ["b"]}]}, "allOf is unsatisfiable"),
    ({"allOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": False},
                {"required": ["b"]}]}, "'b' is required but"),
    ({"type": "object", "required": ["x"], "additionalProperties": False}, "'x' is required but additionalProperties is false"),
    ({"type": "string", "const": 3}, "no value of it satisfies"),
    ({"type": "number", "minimum": 3, "exclusiveMaximum": 3}, "no number satisfies"),
    ({"type": "array", "prefixItems": [{}], "items": False, "minItems": 2}, "/minItems"),
    # cannot be honoured
    ({"type": "integer", "multipleOf": 0}, "#/multipleOf: multipleOf must be a number greater than 0"),
    ({"type": "number", "multipleOf": -2}, "multipleOf must be a number greater than 0"),
    ({"type": "integer", "multipleOf": 3}, "multipleOf 3 cannot be honoured"),
    ({"type": "number", "multipleOf": 0.3}, "multipleOf 0.3 cannot be honoured"),
    ({"type": "number", "maximum": 1.5}, "#/maximum: maximum 1.5 cannot be honoured"),
    ({"type": "array", "uniqueItems": True}, "#/uniqueItems"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "together with pattern"),
    ({"type": "string", "format": "date", "maxLength": 3}, "together with format 'date'"),
    ({"enum": ["a", "bb"], "pattern": "^a$"}, "enum/const together with 'pattern'"),
    ({"allOf": [{"pattern": "^a$"}, {"pattern": "^b$"}]}, "'pattern' in more than one member"),
    # not supported at all: the keyword and its path are named
    ({"not": {"type": "string"}}, "#/not: keyword 'not' is not supported"),
    ({"type": "object", "properties": {"a": {"if": {}, "then": {}}}}, "#/properties/a/if: keyword 'if'"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "keyword 'patternProperties'"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "keyword 'propertyNames'"),
    ({"type": "object", "minProperties": 1}, "keyword 'minProperties'"),
    ({"type": "object", "maxProperties": 1}, "keyword 'maxProperties'"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "keyword 'dependentRequired'"),
    ({"type": "object", "dependencies": {"a": ["b"]}}, "keyword 'dependencies'"),
    ({"type": "object", "unevaluatedProperties": False}, "keyword 'unevaluatedProperties'"),
    ({"type": "array", "contains": {"type": "integer"}}, "keyword 'contains'"),
    ({"type": "array", "items": {"type": "string", "minContains": 1}}, "#/items/minContains"),
    ({"$dynamicRef": "#node"}, "keyword '$dynamicRef'"),
]


@pytest.mark.parametrize("schema,fragment", REFUSED, ids=[json.dumps(s)[:60] for s, _ in REFUSED])
def test_unsatisfiable_or_unsupported_keywords_are_named(schema, fragment):
    with pytest.raises(core.InvalidRequestError) as e:
        Grammar.from_json_schema(schema)
    assert fragment in str(e.value)


def test_deep_schemas_are_typed_errors_naming_the_limit():
    """Issue 17 item 6: a schema dict nested 10,000 deep raised RecursionError from json.dumps;
    deep schema text stops at the parser's (256) or the compiler's (128) nesting limit."""
    deep = {}
    cur = deep
    for _ in range(10_000):
        cur["items"] = {}
        cur = cur["items"]
    with pytest.raises(core.InvalidRequestError, match="cannot be serialised"):
        Grammar.from_json_schema(deep)
    with pytest.raises(core.InvalidRequestError, match="deeper than 128 levels"):
        Grammar.from_json_schema('{"items":' * 200 + "{}" + "}" * 200)
    with pytest.raises(core.InvalidRequestError, match="nesting deeper than 256"):
        Grammar.from_json_schema('{"allOf":[' * 300 + "{}" + "]}" * 300)
    circular = {"type": "object"}
    circular["properties"] = {"self": circular}
    with pytest.raises(core.InvalidRequestError, match="cannot be serialised"):
        Grammar.from_json_schema(circular)
