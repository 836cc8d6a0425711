from cleaner.saar.leak import mentions_error

ERROR = "Traceback (most recent call last):\nNameError: name 'total_sum' is not defined"


def test_names_the_hidden_exception_type():
    assert mentions_error("A NameError means I forgot to define it.", [ERROR], ["NameError"])


def test_quotes_a_line_of_the_hidden_error():
    assert mentions_error("It said NameError: name 'total_sum' is not defined", [ERROR], [None])


def test_reacts_to_a_failure():
    assert mentions_error("The previous attempt did not work, let me fix it.", [ERROR], [None])
    assert mentions_error("Let me try again with a loop.", [ERROR], [None])


def test_fresh_reasoning_is_not_flagged():
    reasoning = "<think>\nI will sum the numbers from 1 to 10 with a loop and print the total.\n</think>\n\n"
    assert not mentions_error(reasoning, [ERROR], ["NameError"])
    # error handling in general is not a reference to the hidden failure
    assert not mentions_error("Wrap the parse in try/except ValueError to handle bad input.", [ERROR], ["NameError"])
