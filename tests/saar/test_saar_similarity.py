import json

import pytest

from cleaner.saar.similarity import SIMILARITIES, call_code, difflib_ratio, python_tokens, token_ratio, turn_code


def test_call_code_extracts_the_code_argument_not_the_json_wrapper():
    assert call_code(json.dumps({"code": "print(1)"})) == "print(1)"
    assert call_code(json.dumps({"source": "x = 2"})) == "x = 2"
    assert call_code("{not json") == "{not json"
    assert turn_code([json.dumps({"code": "a"}), json.dumps({"code": "b"})]) == "a\nb"


def test_wrapper_boilerplate_does_not_inflate_similarity():
    old, new = "import math\nprint(math.pi)", "total = sum(range(10))\nprint(total)"

    def arguments(code: str) -> str:
        return json.dumps({"code": code})

    def wrapped(code: str) -> str:
        return json.dumps({"name": "code_interpreter", "arguments": {"code": code}})

    code_only = difflib_ratio(call_code(arguments(old)), call_code(arguments(new)))
    assert code_only < 0.5 <= difflib_ratio(wrapped(old), wrapped(new))


def test_difflib_ratio_is_the_paper_measure():
    assert difflib_ratio("abcd", "abcd") == 1.0
    assert difflib_ratio("abcd", "wxyz") == 0.0
    assert difflib_ratio("print(y)", "print(x)") == pytest.approx(2 * 7 / 16)


def test_token_ratio_ignores_comments_and_layout_but_not_code():
    assert token_ratio("x=1\nprint( x )", "x = 1  # set\nprint(x)") == 1.0
    assert token_ratio("print(x)", "print(y)") < 1.0
    assert python_tokens('s = "a # not a comment"  # comment') == ["s", "=", '"a # not a comment"']


def test_token_ratio_handles_code_python_cannot_tokenize():
    assert 0.0 < token_ratio("def f(:\n  return 'unterminated", "def f():\n  return 1") < 1.0


@pytest.mark.parametrize("name", sorted(SIMILARITIES))
def test_every_measure_is_symmetric_bounded_and_reflexive(name):
    measure = SIMILARITIES[name]
    pairs = [("a = 1", "b = 2"), ("for i in range(3): pass", "while True: break"), ("", "x")]
    for old, new in pairs:
        assert 0.0 <= measure(old, new) <= 1.0
        assert measure(old, old) == 1.0
        assert measure(old, new) == pytest.approx(measure(new, old))


@pytest.mark.parametrize(
    ("malformed", "code"),
    [
        # hermes JSON cut off before its closing braces (what verl's parser drops; the loop passes the span's text)
        ('{"name": "code_interpreter", "arguments": {"code": "print(1)"\n', "print(1)"),
        # cut off inside the code string, escapes decoded
        ('{"name": "code_interpreter", "arguments": {"code": "x = \\"a\\"\\nprint(x', 'x = "a"\nprint(x'),
        # raw newlines inside the JSON string (invalid JSON, common in model output)
        ('{"name": "code_interpreter", "arguments": {"code": "a = 1\nprint(a)"}', "a = 1\nprint(a)"),
        # an XML call (qwen3_coder) whose function header is broken
        ("<function=code_interpreter\n<parameter=code>\nprint(2)\n</parameter>\n</function>", "print(2)"),
        # arguments that are a bare JSON string, not an object
        ('"print(3)"', "print(3)"),
    ],
)
def test_the_code_of_a_malformed_call_is_extracted(malformed, code):
    assert call_code(malformed) == code


def test_a_malformed_call_compares_code_with_code():
    """The same code in a broken call and in its fix is a perfect match, not JSON against code."""
    broken = '{"name": "code_interpreter", "arguments": {"code": "total = sum(range(11))\\nprint(total)"\n'
    assert difflib_ratio(call_code(broken), "total = sum(range(11))\nprint(total)") == 1.0


def test_a_malformed_call_without_findable_code_is_compared_as_its_raw_text():
    assert call_code("{not json at all") == "{not json at all"
