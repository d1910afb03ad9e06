"""Bugs of notebook 09 (family ``evaluation``): good likelihood, weak task score.

Each swaps one stage of the evaluation harness (``course.lessons.harness``; the ``eval_*`` parts of the
pipeline). Training is untouched: the same model scores worse, or differently, because the harness
asks it another question.

* the continuation: ``option-without-delimiter``, ``option-delimiter-doubled``;
* the few-shot examples: ``fewshot-count-ignored``;
* the template: ``template-differs-from-training``, ``template-trailing-space``;
* truncation: ``truncation-cuts-question``;
* the score: ``prompt-tokens-scored``;
* acc_norm's length: ``norm-by-token-count``, ``norm-by-sequence-length``.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.
"""

from __future__ import annotations

from ..lessons import harness
from ..reference.pipeline import Pipeline
from .registry import bug

FAMILY = "evaluation"


# ----- the continuation ------------------------------------------------------------------------------
def _choice_only(choice: str, target_delimiter: str) -> str:
    return choice


def _delimiter_twice(choice: str, target_delimiter: str) -> str:
    return target_delimiter + target_delimiter + choice


@bug(FAMILY, "accuracy near chance: every option starts with a token the model never saw after a word")
def option_without_delimiter(pipe: Pipeline) -> Pipeline:
    """The harness scores the bare choice (``"ka rup"``) instead of ``target_delimiter + choice``
    (``" ka rup"``). The tokenizer folds the leading space into the word, so the first option token
    is the start-of-line form of the word, which the model never saw after another word."""
    return pipe.replace(eval_continuation=_choice_only)


@bug(FAMILY, "accuracy near chance: a lone space token before every option")
def option_delimiter_doubled(pipe: Pipeline) -> Pipeline:
    """The harness adds the target delimiter twice when it builds the continuation
    (``delimiter + delimiter + choice``): ``"  ka"`` tokenizes as a lone space and then ``" ka"``, a
    sequence the training text never contains."""
    return pipe.replace(eval_continuation=_delimiter_twice)


# ----- few-shot ------------------------------------------------------------------------------------------
def _no_examples(pool_size: int, index: int, k: int, seed: int) -> list[int]:
    return []


@bug(FAMILY, "scores do not change with num_fewshot; prompts are as short at 5-shot as at 0-shot")
def fewshot_count_ignored(pipe: Pipeline) -> Pipeline:
    """The few-shot count is read from the wrong place (a generation setting instead of the run's
    ``num_fewshot``), so every item is evaluated zero-shot whatever the run asked for."""
    return pipe.replace(eval_fewshot=_no_examples)


# ----- the template ------------------------------------------------------------------------------------
def _question_answer_template(question) -> str:
    return "Question: " + harness.render(question) + "\nAnswer:"


def _trailing_space_template(question) -> str:
    return harness.render(question) + " "


@bug(FAMILY, "accuracy near chance: the prompt is not written the way the training text is")
def template_differs_from_training(pipe: Pipeline) -> Pipeline:
    """A template copied from another task (``"Question: ...\\nAnswer:"``): the training text has
    no such words and puts a newline only between documents, so the answer follows a line the
    model reads as a new document."""
    return pipe.replace(eval_template=_question_answer_template)


@bug(FAMILY, "accuracy near chance: the template ends with the space the delimiter adds again")
def template_trailing_space(pipe: Pipeline) -> Pipeline:
    """The template ends with a space (``"{question} "``), so context and continuation tokenize as
    ``[..., " "]`` + ``[" ka"]``: a lone space token the training text never has."""
    return pipe.replace(eval_template=_trailing_space_template)


# ----- truncation ----------------------------------------------------------------------------------------
def _keep_the_start(context, continuation, n_ctx: int):
    keep = n_ctx + 1 - len(continuation)
    return list(context)[:keep]


@bug(FAMILY, "accuracy falls to chance as num_fewshot grows; zero-shot looks healthy")
def truncation_cuts_question(pipe: Pipeline) -> Pipeline:
    """A context too long for the window is cut at the wrong end: the harness keeps its first tokens
    (the oldest few-shot examples) and drops the last (the question), so once the examples fill the
    window the options are scored after an example's text instead of after the question."""
    return pipe.replace(eval_truncate=_keep_the_start)


# ----- the score -------------------------------------------------------------------------------------------
def _prompt_and_continuation(model, contexts, continuations):
    """Scores every token after the first: the context's own tokens are summed with the option's."""
    return harness.score_continuations(model, [list(c)[:1] for c in contexts],
                                       [list(c)[1:] + list(x) for c, x in zip(contexts, continuations)])


@bug(FAMILY, "acc_norm lower, far lower at 3-shot; 0-shot acc unchanged: the prompt's log-probability is in every score")
def prompt_tokens_scored(pipe: Pipeline) -> Pipeline:
    """The log-probabilities are summed over the whole sequence instead of the continuation only (a
    loss mask built for the wrong span). The prompt's part is the same for every option when the
    context is not truncated, so zero-shot acc does not move; divided by each option's length for
    acc_norm, it favours long options. Once the context is truncated to the window, options of
    different lengths keep different amounts of it, and acc moves too."""
    return pipe.replace(eval_score=_prompt_and_continuation)


# ----- acc_norm's length ---------------------------------------------------------------------------------
def _token_count(choice: str, context, continuation) -> float:
    return float(len(continuation))


def _sequence_length(choice: str, context, continuation) -> float:
    return float(len(context) + len(continuation))


@bug(FAMILY, "acc_norm differs from the published convention (characters): it divides by tokens")
def norm_by_token_count(pipe: Pipeline) -> Pipeline:
    """``acc_norm`` divides by the continuation's number of tokens, not the choice's number of
    characters: another metric under the same name, which depends on the tokenizer."""
    return pipe.replace(eval_norm_length=_token_count)


@bug(FAMILY, "acc_norm close to acc; identical once contexts are truncated to the window")
def norm_by_sequence_length(pipe: Pipeline) -> Pipeline:
    """``acc_norm`` divides by the length of the whole scored sequence (context and continuation),
    which differs little between options (at 0-shot by the options' few tokens; once the context is
    truncated to fill the window, not at all), so the normalisation does little or nothing."""
    return pipe.replace(eval_norm_length=_sequence_length)
