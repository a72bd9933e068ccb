"""One worker of a two-worker PyTorch job through the installed shim (bytecomp.torch as the
Debian package installs it), started by bytecomp-run inside the fresh Debian root.

Checks, exactly (fp32 sums of small integers, and a mean of two fp32 values, are exact):
  - the shim loaded the engine from the package's path, with no BYTECOMP_LIBRARY;
  - push_pull sums each worker's tensor: (rank + 1) * [0, 1, ...] summed over two workers;
  - one DistributedOptimizer step of a small model, each worker on its own batch, leaves
    every parameter equal on both workers and equal to the step this worker computes by
    itself from both batches' gradients averaged.
Prints "torch step ok: rank R" on success; any mismatch raises.
"""
import os
import sys

import torch

import bytecomp._engine as engine
import bytecomp.torch as bc

EXPECTED_LIBRARY = sys.argv[1] if len(sys.argv) > 1 else "/usr/lib/libbytecomp_worker.so"
LR = 0.5


def batch(rank):
    generator = torch.Generator().manual_seed(1000 + rank)
    return (torch.randn(8, 6, generator=generator),
            torch.randint(0, 3, (8,), generator=generator))


def make_model():
    torch.manual_seed(7)  # the same initial parameters on every worker
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def gradients(model, data):
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(data[0]), data[1]).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def main():
    assert "BYTECOMP_LIBRARY" not in os.environ and "BYTECOMP_BUILD_DIR" not in os.environ
    library = engine.find_library()
    assert library == EXPECTED_LIBRARY, "engine loaded from %s" % library
    bc.init()
    rank, size = bc.rank(), bc.size()
    assert size == 2, size

    values = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    total = bc.push_pull(values, "exact/sum", average=False)
    assert torch.equal(total, torch.arange(1000, dtype=torch.float32) * 3), "push_pull sum"

    # The reference step: both workers' gradients, computed here, averaged, applied by the
    # same optimizer (so that its arithmetic is the same as the distributed step's).
    reference = make_model()
    grads = [gradients(reference, batch(r)) for r in range(size)]
    for name, p in reference.named_parameters():
        p.grad = (grads[0][name] + grads[1][name]) / 2
    torch.optim.SGD(reference.parameters(), lr=LR).step()

    model = make_model()
    optimizer = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                        model.named_parameters())
    bc.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer.zero_grad()
    data = batch(rank)
    torch.nn.functional.cross_entropy(model(data[0]), data[1]).backward()
    optimizer.step()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(p.detach(), q.detach()), "parameter %s differs from the reference" % name
    bc.shutdown()
    print("torch step ok: rank %d" % rank, flush=True)


if __name__ == "__main__":
    main()
