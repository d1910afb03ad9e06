"""Targeted submissions for 09_eval_harness (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's settings), each with the exact test cells it must lose. ``fix`` calls the
learner's ``name_cause``, so a wrong ``name_cause`` loses the fix cell too; the mystery answers do not
call ``option_logprob`` (they compare with ``harness.score_continuations``), so the exercises are
independent otherwise.
"""
from autograder.grading import Case

A = "09_eval_harness"
OPTION, ACC, JUDGE = "test_option_logprob", "test_accuracies", "test_significantly_better"
DETECT, CAUSE, FIX = "test_mystery_detect", "test_mystery_cause", "test_mystery_fix"

# ----- option_logprob --------------------------------------------------------------------------------
# One forward per continuation token, with the prefix grown each time (slow, and correct).
_OPTION_PREFIXES = """def option_logprob(model, context, choice, delimiter=" "):
    ctx, cont = harness.encode(context), harness.encode(delimiter + choice)
    total = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for j, tok in enumerate(cont):
            prefix = torch.tensor(ctx + cont[:j]).unsqueeze(0)
            logits = model(prefix)[0, -1].double()
            total = total + torch.log_softmax(logits, -1)[tok]
    return total
"""

# Realistic wrong: scores the bare choice, whatever the delimiter.
_OPTION_NO_DELIMITER = """def option_logprob(model, context, choice, delimiter=" "):
    ctx, cont = harness.encode(context), harness.encode(choice)
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[:, :-1]), -1)[0]
    return logp[torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1), torch.tensor(cont)].sum().item()
"""

# Degenerate: the package's scorer, kept by reference (switched off all the same).
_OPTION_DELEGATES = """_score = harness.score_continuations

def option_logprob(model, context, choice, delimiter=" "):
    return _score(model, [harness.encode(context)], [harness.encode(delimiter + choice)])[0]
"""

# ----- accuracies ------------------------------------------------------------------------------------
_ACC_TORCH = """def accuracies(lls, choices, gold):
    acc = acc_norm = 0.0
    for scores, opts, g in zip(lls, choices, gold):
        s = torch.as_tensor(scores, dtype=torch.float64)
        n = torch.tensor([float(len(c)) for c in opts], dtype=torch.float64)
        acc += float(torch.argmax(s) == int(g))
        acc_norm += float(torch.argmax(s / n) == int(g))
    return acc / len(gold), acc_norm / len(gold)
"""

# Realistic wrong: divides by the continuation's length, delimiter included.
_ACC_WITH_DELIMITER = """def accuracies(lls, choices, gold):
    right = right_norm = 0
    for scores, opts, g in zip(lls, choices, gold):
        scores = [float(s) for s in scores]
        normed = [s / len(" " + c) for s, c in zip(scores, opts)]
        right += scores.index(max(scores)) == int(g)
        right_norm += normed.index(max(normed)) == int(g)
    return right / len(gold), right_norm / len(gold)
"""

# ----- significantly_better --------------------------------------------------------------------------
# A paired normal approximation instead of a bootstrap: the same answers on the graded pairs.
_JUDGE_Z = """def significantly_better(a, b):
    d = b.double() - a.double()
    se = d.std() / len(d) ** 0.5
    return bool(se > 0 and d.mean() / se > 1.96)
"""

# Realistic wrong: resamples the two runs independently (an unpaired bootstrap).
_JUDGE_UNPAIRED = """def significantly_better(a, b):
    a, b = a.double(), b.double()
    g = torch.Generator().manual_seed(0)
    ia = torch.randint(0, len(a), (2000, len(a)), generator=g)
    ib = torch.randint(0, len(b), (2000, len(b)), generator=g)
    return bool(torch.quantile(b[ib].mean(1) - a[ia].mean(1), 0.025) > 0)
"""

# ----- detect ----------------------------------------------------------------------------------------
# Differential: run the reference harness and this one on the same items, compare everything.
_DETECT_DIFFERENTIAL = """def detect(pipe):
    items = task.subset(12)
    ours, ref = harness.run(model, pipe, items, num_fewshot=3), harness.run(model, Pipeline(), items, num_fewshot=3)
    same = (torch.allclose(ours.lls, ref.lls) and torch.equal(ours.lengths, ref.lengths)
            and ours.contexts == ref.contexts)
    return not same
"""

# Realistic wrong: a score drop only. The few-shot count and acc_norm's length move no accuracy here.
_DETECT_SCORE_DROP = """def detect(pipe):
    r = harness.run(model, pipe, task.subset(60), num_fewshot=3)
    return r.acc < 0.5 or r.acc_norm < 0.5
"""

# ----- name_cause ------------------------------------------------------------------------------------
# Bisect by replacement: swap each stage for the reference and see which swap repairs the run.
_NAME_BY_REPLACEMENT = """def name_cause(pipe):
    items = task.subset(12)
    ref = harness.run(model, Pipeline(), items, 3)
    def same(p):
        r = harness.run(model, p, items, 3)
        return torch.allclose(r.lls, ref.lls) and torch.equal(r.lengths, ref.lengths) and r.contexts == ref.contexts
    if same(pipe):
        return "healthy"
    for stage, (field, reference) in {"template": ("eval_template", harness.plain_template),
                                      "delimiter": ("eval_continuation", harness.with_delimiter),
                                      "fewshot": ("eval_fewshot", harness.pick_fewshot),
                                      "truncation": ("eval_truncate", harness.truncate_left),
                                      "scoring": ("eval_score", harness.score_continuations),
                                      "normalisation": ("eval_norm_length", harness.choice_length)}.items():
        if same(pipe.replace(**{field: reference})):
            return stage
    return "healthy"
"""

