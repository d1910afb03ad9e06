"""course.lessons.amp (notebook 10) and the amp-memory bugs, on CPU. The GPU helpers are checked only for
refusing cleanly without CUDA (they never ran here when this machine has none)."""
import pytest
import torch

from course import ModelConfig, Pipeline
from course.lessons import amp
from course.exercises import mystery
from course.bugs import catalogue, inject
from course.exercises.grading import switched_off

BASE = Pipeline().replace(n_symbols=8, seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)


def test_dtype_facts_match_the_errata():
    f = amp.dtype_facts()
    assert f["float16"]["max"] == 65504.0
    assert f["bfloat16"]["eps"] == 2.0 ** -7  # 7 stored mantissa bits
    assert torch.tensor(65519.0).half().item() == 65504.0
    assert torch.tensor(65520.0).half().item() == float("inf")


def test_scaled_step_reports_a_skip_and_clips_unscaled_gradients():
    model, opt, loss = amp.toy_problem(3)
    g = torch.autograd.grad(loss, model.weight, retain_graph=True)[0]
    w0 = model.weight.detach().clone()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    assert amp.scaled_step(model, opt, scaler, loss, clip=0.5) is False
    assert torch.allclose(w0 - model.weight.detach(), g * min(1.0, 0.5 / g.norm().item()), atol=1e-5)
    model, opt, loss = amp.toy_problem(3, poison=True)
    w0 = model.weight.detach().clone()
    assert amp.scaled_step(model, opt, scaler, loss, clip=0.5) is True
    assert torch.equal(model.weight.detach(), w0) and scaler.get_scale() == 2.0 ** 11


def test_scaler_step_returns_none_whether_or_not_it_skipped():
    for poison in (False, True):
        model, opt, loss = amp.toy_problem(0, poison=poison)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(loss).backward()
        assert scaler.step(opt) is None


def test_saved_tensor_meter_sees_a_graph_without_backward_and_its_release():
    lin = torch.nn.Linear(8, 8)
    with amp.SavedTensors() as meter:
        out = lin(torch.randn(4, 8, requires_grad=True)).relu().sum()
        held = meter.bytes
        assert held > 0
        out.backward()
        assert meter.bytes == 0
        kept = [lin(torch.randn(4, 8)).relu().sum() for _ in range(3)]
        assert meter.bytes > 0
        kept.clear()
        assert meter.bytes == 0


def test_the_healthy_loop_keeps_nothing_and_each_bug_grows_its_meter():
    healthy = amp.run(BASE, steps=4, seed=1)
    assert healthy.saved_bytes == [0] * 4 and healthy.losses_alive == [0] * 4
    assert amp.memory_problems(healthy) == []
    kept = amp.run(inject(BASE, "loss-kept-with-graph"), steps=4, seed=1)
    assert kept.saved_bytes == [0] * 4 and kept.losses_alive == [1, 2, 3, 4]  # backward freed the activations
    for name in ("monitor-kept-with-graph", "monitor-logits-kept"):
        r = amp.run(inject(BASE, name), steps=4, seed=1)
        assert all(b > a for a, b in zip(r.saved_bytes, r.saved_bytes[1:])), name
        assert amp.memory_problems(r), name
    assert healthy.losses == kept.losses  # keeping the tensor does not change training


def test_every_amp_memory_bug_hides_in_a_part_and_is_fixed_by_the_reference_part():
    names = [b.name for b in catalogue("amp-memory")]
    assert set(names) == {"loss-kept-with-graph", "monitor-kept-with-graph", "monitor-logits-kept"}
    for i, name in enumerate(names):
        pipe = mystery.make(name, i, BASE, salt="t")
        (field,) = mystery.touched(pipe)
        fixed = pipe.replace(**{field: getattr(Pipeline(), field)})
        assert mystery.kept_problems(pipe, fixed) == []
        assert amp.memory_problems(amp.run(fixed, steps=3, seed=2)) == []


def test_the_loop_does_not_need_the_public_references():
    with switched_off(amp.keep_float, amp.monitor_no_grad):
        with pytest.raises(Exception):
            amp.keep_float(torch.tensor(1.0))
    r = amp.run(BASE.replace(keep_loss=lambda l: l.item(),
                             monitor=lambda m, b, f: f(m(b.inputs), b).detach().item()), steps=2)
    assert amp.memory_problems(r) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal only")
