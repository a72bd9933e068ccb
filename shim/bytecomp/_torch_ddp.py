"""DistributedDataParallel's gradient buckets through ByteComp: a DDP communication hook.

    bc.init()
    bc.init_process_group()             # gloo, used by DDP for its start-up only (see below)
    model = DistributedDataParallel(model)
    model.register_comm_hook(bc.DDPHookState(model), bc.ddp_comm_hook)   # the one-line switch

DDP keeps its buckets, its overlap with backward and its bucket rebuild; when a bucket is ready
the hook starts its push_pulls and returns a Future that a completion thread fulfils once the
servers' averages are in. DDP waits for the Futures at the end of backward and copies the
averages into the gradients.

Granularity (DDPHookState(per=...)): "parameter" (default) pushes each parameter's slice of the
bucket as its own engine tensor, named as DistributedOptimizer names it ("grad/" + parameter
name) with priority -index (first layers first). So the strategy is applied per parameter: a
strategy file written for DistributedOptimizer, the planner's per-tensor plan and codecs that
use a layer's shape apply unchanged, and names do not depend on how DDP groups parameters
(DDP rebuilds its buckets after the first step). "bucket" pushes the whole flat bucket as one
tensor named after the set of parameters in it ("grad/bucket/<hash>"), priority that of its
first layer: fewer, larger messages, one codec per bucket.

The process group: DDP needs one for its start-up (parameter broadcast and shape check), for
the bucket-order broadcast after the first step, and for buffers (broadcast_buffers) each
forward; gradients never touch it once the hook is registered. init_process_group() makes a
gloo group whose rendezvous goes through ByteComp: rank 0 opens a TCPStore on its address
towards the scheduler and broadcasts address and port with a push_pull (MASTER_ADDR and
MASTER_PORT, when set, are used instead).
"""

import datetime
import fcntl
import hashlib
import os
import queue
import socket
import struct
import threading

import torch

from . import _core
from . import _torch_ops as bct

PER_PARAMETER, PER_BUCKET = "parameter", "bucket"


class DDPHookState:
    """The hook's state: engine names and priorities of the model's parameters, and the
    thread that completes DDP's Futures. Construct it after init(), on every worker with the
    same model; it declares every parameter (per="parameter"), so a size that differs
    between workers fails here, before the first step.

    model: the DistributedDataParallel model (or its module). per: "parameter" or "bucket"
    (module docstring). average: mean over workers (what DDP expects) or sum. optimizer:
    optional; its learning rate reaches the codecs that use it (efsignsgd) every step."""

    def __init__(self, model, per=PER_PARAMETER, name_prefix="grad/", average=True,
                 optimizer=None):
        if per not in (PER_PARAMETER, PER_BUCKET):
            raise ValueError(f"DDPHookState: per must be '{PER_PARAMETER}' or '{PER_BUCKET}', "
                             f"not {per!r}")
        module = getattr(model, "module", model)  # names without DDP's "module." prefix
        self.per, self.average, self.optimizer = per, average, optimizer
        self.name_prefix = name_prefix
        self._by_address = {}  # parameter's data_ptr -> (engine name, priority)
        for index, (name, p) in enumerate(module.named_parameters()):
            if not p.requires_grad:
                continue
            self._by_address[p.data_ptr()] = (name_prefix + name, -index)
            if per == PER_PARAMETER:
                bct.declare(name_prefix + name, p)
        self._bucket_names = {}  # tuple of parameter names -> bucket tensor name
        self._pending = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def _describe(self, p):
        entry = self._by_address.get(p.data_ptr())
        if entry is None:
            raise RuntimeError("ddp_comm_hook: a bucket holds a parameter that is not in the "
                               "model given to DDPHookState (or its storage was replaced)")
        return entry

    def bucket_name(self, names):
        """The engine name of a bucket holding these parameters: the same on every worker
        and for every bucket with the same contents."""
        name = self._bucket_names.get(names)
        if name is None:
            digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]
            name = self._bucket_names[names] = f"{self.name_prefix}bucket/{digest}"
        return name

    def names(self):
        return [name for name, _ in self._by_address.values()]

    def _complete(self, handles, future, result):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._completion_loop,
                                                name="bytecomp-ddp-hook", daemon=True)
                self._thread.start()
        self._pending.put((handles, future, result))

    def _completion_loop(self):
        # Buckets finish roughly in the order they started; waiting in that order costs
        # nothing because DDP waits for every Future before it uses any.
        while True:
            handles, future, result = self._pending.get()
            try:
                _core.synchronize_all(handles)
            except Exception as e:  # noqa: BLE001 (DDP re-raises it from backward)
                future.set_exception(e)
            else:
                future.set_result(result)

    def state_dict(self):
        """The codecs' error-feedback state of every gradient (for a checkpoint; between
        steps)."""
        names = self.names() if self.per == PER_PARAMETER else list(self._bucket_names.values())
        return {name: _core.save_state(name) for name in names}

    def load_state_dict(self, state):
        for name, blob in state.items():
            _core.load_state(name, blob)


