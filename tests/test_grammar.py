"""Grammar engine (edgellm._core.Grammar): GBNF syntax, regex subset, UTF-8 handling, errors,
and token masks over the real vocabularies checked against a token-by-token brute force."""
import re

import numpy as np
import pytest

core = pytest.importorskip("edgellm._core")
Grammar = core.Grammar


def gbnf(text):
    return Grammar.from_gbnf(text)


# ---- GBNF ------------------------------------------------------------------------------------

@pytest.mark.parametrize("grammar,accepted,rejected", [
    ('root ::= "hello"', ["hello"], ["hell", "hello!", ""]),
    ('root ::= "a" | "b" | "cd"', ["a", "b", "cd"], ["c", "ab", ""]),
    ('root ::= ("a" | "b") "c"', ["ac", "bc"], ["c", "abc"]),
    ('root ::= [a-c]+', ["a", "abcabc"], ["", "d", "abd"]),
    ('root ::= [^a-c]', ["d", "Z", "é", "😀"], ["a", "b", "", "dd"]),
    ('root ::= .', ["x", "é", "€", "😀", "\n"], ["", "xy"]),
    ('root ::= "x"*', ["", "x", "xxxx"], ["y"]),
    ('root ::= "x"?', ["", "x"], ["xx"]),
    ('root ::= "x"{3}', ["xxx"], ["xx", "xxxx"]),
    ('root ::= "x"{2,}', ["xx", "xxxxxx"], ["x"]),
    ('root ::= "x"{1,3}', ["x", "xx", "xxx"], ["", "xxxx"]),
    ('root ::= "x"{,2}', ["", "x", "xx"], ["xxx"]),
    ('root ::= "\\n\\t\\"\\\\" "\\x41\\u00e9\\U0001F600"', ['\n\t"\\Aé😀'], ["\n\t"]),
    ('root ::= [\\]\\[\\-]+', ["]", "[-]"], ["a"]),
    ('root ::= "a" # a comment\n  | "b" # another\n', ["a", "b"], ["#"]),
    ('root ::= item ("," item)*\nitem ::= [0-9]+', ["1", "12,3,456"], ["1,", ",1", ""]),
    ('root ::= "(" root ")" | ""', ["", "()", "((()))"], ["(()", ")("]),
    ('root ::=\n  "a"\n  "b"\nother ::= "c"', ["ab"], ["a", "c"]),
    ('root ::= [a-zA-Z_][a-zA-Z0-9_]*', ["_x1", "Abc"], ["1x", ""]),
])
def test_gbnf_accepts_and_rejects(grammar, accepted, rejected):
    g = gbnf(grammar)
    for s in accepted:
        assert g.accepts(s), (grammar, s)
    for s in rejected:
        assert not g.accepts(s), (grammar, s)


def test_prefix_and_matcher():
    g = gbnf('root ::= "ab" [0-9]+ "!"')
    assert g.accepts_prefix("ab1")
    assert not g.accepts_prefix("ac")
    m = g.matcher()
    assert m.accept("ab")
    assert not m.is_complete and m.can_continue
    assert not m.accept("x")  # rejected: state unchanged
    assert m.accept(b"12") and m.accept("!")
    assert m.is_complete and not m.can_continue


def test_partial_utf8_bytes():
    g = gbnf('root ::= "é" [€-€]')
    enc = "é€".encode()
    m = g.matcher()
    for i in range(len(enc)):  # one byte at a time: partial characters are intermediate states
        assert m.accept(enc[i:i + 1])
        assert m.is_complete == (i == len(enc) - 1)
    # A byte that cannot continue the character is rejected mid-character.
    m2 = g.matcher()
    assert m2.accept(enc[:1])
    assert not m2.accept(b"\x41")
    assert not g.accepts_prefix(b"\xff")


def test_long_repetitions_do_not_grow_state_space():
    g = gbnf('root ::= ([a-z] | " ")* "."')
    assert g.accepts("the quick brown fox " * 200 + ".")
    assert g.stats()["states"] < 20


