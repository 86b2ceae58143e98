import pytest

from pruner_model import segment


def texts(text, **kw):
    return [text[s.start : s.end] for s in segment(text, **kw)]


def test_abbreviations_do_not_split():
    text = "Dr. Smith moved to the U.S. in 1990 with Mr. Jones. They met at 5 p.m. on Monday. It rained."
    assert texts(text) == [
        "Dr. Smith moved to the U.S. in 1990 with Mr. Jones.",
        "They met at 5 p.m. on Monday.",
        "It rained.",
    ]


def test_reference_and_academic_abbreviations_do_not_split():
    """The curated English abbreviations keep a citation or a figure inside its sentence, while a
    sentence that ends on one still ends before the capitalized word that starts the next."""
    text = (
        "Smith et al. (2020) counted cells (approx. 5 per well), i.e. few; see Fig. 3 and ref. 12. "
        "It reached No. 1 on the list. This was shown by Smith et al. The result held."
    )
    assert texts(text) == [
        "Smith et al. (2020) counted cells (approx. 5 per well), i.e. few; see Fig. 3 and ref. 12.",
        "It reached No. 1 on the list.",
        "This was shown by Smith et al.",
        "The result held.",
    ]
    # German has no curated list: punkt cuts after "al.", and the lower-case rule (below) rejoins it
    assert (
        texts("Dr. Smith et al. (2020) left. Fine.", language="german")[0] == "Dr. Smith et al. (2020) left."
    )


def test_a_cut_before_a_lower_case_word_is_undone_in_capitalized_text():
    """punkt ends a sentence after an abbreviation it does not know; a sentence of capitalized text
    does not start with a word wholly in lower case, so the cut is undone (past leading brackets),
    while words such as "p53" and "mRNA", bracketed notes and uncapitalized text keep their cuts."""
    assert texts("The infectivity of Ae. albopictus was high. It rose.") == [
        "The infectivity of Ae. albopictus was high.",
        "It rose.",
    ]
    assert texts("Cells of Streptococcus sp. (staphopain) were seen. Subspecies E. m. indicus. Done.") == [
        "Cells of Streptococcus sp. (staphopain) were seen.",
        "Subspecies E. m. indicus.",
        "Done.",
    ]
    assert texts("We studied TP53. p53 is a suppressor. mRNA rose.") == [
        "We studied TP53.",
        "p53 is a suppressor.",
        "mRNA rose.",
    ]
    assert texts("It was cited. [e] Christian apologists came.") == [
        "It was cited.",
        "[e] Christian apologists came.",
    ]
    assert texts("lol. so good. Yes.") == ["lol.", "so good.", "Yes."]
    assert texts("Was it? no. Fine.")[0] == "Was it?"


def test_spans_slice_back_exactly_and_hold_no_outer_whitespace():
    text = "  First one here.   Second one?\n\n\tThird!  \n"
    units = segment(text)
    assert [text[u.start : u.end] for u in units] == ["First one here.", "Second one?", "Third!"]
    for u in units:
        assert not text[u.start].isspace() and not text[u.end - 1].isspace()
    assert units[0].paragraph == units[1].paragraph != units[2].paragraph


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_empty_and_whitespace_only(text):
    assert segment(text) == []


def test_markdown_structure():
    text = (
        "# Guide\n\nIntro sentence one. Intro two.\n\n## Install\n"
        "- step one. still step one\n  continued line\n* step two\n1. numbered\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```bash\npip install x\n\necho done. really.\n```\nAfter code."
    )
    units = segment(text)
    got = [(u.kind, text[u.start : u.end]) for u in units]
    assert got == [
        ("heading", "# Guide"),
        ("sentence", "Intro sentence one."),
        ("sentence", "Intro two."),
        ("heading", "## Install"),
        ("list_item", "- step one. still step one\n  continued line"),
        ("list_item", "* step two"),
        ("list_item", "1. numbered"),
        ("table_row", "| a | b |"),
        ("table_row", "|---|---|"),
        ("table_row", "| 1 | 2 |"),
        ("code", "```bash\npip install x\n\necho done. really.\n```"),
        ("sentence", "After code."),
    ]
    # section headings: intro under "# Guide", the list and code under "## Install"
    assert units[1].heading == 0 and units[4].heading == 3 and units[10].heading == 3