# Realistic wrong: truncation tested on a context that fits the window, so it never shows.
_NAME_SHORT_TRUNCATION = """def name_cause(pipe):
    question = task.items[0].question
    if pipe.eval_template(question) != harness.render(question):
        return "template"
    if pipe.eval_continuation("ka", " ") != " ka":
        return "delimiter"
    if len(pipe.eval_fewshot(32, 0, 3, 0)) != 3:
        return "fewshot"
    short, cont = harness.encode("mun sel"), harness.encode(" ka rup")
    if list(pipe.eval_truncate(short, cont, model.cfg.n_ctx)) != short:
        return "truncation"
    if abs(pipe.eval_score(model, [short], [cont])[0] - harness.score_continuations(model, [short], [cont])[0]) > 1e-6:
        return "scoring"
    if any(pipe.eval_norm_length(c, short, harness.encode(" " + c)) != len(c) for c in ("ka", "glint o")):
        return "normalisation"
    return "healthy"
"""

# Degenerate: reads the parts' reprs and the settings. Every part is an opaque <part>.
_NAME_READS_REPRS = """def name_cause(pipe):
    for stage, field in (("template", "eval_template"), ("delimiter", "eval_continuation"),
                         ("truncation", "eval_truncate"), ("scoring", "eval_score")):
        if "plain" not in repr(getattr(pipe, field)) and "<part>" not in repr(getattr(pipe, field)):
            return stage
    return ["healthy", "template"][pipe.data_seed % 2]
"""

# ----- fix -------------------------------------------------------------------------------------------
_FIX_DEFAULTS = """def fix(pipe):
    field = {"template": "eval_template", "delimiter": "eval_continuation", "fewshot": "eval_fewshot",
             "truncation": "eval_truncate", "scoring": "eval_score",
             "normalisation": "eval_norm_length"}.get(name_cause(pipe))
    return pipe if field is None else pipe.replace(**{field: getattr(Pipeline(), field)})
"""

# Realistic wrong: every harness stage put back, broken or not.
_FIX_ALL_STAGES = """def fix(pipe):
    return pipe.replace(eval_template=harness.plain_template, eval_continuation=harness.with_delimiter,
                        eval_fewshot=harness.pick_fewshot, eval_truncate=harness.truncate_left,
                        eval_score=harness.score_continuations, eval_norm_length=harness.choice_length)
"""

CASES = [
    # option_logprob
    Case(A, "option_by_prefixes", {"option_logprob": _OPTION_PREFIXES}, set()),
    Case(A, "option_without_delimiter", {"option_logprob": _OPTION_NO_DELIMITER}, {OPTION}),
    Case(A, "option_delegates", {"option_logprob": _OPTION_DELEGATES}, {OPTION}),
    # accuracies
    Case(A, "acc_torch_argmax", {"accuracies": _ACC_TORCH}, set()),
    Case(A, "acc_norm_with_delimiter", {"accuracies": _ACC_WITH_DELIMITER}, {ACC}),
    Case(A, "acc_constant", {"accuracies": "def accuracies(lls, choices, gold):\n    return 0.25, 0.25\n"}, {ACC}),
    # significantly_better
    Case(A, "judge_normal_approximation", {"significantly_better": _JUDGE_Z}, set()),
    Case(A, "judge_unpaired", {"significantly_better": _JUDGE_UNPAIRED}, {JUDGE}),
    Case(A, "judge_compares_means",
         {"significantly_better": "def significantly_better(a, b):\n    return bool(b.double().mean() > a.double().mean())\n"},
         {JUDGE}),
    Case(A, "judge_always_true", {"significantly_better": "def significantly_better(a, b):\n    return True\n"}, {JUDGE}),
    Case(A, "judge_delegates",
         {"significantly_better": "def significantly_better(a, b):\n    return harness.significantly_better(a, b)\n"},
         {JUDGE}),
    # detect
    Case(A, "detect_differential", {"detect": _DETECT_DIFFERENTIAL}, set()),
    Case(A, "detect_score_drop", {"detect": _DETECT_SCORE_DROP}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(harness.problems(pipe, model, task))\n"}, {DETECT}),
    # name_cause (fix calls it)
    Case(A, "cause_by_replacement", {"name_cause": _NAME_BY_REPLACEMENT}, set()),
    Case(A, "cause_truncation_on_short_context", {"name_cause": _NAME_SHORT_TRUNCATION}, {CAUSE, FIX}),
    Case(A, "cause_reads_reprs", {"name_cause": _NAME_READS_REPRS}, {CAUSE, FIX}),
    # fix
    Case(A, "fix_pipeline_defaults", {"fix": _FIX_DEFAULTS}, set()),
    Case(A, "fix_all_stages", {"fix": _FIX_ALL_STAGES}, {FIX}),
    Case(A, "fix_fresh_pipeline", {"fix": "def fix(pipe):\n    return Pipeline()\n"}, {FIX}),
    Case(A, "fix_returns_pipe", {"fix": "def fix(pipe):\n    return pipe\n"}, {FIX}),
]