def test_gpu_helpers_refuse_without_cuda():
    for call in (lambda: amp.phase_peaks({}), lambda: amp.cuda_step_times(torch.nn.Linear(2, 2), None, None)):
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            call()


def test_snapshot_growth_names_where_each_live_block_was_made_and_the_line_that_ran_it():
    import sysconfig
    stdlib = sysconfig.get_paths()["stdlib"] + "/runpy.py"
    cpp = [{"filename": "??", "line": 0, "name": "c10::alloc"}, {"filename": "CUDACachingAllocator.cpp", "line": 0}]
    snap = {"segments": [{"blocks": [
        {"state": "active_allocated", "size": 4096,
         "frames": cpp + [{"filename": "/x/site-packages/torch/nn/functional.py", "line": 1},
                          {"filename": "/work/course/model.py", "line": 127}, {"filename": "/work/course/model.py", "line": 167},
                          {"filename": "/tmp/ipykernel_1/42.py", "line": 9}, {"filename": stdlib, "line": 88}]},
        {"state": "active_allocated", "size": 1024, "frames": [{"filename": "/work/course/model.py", "line": 127},
                                                              {"filename": "/tmp/ipykernel_1/42.py", "line": 9}]},
        {"state": "active_allocated", "size": 512, "frames": [{"filename": "/tmp/ipykernel_1/42.py", "line": 3}]},
        {"state": "active_allocated", "size": 256, "frames": cpp},
        {"state": "inactive", "size": 10**9, "frames": []}]}]}
    assert amp.snapshot_growth(snap) == [(5120, "model.py:127 <- 42.py:9"), (512, "42.py:3"), (256, "(no python frame)")]


def test_precision_run_fp16_forward_overflow_with_and_without_a_scaler_on_cpu():
    broken = amp.precision_run(BASE, dtype=torch.float16, steps=3, logit_scale=1e6)
    assert broken.first_nonfinite() == 0 and not broken.weights_finite[0] and broken.skipped == [False] * 3
    scaled = amp.precision_run(BASE, dtype=torch.float16, use_scaler=True, steps=3, logit_scale=1e6)
    assert scaled.skipped == [True] * 3 and all(scaled.weights_finite)
    assert scaled.scales == [2.0 ** 15, 2.0 ** 14, 2.0 ** 13]
    bf16 = amp.precision_run(BASE, dtype=torch.bfloat16, steps=3, logit_scale=1e6)
    assert bf16.first_nonfinite() is None and all(bf16.weights_finite)
    healthy = amp.precision_run(BASE, dtype=torch.float16, use_scaler=True, steps=3)
    fp32 = amp.precision_run(BASE, dtype=None, steps=3)
    assert healthy.first_nonfinite() is None and not any(healthy.skipped)
    assert abs(healthy.losses[-1] - fp32.losses[-1]) < 0.05


def test_precision_run_lr_zero_and_batch_seed_options_take_effect():
    frozen = amp.precision_run(BASE, dtype=None, steps=2, lr=0.0)
    model = BASE.build_model(0)
    from course.reference.train import batch_at
    b = batch_at(BASE, 0, 1)
    with torch.no_grad():
        assert abs(BASE.loss_fn(model(b.inputs), b).item() - frozen.losses[1]) < 1e-5  # no update happened
    other = amp.precision_run(BASE, dtype=None, steps=1, batch_seed=5)
    b5 = batch_at(BASE, 5, 0)
    with torch.no_grad():
        assert abs(BASE.loss_fn(model(b5.inputs), b5).item() - other.losses[0]) < 1e-5


def test_activation_peaks_find_the_scaled_logits_and_only_them():
    from course.reference.train import batch_at
    model, b = BASE.build_model(0), batch_at(BASE, 0, 0)
    healthy = amp.activation_peaks(model, b.inputs)
    assert amp.over_fp16(healthy) == [] and "head" in healthy and healthy["logits"] == healthy["head"]
    broken = amp.activation_peaks(model, b.inputs, logit_scale=1e6)
    assert amp.over_fp16(broken) == ["logits"]
    assert amp.over_fp16({"a": 65504.0, "b": 65505.0, "c": float("nan")}) == ["b", "c"]
    assert not model._forward_hooks and all(not m._forward_hooks for m in model.modules())  # hooks removed


