"""The reference loop, with PyTorch itself as the oracle."""

import pytest
import torch
import torch.nn.functional as F

from labutils.config import LabConfig
from labutils.data import make_loader
from labutils.evaluation import evaluate
from labutils.reference.loop import Position, fit, optimizer_step, train_one_epoch
from labutils.models import SmallCNN
from labutils.reference.optim import make_scheduler, param_groups


def tiny_images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g), torch.randint(0, 10, (n,), generator=g)


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    return SmallCNN(channels=(4, 8), **kw)


def recorded_steps(optimizer):
    """Record a copy of every gradient ``optimizer.step`` applies."""
    seen = []
    optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: seen.append([p.grad.detach().clone() for g in opt.param_groups for p in g["params"]]))
    return seen


def one_epoch(loader, accum_steps=1, max_norm=None):
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = recorded_steps(optimizer)
    scheduler = make_scheduler(optimizer, "constant", total_steps=100)
    rows = []
    train_one_epoch(model, loader, optimizer, scheduler, accum_steps=accum_steps, max_norm=max_norm,
                    hooks=(lambda pos, row: rows.append(row),))
    return applied, rows


def test_accumulated_gradient_equals_the_full_batch_gradient():
    images, labels = tiny_images(32)
    accumulated, rows = one_epoch(make_loader(images, labels, batch_size=8, shuffle=False), accum_steps=4)
    full, _ = one_epoch(make_loader(images, labels, batch_size=32, shuffle=False))
    assert len(accumulated) == len(full) == 1  # one optimizer step per 4 micro-batches
    for a, b in zip(accumulated[0], full[0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert rows[0]["step"] == 1


def test_trailing_partial_window_is_stepped_with_a_mean_gradient():
    images, labels = tiny_images(40)  # 5 micro-batches of 8 with accum_steps=4: windows of 4 and 1
    applied, _ = one_epoch(make_loader(images, labels, batch_size=8, shuffle=False), accum_steps=4)
    assert len(applied) == 2
    model = tiny_model()  # the second window's reference: the parameters after step 1, last 8 images
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    first, _ = one_epoch(make_loader(images[:32], labels[:32], batch_size=8, shuffle=False), accum_steps=4)
    with torch.no_grad():
        for p, g in zip(model.parameters(), first[0]):
            p -= 0.1 * g
    F.cross_entropy(model(make_loader(images[32:], labels[32:], 8, shuffle=False).dataset.__getitems__(list(range(8)))[0]),
                    labels[32:]).backward()
    for a, p in zip(applied[1], model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6)
    del optimizer


def test_gradient_seen_by_the_optimizer_respects_max_norm_and_the_log_has_the_pre_clip_norm():
    images, labels = tiny_images(64)
    loader = make_loader(images, labels, batch_size=16, shuffle=False)
    clipped, rows = one_epoch(loader, max_norm=0.05)
    unclipped, _ = one_epoch(loader)
    first_norm = torch.nn.utils.get_total_norm(unclipped[0]).item()
    assert rows[0]["grad_norm"] == pytest.approx(first_norm, rel=1e-5) and first_norm > 0.05
    for grads in clipped:
        assert torch.nn.utils.get_total_norm(grads).item() <= 0.05 * (1 + 1e-5)
    assert all(row["clipped"] for row in rows)


def test_grad_scaler_is_unscaled_before_clipping():
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = recorded_steps(optimizer)
    scheduler = make_scheduler(optimizer, "constant", total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    images, labels = tiny_images(16)
    x, y = make_loader(images, labels, 16).dataset.__getitems__(list(range(16)))
    scaler.scale(F.cross_entropy(model(x), y)).backward()
    true_norm = torch.nn.utils.get_total_norm([p.grad / 2.0**16 for p in model.parameters()]).item()
    norm, _ = optimizer_step(model, optimizer, scheduler, scaler, max_norm=1.0)
    assert norm == pytest.approx(true_norm, rel=1e-4)  # the logged norm is of the true, unscaled gradient
    assert torch.nn.utils.get_total_norm(applied[0]).item() <= 1.0 + 1e-5


def test_onecycle_lr_rises_then_falls():
    result = fit(LabConfig(subset=1024, epochs=2, schedule="onecycle", lr=3e-3, progress=False), log=lambda *_: None)
    lrs = [row["lr"] for row in result.steps]
    peak = lrs.index(max(lrs))
    assert 0 < peak < len(lrs) - 1
    assert max(lrs) == pytest.approx(3e-3, rel=0.05)
    assert all(a <= b for a, b in zip(lrs[:peak], lrs[1:peak + 1]))  # rises...
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:]))  # ...then falls
    assert lrs[-1] < lrs[0]


def test_warmup_cosine_warms_up_linearly_then_decays():
    optimizer = torch.optim.AdamW(tiny_model().parameters(), lr=1e-3)
    scheduler = make_scheduler(optimizer, "warmup_cosine", total_steps=50, warmup_steps=10)
    lrs = []
    for _ in range(50):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] < 1e-5 and lrs[10] == pytest.approx(1e-3, rel=1e-6)
    assert all(a > b for a, b in zip(lrs[10:], lrs[11:]))


def test_evaluate_averages_per_sample_and_restores_the_mode():
    images, labels = tiny_images(50)
    model = tiny_model(dropout=0.5)
    loader = make_loader(images, labels, batch_size=16, shuffle=False)  # 16, 16, 16, 2: uneven last batch
    loss, acc = evaluate(model, loader)
    assert model.training  # train mode restored
    model.eval()
    with torch.no_grad():
        x, y = loader.dataset.__getitems__(list(range(50)))
        logits = model(x)
    assert loss == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)
    assert acc == pytest.approx((logits.argmax(1) == y).float().mean().item())
    evaluate(model, loader)
    assert not model.training  # and eval mode, when that is what the caller had


def test_param_groups_exempt_biases_and_norm_parameters():
    model = tiny_model(batchnorm=True)
    decay, no_decay = param_groups(model, weight_decay=0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"]) and all(p.ndim <= 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_bf16_autocast_trains_on_cpu():
    images, labels = tiny_images(32)
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = make_scheduler(optimizer, "constant", total_steps=10)
    dtypes = []
    model.register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    pos = Position()
    loss = train_one_epoch(model, make_loader(images, labels, 16), optimizer, scheduler, amp_dtype=torch.bfloat16,
                           pos=pos)
    assert dtypes == [torch.bfloat16, torch.bfloat16] and pos.step == 2 and loss > 0
