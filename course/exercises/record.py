"""The diagnosis record: the five lines every investigation in this course writes down."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Diagnosis:
    """Symptom, competing hypotheses, the test that separates them, what it should show, what it did.

    ``problems()`` lists what keeps the record from being a falsifiable investigation; an empty list
    means the form is right, not that the conclusion is.
    """

    symptom: str
    hypotheses: list[str]
    test: str
    prediction: str
    result: str

    def problems(self) -> list[str]:
        """What keeps the record from being an investigation, as sentences (empty: none found).

        * every field filled in; the symptom, the test, the prediction and each hypothesis in words
          (at least two words of two or more letters: ``"x"`` is not a symptom; the result may be
          a single name);
        * at least two different hypotheses;
        * the fields refer to each other: the prediction shares a word with a hypothesis (it says
          what the test shows under it), and the test shares one with the prediction or a hypothesis.
          Only words of four or more letters count, compared by their first four letters, case aside
          ("checks" meets "check"; "LR" and "NaN" never match, and common words like "with" do).

        These are checks of form: a record can pass them and still be wrong, and one written in
        other words than the solution's passes as long as its parts refer to each other."""
        found = []
        for name in ("symptom", "test", "prediction", "result"):
            if not str(getattr(self, name)).strip():
                found.append(f"{name} is empty")
        hypotheses = [str(h) for h in self.hypotheses if str(h).strip()]
        if len(hypotheses) < 2:
            found.append("a symptom needs at least two competing hypotheses, or nothing is being tested")
        if len({" ".join(h.lower().split()) for h in hypotheses}) != len(hypotheses) or \
                len(set(map(str, self.hypotheses))) != len(self.hypotheses):
            found.append("two hypotheses are the same")
        for name in ("symptom", "test", "prediction"):
            text = str(getattr(self, name))
            if text.strip() and len(_words(text)) < 2:
                found.append(f"the {name} {text.strip()!r} says nothing: write what you saw, did or expect in words")
        for h in hypotheses:
            if len(_words(h)) < 2:
                found.append(f"the hypothesis {h.strip()!r} says nothing: name a cause")
        if not found:
            said = set().union(*(_stems(h) for h in hypotheses))
            if not _stems(self.prediction) & said:
                found.append("the prediction shares no word of four or more letters with any hypothesis: say what the "
                             "test shows under each hypothesis, naming it in its own words (\"if the data cursor is "
                             "not restored, ...; if the optimizer state ..., ...\")")
            if not _stems(self.test) & (said | _stems(self.prediction)):
                found.append("the test shares no word of four or more letters with the hypotheses or the prediction: "
                             "say what it runs and measures in the words they use (\"resume from step 8 and compare "
                             "the data cursor ...\")")
        return found


def _words(text) -> list[str]:
    return re.findall(r"[^\W\d_]{2,}", str(text).lower())


def _stems(text) -> set[str]:
    return {w[:4] for w in _words(text) if len(w) >= 4}


def as_data(record) -> dict:
    """A ``Diagnosis`` as plain data (how a graded call sends it back), or what it was instead."""
    if not isinstance(record, Diagnosis):
        return {"not_a_diagnosis": type(record).__name__}
    return {"symptom": str(record.symptom), "hypotheses": [str(h) for h in record.hypotheses],
            "test": str(record.test), "prediction": str(record.prediction), "result": str(record.result)}


def from_data(data: dict) -> "Diagnosis | None":
    """The ``Diagnosis`` that ``as_data`` described (None if it was not one)."""
    if not isinstance(data, dict) or "not_a_diagnosis" in data:
        return None
    return Diagnosis(**data)


def reveal(what: str, prediction, measured) -> None:
    """Print a prediction beside what was measured: the "predict, then reveal" step of an exercise.

    ``prediction`` is whatever the learner wrote in the Predict cell (``None`` while it is blank).
    Nothing is graded: the point is to have committed to an answer before seeing it.
    """
    guess = "(blank: write your guess in the Predict cell above, then run both cells again)" \
        if prediction is None else repr(prediction)
    shown = measured if isinstance(measured, str) else repr(measured)
    print(f"{what}\n  you predicted: {guess}\n  measured:      {shown}")
