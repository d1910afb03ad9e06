"""The diagnosis record: the five lines every investigation in this course writes down."""

from __future__ import annotations

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
        found = []
        for name in ("symptom", "test", "prediction", "result"):
            if not str(getattr(self, name)).strip():
                found.append(f"{name} is empty")
        if len([h for h in self.hypotheses if str(h).strip()]) < 2:
            found.append("a symptom needs at least two competing hypotheses, or nothing is being tested")
        if len(set(self.hypotheses)) != len(self.hypotheses):
            found.append("two hypotheses are the same")
        return found


def reveal(what: str, prediction, measured) -> None:
    """Print a prediction beside what was measured: the "predict, then reveal" step of an exercise.

    ``prediction`` is whatever the learner wrote in the Predict cell (``None`` while it is blank).
    Nothing is graded: the point is to have committed to an answer before seeing it.
    """
    guess = "(blank: write your guess in the Predict cell above, then run both cells again)" \
        if prediction is None else repr(prediction)
    shown = measured if isinstance(measured, str) else repr(measured)
    print(f"{what}\n  you predicted: {guess}\n  measured:      {shown}")
