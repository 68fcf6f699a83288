"""The same fleet `emulate` runs, as containers for Docker or Podman users: `emulate --export
compose DIR` writes

    compose.yaml     one service per agent (nodeI) on one network, cap_add NET_ADMIN
    Containerfile    the agent image: a Debian base, the wheelhouse installed, the entrypoint
    entrypoint.sh    inside each container: the loss and rate rules, then the agent without
                     NET_ADMIN (it cannot lift its own loss)
    loss/nodeI.nft   node I's nftables rules, as `emulate` installs them: independent loss
                     (netem instead where the kernel has it), or each link's burst or trace
                     pattern replayed (transport/lossmodel.py), the senders named @nodeJ@ until
                     the entrypoint puts in the addresses the network gave them
    wheels/          edgegossip and its dependencies for this machine's platform
    data/NAME.npz    the data set every node trains its shard of (read-only in each container)
    model/           a compiled model's files (read-only in each container), when it is one
    config/agentI.toml  each node's agent config (read-only in its container)
    agentI/          each node's checkpoint and metrics once it ran: the layout `emulate` writes,
                     so report/summary.py summarises a compose run as it does an emulated one"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from edgegossip import artifact, config
from edgegossip.data import mnist
from edgegossip.emulate import device
from edgegossip.emulate.fleet import PORT, EmulatedFleet, FleetSpec
from edgegossip.emulate.netns import loss_rules, replayed_links, tbf
from edgegossip.errors import UsageError
from edgegossip.fleet import bundle
from edgegossip.models import NAMED
from edgegossip.run import rate_to_mbps

IMAGE = "localhost/edgegossip-agent:latest"
DEFAULT_BASE = "docker.io/library/debian:bookworm-slim"
STATE = "/var/lib/edgegossip"
MODEL = "/etc/edgegossip/model"  # a compiled model's folder in each container
# podman-compose starts one container after another: 5 s apart here on a quiet machine, 30 s
# and more under load (a CI run's agents started 51.3, 59.4 and 81.5 s in, so the last one and
# the first never trained together). A compose network's DNS knows a service once its container
# runs, so an agent that waits for every peer's name starts with the last of them, and the
# fleet trains its --duration together.
PEER_WAIT_S = 300.0


class ComposeError(UsageError, ValueError):
    """An export this machine cannot write."""


CONTAINERFILE = """# the edgegossip agent; built by `podman-compose build` (or docker compose build)
ARG BASE={base}
FROM ${{BASE}}
# a stock Debian base lacks these; a base that has them (e.g. an imported lab root) skips apt
RUN command -v nft >/dev/null && command -v tc >/dev/null && python3 -c "import venv, ensurepip" \\
    || (apt-get update && apt-get install -y --no-install-recommends python3 python3-venv nftables \\
        iproute2 libssl3 && rm -rf /var/lib/apt/lists/*)
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/edgegossip/venv \\
    && /opt/edgegossip/venv/bin/pip install --quiet --no-index --find-links /tmp/wheels "edgegossip{extra}" \\
    && rm -rf /tmp/wheels
COPY entrypoint.sh /usr/local/lib/edgegossip/
ENV EDGEGOSSIP_CACHE=/data OPENBLAS_NUM_THREADS=1
ENTRYPOINT ["/bin/sh", "/usr/local/lib/edgegossip/entrypoint.sh"]
"""

ENTRYPOINT = """#!/bin/sh
# the link as `emulate` makes it: independent loss by netem where the kernel has it, else (and
# for bursts and traces, whose patterns are per link) nftables at ingress; tbf caps the rate
set -eu
dev=eth0
rules=/etc/edgegossip/loss.nft
if grep -q '@node' $rules; then  # per-link rules name each sender: its address, once it has one
  cp $rules /tmp/loss.nft; rules=/tmp/loss.nft
  for name in $(grep -o '@node[0-9]*@' $rules | sort -u | tr -d @); do
    waited=0
    until addr=$(getent ahostsv4 "$name" | awk 'NR == 1 {print $1}') && [ -n "$addr" ]; do
      [ $waited -lt "${EG_PEER_WAIT_S}" ] || { echo "$name has no address: no loss rule" >&2; exit 1; }
      sleep 1; waited=$((waited + 1))
    done
    sed -i "s/@$name@/$addr/g" $rules
  done
fi
if [ -n "${EG_LOSS_PERCENT:-}" ] && [ "$EG_LOSS_PERCENT" != 0 ]; then
  if [ "${EG_LOSS_MODEL:-bernoulli}" = bernoulli ] &&
    tc qdisc add dev $dev root handle 1: netem loss "${EG_LOSS_PERCENT}%" 2>/dev/null; then
    echo "loss ${EG_LOSS_PERCENT}% by netem (egress)"
    [ -n "${EG_TBF:-}" ] && tc qdisc add dev $dev parent 1: handle 2: $EG_TBF
  else
    nft -f $rules && echo "loss ${EG_LOSS_PERCENT}% by nftables (ingress, ${EG_LOSS_MODEL:-bernoulli})"
    [ -n "${EG_TBF:-}" ] && tc qdisc add dev $dev root $EG_TBF
  fi
elif [ -n "${EG_TBF:-}" ]; then
  tc qdisc add dev $dev root $EG_TBF
fi
# the agent itself runs without capabilities: it cannot lift its own loss
chown -R 65532:65532 /var/lib/edgegossip/out
exec setpriv --reuid=65532 --regid=65532 --clear-groups --inh-caps=-all --bounding-set=-all \\
  --no-new-privs -- /opt/edgegossip/venv/bin/edgegossip agent --config /etc/edgegossip/agent.toml
"""


def _pyyaml():
    """PyYAML, which writes the compose file (the fleet extra: the operator's machine); asked
    for before anything is written."""
    try:
        import yaml
    except ImportError:
        raise ComposeError(
            "--export compose writes its compose.yaml with PyYAML, which is not installed: "
            "pip install 'edgegossip[fleet]'"
        ) from None
    return yaml


def _service(spec: FleetSpec, i: int, name: str, base: str) -> dict:
    """Node i's service: its image, loss and link cap, its board's CPU share and memory (the
    engine's own cgroup limits: --devices, --cpu), and its folders (a compiled model's too)."""
    env = {
        "EG_LOSS_PERCENT": f"{spec.network.loss * 100:g}",
        "EG_LOSS_MODEL": spec.network.loss_model,
        "EG_PEER_WAIT_S": f"{PEER_WAIT_S:g}",
    }
    rate = spec.network.rate_of(i)
    if rate and rate_to_mbps(rate):
        env["EG_TBF"] = " ".join(tbf(rate))  # the words of netns.tbf: one link model
    device, limits = spec.device(i), dict[str, float | str]()
    if device.cpu:
        limits["cpus"] = device.cpu
    if device.memory_mb:
        limits["mem_limit"] = f"{device.memory_mb}m"
    return {
        **limits,
        "build": {"context": ".", "dockerfile": "Containerfile", "args": {"BASE": base}},
        "image": IMAGE,
        "hostname": name,
        "cap_add": ["NET_ADMIN"],
        "networks": ["fleet"],
        "environment": env,
        "volumes": [
            f"./agent{i}:{STATE}/out:Z",
            f"./loss/{name}.nft:/etc/edgegossip/loss.nft:ro,Z",
            "./data:/data:ro,Z",
            f"./config/agent{i}.toml:/etc/edgegossip/agent.toml:ro,Z",
            *([] if spec.model in NAMED else [f"./model:{MODEL}:ro,Z"]),
        ],
    }


def _loss_files(spec: FleetSpec, out: Path, names: list[str]) -> None:
    """Each node's rules: the same links, patterns and seeds as `emulate` gives its namespaces,
    each sender @nodeJ@ (its address is the compose network's to give)."""
    (out / "loss").mkdir(exist_ok=True)
    addrs = [f"@{name}@" for name in names]
    for i, name in enumerate(names):
        links = replayed_links(spec.network.links(), spec.setting("seed"), addrs, i)
        (out / "loss" / f"{name}.nft").write_text(loss_rules(spec.network.loss, links=links))


def _model(spec: FleetSpec, out: Path) -> dict:
    """A compiled model copied into out/model (mounted read-only at MODEL in each container):
    the config settings that name it there and its digest, which the agent checks at start;
    nothing for a named model."""
    if spec.model in NAMED:
        return {}
    if (out / "model").exists():
        shutil.rmtree(out / "model")
    return {"model": MODEL, "model_digest": artifact.copy(spec.model, out / "model")}


def _image_files(spec: FleetSpec, out: Path, base: str, progress) -> dict:
    """The data set, the wheelhouse and the Containerfile that installs it; the wheelhouse's
    manifest."""
    device.share_read_only(mnist.cache_path(spec.data), out / "data")
    # a compiled model (or the onnx backend) trains in onnxruntime
    extras = ("onnx",) if spec.model not in NAMED or spec.setting("backend") == "onnx" else ()
    manifest = bundle.build(out / "wheels", extras=extras, progress=progress)
    extra = f"[{','.join(extras)}]" if extras else ""
    (out / "Containerfile").write_text(CONTAINERFILE.format(base=base, extra=extra))
    return manifest


def export(spec: FleetSpec, out: Path, base: str = DEFAULT_BASE, progress=print) -> dict:
    if spec.network.medium != "switch":  # a container network has no shared channel of ours
        raise ValueError("--export compose gives each container its own link: no --medium wifi")
    yaml = _pyyaml()
    out.mkdir(parents=True, exist_ok=True)
    names = [f"node{i}" for i in range(spec.nodes)]
    fleet = EmulatedFleet(
        replace(spec, backend="netns", out=out)
    )  # the configs emulate would give them
    addrs = [(n, PORT) for n in names]
    own = _model(spec, out)  # a compiled model's: its folder in each container, and digest
    services = {}
    for i, name in enumerate(names):
        # no GSO: netem's loss, where the kernel has it, sits before any cut and would drop a
        # GSO buffer whole
        cfg = replace(
            fleet._config(i, addrs),
            output=f"{STATE}/out",
            listen=f"0.0.0.0:{PORT}",
            gso=False,
            peer_wait_s=PEER_WAIT_S,
            **own,
        )
        (out / f"agent{i}").mkdir(exist_ok=True)
        (out / "config").mkdir(exist_ok=True)
        (out / "config" / f"agent{i}.toml").write_text(config.to_toml(cfg))
        services[name] = _service(spec, i, name, base)
    doc = {"services": services, "networks": {"fleet": {"driver": "bridge"}}}
    (out / "compose.yaml").write_text(
        f"# {spec.nodes} edgegossip agents, {spec.algorithm}, {spec.network.loss:.0%} loss, "
        f"links {spec.network.rate or 'uncapped'}: `podman-compose up` (or `docker compose up`)\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    (out / "entrypoint.sh").write_text(ENTRYPOINT)
    _loss_files(spec, out, names)
    manifest = _image_files(spec, out, base, progress)
    return {
        "out": str(out),
        "compose": str(out / "compose.yaml"),
        "services": names,
        "image": IMAGE,
        "base": base,
        "release": manifest["release"],
    }