def ddp_comm_hook(state, bucket):
    """DDP communication hook (DistributedDataParallel.register_comm_hook(state, hook)):
    averages the bucket over all workers through ByteComp. Returns a torch.futures.Future
    holding the averaged flat bucket."""
    if state.optimizer is not None:
        _core.set_learning_rate(state.optimizer.param_groups[0]["lr"])
    buffer = bucket.buffer()
    params = bucket.parameters()
    described = [state._describe(p) for p in params]
    handles = []
    if state.per == PER_PARAMETER:
        for grad, (name, priority) in zip(bucket.gradients(), described):
            handles.append(bct.push_pull_async_inplace(grad, name, average=state.average,
                                                       priority=priority))
    else:
        name = state.bucket_name(tuple(n for n, _ in described))
        priority = max(priority for _, priority in described)
        handles.append(bct.push_pull_async_inplace(buffer, name, average=state.average,
                                                   priority=priority))
    future = torch.futures.Future()
    state._complete(handles, future, buffer)
    return future


# ---------------------------------------------------------------------------------------------
# A process group for DDP, rendezvous through ByteComp


def _address_towards_scheduler():
    """This host's address on the interface that reaches the scheduler (in an emulated
    cluster: the namespace's own address)."""
    host = os.environ.get("BYTECOMP_SCHEDULER", "").rpartition(":")[0].strip("[]")
    if host:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(host), 9))  # UDP: nothing is sent
            return s.getsockname()[0]
    return socket.gethostbyname(socket.gethostname())


def _interface_of(address):
    """The name of the network interface that holds an IPv4 address, or None."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                info = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s",
                                                                        name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(info[20:24]) == address:
                return name
    return None


def interface_towards_scheduler():
    """(address, interface name or None) of this host on the way to the scheduler."""
    address = _address_towards_scheduler()
    return address, _interface_of(address)


def init_process_group(backend="gloo", timeout=datetime.timedelta(minutes=5)):
    """Initialises torch.distributed for DDP with ByteComp's ranks (call after init()).
    With MASTER_ADDR and MASTER_PORT set it uses them; otherwise rank 0 opens the TCPStore on
    its address towards the scheduler and the others learn it through a ByteComp broadcast.
    For gloo, GLOO_SOCKET_IFNAME is set to that address's interface unless already set."""
    import torch.distributed as dist
    if dist.is_initialized():
        return
    rank, size = _core.rank(), _core.size()
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        dist.init_process_group(backend, rank=rank, world_size=size, timeout=timeout)
        return
    address, interface = interface_towards_scheduler()
    if backend == "gloo" and interface and not os.environ.get("GLOO_SOCKET_IFNAME"):
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    store, where = None, torch.zeros(5)  # the others contribute zeros: the sum is rank 0's
    if rank == 0:
        # Not waiting for the others here: they learn the port from the push_pull below.
        store = dist.TCPStore(address, 0, size, True, timeout=timeout, wait_for_workers=False)
        where = torch.tensor([float(x) for x in socket.inet_aton(address)] + [store.port])
    where = bct.push_pull(where, "bytecomp/process_group", average=False)
    if rank != 0:
        host = socket.inet_ntoa(bytes(int(x) for x in where[:4].tolist()))
        store = dist.TCPStore(host, int(where[4].item()), size, False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
