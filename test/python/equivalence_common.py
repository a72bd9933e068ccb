"""The equivalence experiment, shared by the in-process unit test (fake engine) and the
multi-process test (real engine): W workers each train on their slice of every batch through
DistributedOptimizer; one process trains on the whole batch; parameters must match."""

import threading

import torch
import torch.nn.functional as F

# Seeding and initialising use the process-wide generator: threads acting as workers (unit
# tests) must not interleave, or rank 0's "seeded" model would depend on scheduling.
_init_lock = threading.Lock()

IN, HIDDEN, OUT = 16, 32, 8


def make_model(seed):
    with _init_lock:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                                   torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                                   torch.nn.Linear(HIDDEN, OUT))


def make_batches(seed, steps, global_batch):
    g = torch.Generator().manual_seed(seed + 1000)
    x = torch.randn(steps, global_batch, IN, generator=g)
    y = torch.randint(0, OUT, (steps, global_batch), generator=g)
    return x, y


def make_optimizer(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def train_distributed(bc, rank, size, steps=20, local_batch=8, average=True, lr=0.1, seed=7,
                      backward_passes_per_step=1, cross_barrier=False):
    """One worker. Starts from a model initialised with a rank-dependent seed and broadcasts
    rank 0's parameters, so the broadcast is part of what is checked. cross_barrier: the
    optimizer gets the model (each update deferred to the next forward)."""
    torch.set_num_threads(1)
    model = make_model(seed + rank)
    bc.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = bc.DistributedOptimizer(make_optimizer(model.parameters(), lr),
                                  model.named_parameters(), average=average,
                                  backward_passes_per_step=backward_passes_per_step,
                                  model=model if cross_barrier else None)
    k = backward_passes_per_step
    x, y = make_batches(seed, steps, local_batch * size)
    for step in range(steps):
        lo = rank * local_batch
        micro = local_batch // k
        for j in range(k):
            xb = x[step, lo + j * micro:lo + (j + 1) * micro]
            yb = y[step, lo + j * micro:lo + (j + 1) * micro]
            (F.cross_entropy(model(xb), yb) / k).backward()
        opt.step()
        opt.zero_grad()
    opt.synchronize()  # cross-barrier: the last step's updates
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def train_reference(size, steps=20, local_batch=8, average=True, lr=0.1, seed=7):
    """One process on the concatenated batch. With average=False the workers' gradients are
    summed, i.e. W times the mean-loss gradient of the whole batch."""
    torch.set_num_threads(1)
    model = make_model(seed)
    opt = make_optimizer(model.parameters(), lr)
    x, y = make_batches(seed, steps, local_batch * size)
    for step in range(steps):
        loss = F.cross_entropy(model(x[step]), y[step])
        if not average:
            loss = loss * size
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def max_relative_difference(got, want):
    """max over tensors of ||got - want|| / ||want||."""
    worst = 0.0
    for name, w in want.items():
        diff = (got[name].double() - w.double()).norm() / w.double().norm().clamp_min(1e-30)
        worst = max(worst, float(diff))
    return worst