# ----- the fp16-overflow family (course.bugs.precision) and the check of its fix ---------------------
PLACE = {"logit-temperature": "loss", "logit-multiplier": "loss", "mlp-weights-scaled": "model",
         "qkv-weights-scaled": "model", "lr-hundredfold": "updates", "lr-hardcoded": "updates"}


def _model_output_finite_in_fp16(pipe) -> bool:
    from course.reference.train import batch_at
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        return bool(torch.isfinite(pipe.build_model(0)(batch_at(pipe, 0, 0).inputs)).all())


def test_fp16_overflow_family_is_what_the_notebook_names():
    assert {b.name for b in catalogue("fp16-overflow")} == set(PLACE), "notebook 10's _PLACE table is out of date"


@pytest.mark.parametrize("name", sorted(PLACE))
def test_each_fp16_bug_is_finite_in_float32_and_overflows_fp16_where_its_place_says(name):
    for seed in (0, 1):
        pipe = mystery.make(name, seed, BASE, salt="t-p")
        r32 = amp.precision_run(pipe, None, steps=6, seed=seed)
        assert r32.first_nonfinite() is None, f"{name}: float32 went non-finite: {r32.losses}"
        r16 = amp.precision_run(pipe, torch.float16, steps=6, seed=seed)
        first = r16.first_nonfinite()
        assert first is not None, f"{name}: fp16 stayed finite over 6 steps: {r16.losses}"
        if PLACE[name] == "updates":
            assert first > 0, f"{name}: step 0 (before any update) is already non-finite"
        else:
            assert first == 0, f"{name}: the overflow should come before any update, came at step {first}"
            assert _model_output_finite_in_fp16(pipe) == (PLACE[name] == "loss"), \
                f"{name}: the model's own fp16 output should be {'finite' if PLACE[name] == 'loss' else 'non-finite'}"
        if PLACE[name] == "model":  # only fp16 sees it: float32 trains
            assert r32.losses[-1] < r32.losses[0] < 3, f"{name}: float32 losses {r32.losses}"


def test_healthy_draws_stay_finite_in_fp16_and_a_scaler_may_skip_their_first_step():
    for seed in range(6):
        pipe = mystery.make("healthy", seed, BASE, salt="t-p")
        assert amp.precision_run(pipe, torch.float16, steps=6, seed=seed).first_nonfinite() is None
    # the hidden test's healthy draw 5 of salt h-10-p1h skips at the start under a GradScaler
    pipe = mystery.make("healthy", 5, BASE, salt="h-10-p1h")
    skips = amp.precision_run(pipe, torch.float16, use_scaler=True, steps=6, seed=0).skipped
    assert skips[0] and not any(skips[3:]), f"expected a skip at the start only: {skips}"
    assert amp.overflow_problems(pipe, seed=0) == [], "a healthy pipeline fails the fix check"


@pytest.mark.parametrize("name", sorted(PLACE))
def test_overflow_problems_passes_the_reference_part_and_fails_hidden_overflows(name):
    pipe = mystery.make(name, 3, BASE, salt="t-f")
    (field,) = mystery.touched(pipe)
    fixed = pipe.replace(**{field: getattr(Pipeline(), field)})
    assert mystery.kept_problems(pipe, fixed) == []
    assert amp.overflow_problems(fixed, seed=7) == []
    assert amp.overflow_problems(pipe, seed=7), f"{name}: the unfixed pipeline passes the check"
    if PLACE[name] == "loss":  # the broken loss taken in float32: a finite loss, far from the reference
        broken = pipe.loss_fn
        hidden = pipe.replace(loss_fn=lambda logits, batch: broken(logits.float(), batch))
        assert amp.precision_run(hidden, torch.float16, use_scaler=True, steps=3).first_nonfinite() is None
        assert amp.overflow_problems(hidden, seed=7), f"{name}: the loss taken in float32 passes the check"
    if PLACE[name] == "updates":  # a learning rate that is not the pipeline's
        own_lr = pipe.replace(optimizer_factory=lambda params, lr, wd: torch.optim.AdamW(params, lr=1e-3))
        assert any("reference parts give" in p for p in amp.overflow_problems(own_lr, seed=7))
        # AdamW's own default weight decay (0.01) instead of the one passed (0.0): the losses agree to
        # 0.001, the weights do not
        default_decay = pipe.replace(optimizer_factory=lambda params, lr, wd: torch.optim.AdamW(params, lr=lr))
        assert any("weights differ" in p for p in amp.overflow_problems(default_decay, seed=7)), name