def test_paragraph_break_always_splits():
    text = "A line without a period\n\nanother line without one"
    assert texts(text) == ["A line without a period", "another line without one"]


def test_header_free_prose_and_structure_off():
    text = "# Not a heading when structure is off. Next sentence."
    assert len(segment(text, structure=False)) == 2
    assert segment(text)[0].kind == "heading"


def test_unclosed_code_fence_is_one_unit():
    text = "Before.\n\n```\ncode line. more.\n\nstill code"
    units = segment(text)
    assert [u.kind for u in units] == ["sentence", "code"]
    assert text[units[1].start : units[1].end].endswith("still code")


def test_rejects_non_string():
    with pytest.raises(TypeError):
        segment(b"bytes")


# ---------------------------------------------------------------------------- every script
def cuts(text, language=None):
    return [text[u.start : u.end] for u in segment(text, language)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("北京是中国的首都。上海很大！你去过吗？", ["北京是中国的首都。", "上海很大！", "你去过吗？"]),
        (
            "東京は日本の首都です。「行こう。」と彼は言った。",
            ["東京は日本の首都です。", "「行こう。」", "と彼は言った。"],
        ),
        ("दिल्ली भारत की राजधानी है। यह बड़ा शहर है॥ मुंबई", ["दिल्ली भारत की राजधानी है।", "यह बड़ा शहर है॥", "मुंबई"]),
        ("هل أنت بخير؟ نعم، شكرا. الكتاب هنا۔", ["هل أنت بخير؟", "نعم، شكرا.", "الكتاب هنا۔"]),
        ("Привет. Как дела? Это т.е. пример.", ["Привет.", "Как дела?", "Это т.е. пример."]),
        (
            "Tokyo is big. 東京は大きい。Osaka too! 大阪も！",
            ["Tokyo is big.", "東京は大きい。", "Osaka too!", "大阪も！"],
        ),
    ],
)
def test_sentences_of_every_script(text, expected):
    assert cuts(text) == expected


def test_thai_is_cut_at_spaces_when_long():
    clause = "วันนี้อากาศดีมาก"  # "the weather is very nice today"
    text = " ".join([clause] * 12)
    units = cuts(text)
    assert len(units) > 1 and all(len(u) <= 80 for u in units)
    assert " ".join(units) == text
    assert cuts(clause) == [clause]


def test_language_names_codes_and_script_detection():
    from pruner_model.core.segmentation import punkt_language

    assert punkt_language("de") == "german" and punkt_language("german") == "german"
    assert punkt_language(None, "Это пример текста на русском языке.") == "russian"
    assert punkt_language("auto", "Plain English text.") == "english"
    assert punkt_language(None, "东京是日本的首都。") == "english"  # cut by its own marks


def test_english_cuts_are_punkts_on_1000_dev_paragraphs(monkeypatch):
    """The script rules never touch Latin prose: on 1,000 dev paragraphs of the public QA files
    (``data/qa``, or the fixtures without it) every span is what punkt alone cuts."""
    import json
    from pathlib import Path

    from pruner_model.core import segmentation

    path = Path(__file__).resolve().parents[2] / "data" / "qa" / "dev.jsonl"
    texts = []
    if path.is_file():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                texts.append(json.loads(line)["context"])
                if len(set(texts)) >= 1000:
                    break
    texts = sorted(set(texts)) or [
        "Dr. Smith left at 5 p.m. today. He came back.",
        "U.S. troops left. Mr. Lee said so.",
    ]
    now = [[(u.start, u.end) for u in segment(t)] for t in texts]
    monkeypatch.setattr(segmentation, "_script_spans", lambda text, s, e: [(s, e)])
    monkeypatch.setattr(
        segmentation, "punkt_language", lambda language, text="", default="english": "english"
    )
    assert now == [[(u.start, u.end) for u in segment(t)] for t in texts]


@pytest.mark.parametrize("name", ["__init__", "curated", "prefixes", "__main__"])
def test_modules_of_the_punkt_data_that_are_no_language_are_refused(name):
    with pytest.raises(ValueError, match="no punkt parameters"):
        segment("One. Two.", name)
