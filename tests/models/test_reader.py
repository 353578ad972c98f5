import pytest

from hpengine.pipeline._text import choice_options, is_comparison, resolve_choice


@pytest.mark.parametrize("question,options", [
    ("Which film came out first, Alpha or Beta?", ["Alpha", "Beta"]),
    ("Which film has the director who died first, Love, Honor And Oh-Baby! or Flannelfoot?",
     ["Love, Honor And Oh-Baby!", "Flannelfoot"]),
    ("Which magazine was started first, Arthur's Magazine or First for Women?",
     ["Arthur's Magazine", "First for Women"]),
    ("Who was born first?", []),  # no comma
    ("Where was the director of Alpha born, in Paris?", []),  # no " or "
    ("Which is older, or?", []),  # empty options
])
def test_choice_options(question, options):
    assert choice_options(question) == options


Q = "Which film has the director who died first, The Hitler Gang or Flannelfoot?"
STEPS = [("Who directed The Hitler Gang?", "John Farrow"), ("Who directed Flannelfoot?", "Frank Richardson"),
         ("When did John Farrow die?", "1963")]


@pytest.mark.parametrize("answer,expected", [
    ("John Farrow", "The Hitler Gang"),  # the answer is what an option led to: the option
    ("frank richardson.", "Flannelfoot"),  # compared after SQuAD normalisation
    ("Flannelfoot", "Flannelfoot"),  # already an option
    ("The Hitler Gang film", "The Hitler Gang film"),  # shares words with an option: kept
    ("1963", "1963"),  # its sub-question names no option
    ("Sam Wood", "Sam Wood"),  # no sub-question answered with it
])
def test_resolve_choice(answer, expected):
    assert resolve_choice(Q, answer, STEPS) == expected


def test_resolve_choice_needs_exactly_one_named_option_and_a_choice_question():
    both = [("Who directed The Hitler Gang or Flannelfoot?", "John Farrow")]
    assert resolve_choice(Q, "John Farrow", both) == "John Farrow"
    # an option must be named as whole words: "Gang" alone does not name "The Hitler Gang"
    assert resolve_choice(Q, "John Farrow", [("Who led the gang?", "John Farrow")]) == "John Farrow"
    assert resolve_choice("Who directed The Hitler Gang?", "John Farrow", STEPS) == "John Farrow"


@pytest.mark.parametrize("question,expected", [
    ("Which film came out first, Alpha or Beta?", True),
    ("Are Alpha and Beta both American films?", True),
    ("  did Ann Lee direct Alpha?", True),
    ("Where was the director of Alpha born?", False),
    ("Isabella Rossellini's mother was born where?", False),  # "Is" only as a whole word
])
def test_is_comparison(question, expected):
    assert is_comparison(question) is expected