@pytest.mark.parametrize("text,fragment", [
    ('root ::= foo', "undefined rule 'foo'"),
    ('rot ::= "a"', "no 'root' rule"),
    ('root ::= "a" (', "line 1"),
    ('root ::= "a"\nroot ::= "b"', "defined twice"),
    ('root ::= "unterminated', "unterminated string"),
    ('root ::= [a-', "unterminated character class"),
    ('root ::= "a"{5,2}', "max < min"),
    ('root ::= "a"{99999}', "limit"),
    ('root ::= root "a" | "b"', "left-recursive"),
    ('root ::= x\nx ::= y "a"\ny ::= x | "b"', "left-recursive"),
    ('root ::= "a"\n\n  | "b" ]', "line 3, column 9"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= <[123]>', "token references"),
])
def test_gbnf_errors_name_line_and_column(text, fragment):
    with pytest.raises(core.InvalidRequestError) as e:
        gbnf(text)
    assert fragment in str(e.value)
    assert isinstance(e.value, ValueError)


# ---- regex -----------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern,samples", [
    (r"\d{3}-\d{4}", ["555-1234", "55-1234", "555-12345", "abc-defg"]),
    (r"^[A-Z][a-z]+( [A-Z][a-z]+)*$", ["John", "John Smith", "john", "John  Smith", "J"]),
    (r"(cat|dog)s?", ["cat", "dogs", "cats", "cow", "catss"]),
    (r"[^\s,]+(,[^\s,]+)*", ["a,b,c", "a, b", "abc", ",a"]),
    (r"\w+@\w+\.(com|org)", ["me@site.com", "me@site.net", "@site.com"]),
    (r"colou?r", ["color", "colour", "colouur"]),
    (r"a.c", ["abc", "a c", "a\nc", "ac"]),
    (r"[\d.]+", ["1.5", "..", "1,5"]),
    (r"x{2,3}?y+?", ["xxy", "xxxyy", "xy"]),
    (r"(?:ab|cd)(?P<n>\d)", ["ab1", "cd9", "ab"]),
    (r"\u00e9\x41\.\*", ["éA.*", "éA.a"]),
    (r"[a-c\]]{2}", ["a]", "]]", "ad"]),
    (r"a{,2}", ["", "a", "aa", "aaa"]),
    (r"a{x}", ["a{x}", "a"]),  # not a counted repeat: literal braces, as Python reads them
])
def test_regex_matches_like_python_fullmatch(pattern, samples):
    g = Grammar.from_regex(pattern)
    for s in samples:
        assert g.accepts(s) == bool(re.fullmatch(pattern, s)), (pattern, s)


@pytest.mark.parametrize("pattern,fragment", [
    ("(a", "missing ')'"), ("a)", "unbalanced"), (r"(a)\1", "backreferences"),
    (r"\bword", "word boundaries"), ("(?=a)", "lookaround"), ("*a", "without anything to repeat"),
    ("a^b", "'^'"), ("[z-a]", "reversed"),
])
def test_regex_errors(pattern, fragment):
    with pytest.raises(core.InvalidRequestError) as e:
        Grammar.from_regex(pattern)
    assert fragment in str(e.value)


# ---- token masks over real vocabularies ------------------------------------------------------

_tok = {}


def tokenizer(model):
    from conftest import require_model
    if model not in _tok:
        _tok[model] = core.Tokenizer.from_gguf(str(require_model(model)))
    return _tok[model]


def brute_force_allowed(tok, grammar, prefix: bytes):
    allowed = set()
    eog = set(tok.eog_ids)
    complete = grammar.accepts(prefix)
    for t in range(tok.n_vocab):
        if t in eog:
            if complete:
                allowed.add(t)
            continue
        piece = tok.token_to_piece(t, False)
        if piece and grammar.accepts_prefix(prefix + piece):
            allowed.add(t)
    return allowed


