import pytest

from hpengine.models._decomposer import decomposition_prompt, parse_plan
from hpengine.models._reader import clean_answer, reading_prompt
from hpengine.pipeline._text import is_unknown, names_shared, rewrite


def test_parse_plan_valid_and_invalid():
    text = "1. Who directed Alpha?\n2. Where was #1 born?\n\nQuestion: something else\n1. x"
    assert parse_plan(text, 4) == ["Who directed Alpha?", "Where was #1 born?"]
    assert parse_plan("1) A?\n2) B of #1?", 4) == ["A?", "B of #1?"]
    assert parse_plan("no list here", 4) is None
    assert parse_plan("1. Where was #2 born?\n2. Who?", 4) is None  # forward reference
    assert parse_plan("1. a\n2. b\n3. c", 2) is None  # too many hops


def test_rewrite_substitutes_answers():
    assert rewrite("Where was #1 born and when did #2 die?", ["Ann", "Bob"]) == "Where was Ann born and when did Bob die?"
    assert rewrite("Where was #1 born?", [""]) == "Where was #1 born?"  # unresolved stays visible


@pytest.mark.parametrize("sub,question,shared", [
    ("Who directed Flannelfoot?", "Which film has the director who died earlier, The Hitler Gang or Flannelfoot?", True),
    ("Who is Karl Von Habsburg's mother?", "Who is Karl Von Habsburg's paternal grandmother?", True),  # possessive
    ("When did the 2006 Asian Games open?", "Football at the 2006 Asian Games was played how many days before?", True),
    ("What is the name of the star?", "what is one of the stars of The Newcomers known for", False),
    ("What band formed in 1995?", "What band formed in 1995 and released Welcome Interstate Managers?", False),  # no name
    ("Who is the mother of Ryszard Bugajski?", "Who is the mother of the director of film Polish-Russian War?", False),
    ("Where is Glass?", "Where is the glass museum?", False),  # case-sensitive: names, not words
])
def test_names_shared(sub, question, shared):
    assert names_shared(sub, question) is shared


def test_prompts_and_answers():
    p = decomposition_prompt("Who is the father of the author of X?", 3)
    assert p.endswith("Question: Who is the father of the author of X?\nSub-questions:") and "at most 3" in p
    r = reading_prompt("Who?", ["Fact one.", "Fact two."], final=False)
    assert "- Fact one." in r and r.endswith("Answer:") and "sub-questions" not in r
    f = reading_prompt("Which came first?", ["Fact."], final=True, steps=[("When was A made?", "1961"),
                                                                        ("When was B made?", "1946")])
    assert f.index("- Fact.") < f.index("- When was A made? 1961") < f.index("- When was B made? 1946") \
        < f.index("Question: Which came first?")
    assert clean_answer("Answer: Paris.\nmore") == "Paris"
    assert clean_answer('"J. R. R."') == "J. R. R."
    assert is_unknown("Unknown.") and is_unknown("") and not is_unknown("Paris")


def test_reader_batched_with_steps_on_tiny_model():
    from hpengine.models._reader import Reader
    from hpengine.testing._tiny_lm import build_tiny_pair

    questions = ["Which came first?", "Who directed Alpha?"]
    facts = [["A was made in 1961.", "B was made in 1946."], ["Alpha was directed by Ilse Marrow."]]
    model, tok = build_tiny_pair([reading_prompt(q, f, True) for q, f in zip(questions, facts)] * 3)
    reader = Reader(model, tok, max_new_tokens=4, batch_size=2)
    plain = reader.read(questions, facts, final=True)
    tokens_plain = reader.stats["tokens_in"]
    with_steps = reader.read(questions, facts, final=True, steps=[[("When was A made?", "1961")], None])
    assert len(plain) == len(with_steps) == 2 and all(isinstance(a, str) for a in plain + with_steps)
    assert reader.stats["tokens_in"] - tokens_plain > tokens_plain  # the steps lengthen the first prompt
    assert reader.stats["calls"] == 4