@pytest.mark.real_model
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_masks_equal_brute_force(model):
    tok = tokenizer(model)
    g = Grammar.from_json_schema({"type": "object", "properties": {
        "name": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["name", "n"]})
    # Prefixes that stop inside a key, inside a string value, inside a multi-byte character,
    # after a number (that may continue or end), and at the end.
    prefixes = [b"", b'{"na', '{"name": "caf\u00e9 \u20ac'.encode()[:-1], b'{"name": "x", "n": 12',
                b'{"name":"x","n":1,"ok":true}']
    for prefix in prefixes:
        c = g.constraint(tok)
        assert c.accept_bytes(prefix)
        got = set(c.allowed_tokens())
        assert got, (model, prefix)
        assert got == brute_force_allowed(tok, g, prefix), (model, prefix)
        logits = np.zeros(tok.n_vocab, dtype=np.float32)
        c.apply(logits)
        assert set(np.flatnonzero(np.isfinite(logits)).tolist()) == got


@pytest.mark.real_model
def test_eog_only_when_complete_and_accept_tracks_tokens():
    tok = tokenizer("smollm2")
    g = Grammar.from_regex(r"(yes|no)\.")
    c = g.constraint(tok)
    eog = set(tok.eog_ids)
    assert not (set(c.allowed_tokens()) & eog)
    for t in tok.encode("yes.", False, False):
        assert t in set(c.allowed_tokens())
        c.accept(t)
    assert c.is_complete
    assert set(c.allowed_tokens()) == eog  # nothing can follow: only end-of-generation
    with pytest.raises(core.InvalidRequestError):
        c.accept(tok.encode("x", False, False)[0])


@pytest.mark.real_model
def test_mask_cache_hits_for_repeated_states():
    tok = tokenizer("smollm2")
    g = Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string"}},
                                  "required": ["s"], "additionalProperties": False})
    c = g.constraint(tok)
    assert c.accept_bytes(b'{"s": "')
    before = g.stats()
    for t in tok.encode("hello world and more words", False, False):  # inside a string: one state
        c.allowed_tokens()
        c.accept(t)
    after = g.stats()
    assert after["mask_misses"] - before["mask_misses"] <= 1
    assert after["mask_hits"] - before["mask_hits"] >= 4


@pytest.mark.real_model
def test_concurrent_constraints_share_the_vocabulary_trie():
    from concurrent.futures import ThreadPoolExecutor
    tok = tokenizer("smollm2")
    patterns = [r"[a-z]+ [0-9]{2}", r"(red|green|blue)!", r'\{"k": [0-9]+\}', r"[A-Z][a-z]*\."]
    prefixes = ["ab", "gr", '{"k": 1', "Ab"]

    def masks(i):
        g = Grammar.from_regex(patterns[i] + "x" * (i + 1))  # fresh grammars: every mask is computed
        c = g.constraint(tok)
        assert c.accept_bytes(prefixes[i])
        return [sorted(c.allowed_tokens()) for _ in range(3)]

    with ThreadPoolExecutor(4) as ex:
        parallel = list(ex.map(masks, range(4)))
    for i in range(4):
        g = Grammar.from_regex(patterns[i] + "x" * (i + 1))
        c = g.constraint(tok)
        c.accept_bytes(prefixes[i])
        expected = sorted(c.allowed_tokens())
        assert expected and all(m == expected for m in parallel[i])


def test_multiline_json_style_grammar():
    # The layout llama.cpp-style grammar files use: bodies over several lines, an empty first
    # alternative, trailing comments, dashed rule names.
    text = r'''
# a small JSON grammar
root ::= obj
val ::= obj | arr | str | num | ("true" | "false" | "null") sp
obj ::=
  "{" sp (
      str ":" sp val
      ("," sp str ":" sp val)*
  )? "}" sp
arr ::= "[" sp ( val ("," sp val)* )? "]" sp
str ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" sp   # strings
num ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? sp
sp ::= | " " | "\n" [ \t]{0,20}
'''
    g = Grammar.from_gbnf(text)
    for s in ['{"a": [1, 2.5e3, "x\\n", true, null], "b": {}}', '{}', '{"k":"\\u00e9"}\n']:
        assert g.accepts(s), s
    for s in ['{"a" 1}', '[1]', '{"a": 01}', '{"a": "\x01"}']:
        assert not g.accepts(s), s


@pytest.mark.parametrize("make,text", [
    (Grammar.from_gbnf, "root ::= " + "(" * 100000 + '"a"' + ")" * 100000),
    (Grammar.from_gbnf, 'root ::= "a"' + "*" * 100000),
    (Grammar.from_regex, "(" * 100000 + "a" + ")" * 100000),
    (Grammar.from_regex, "a" + "?" * 100000),
    (Grammar.from_json_schema, '{"items":' * 100000 + "{}" + "}" * 100000),
])
def test_pathological_nesting_is_an_error_not_a_crash(make, text):
    with pytest.raises(core.InvalidRequestError, match="deeper|in a row"):
        make(text)


def test_long_rule_chains_compile():
    n = 20000  # deep chain of rules: checked without native recursion
    text = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} | "x"\n' for i in range(n)) + f'r{n} ::= "y"\n'
    g = Grammar.from_gbnf(text)
    assert g.accepts("x") and g.accepts("y") and not g.accepts("z")
