"""``python -m plan.job``: print a gang-scheduled InfiniBand job for one pool of a stack.

The objects come from ``plan.infiniband_job.infiniband_job``; this shell reads the stack file the way the
plan does, so the job names the pool's real labels, taints and GPU count. docs/infiniband-jobs.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import yaml

from infra.config.errors import ConfigError
from plan.infiniband_job import infiniband_job
from plan.stackfile import stack_cluster_spec


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan.job", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--pool", required=True, help="an InfiniBand GPU pool of the stack")
    parser.add_argument("--name", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    try:
        spec = stack_cluster_spec(args.stack)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pools = {p.name: p for p in spec.config.node_pools}
    if args.pool not in pools:
        parser.error(f"--pool {args.pool}: expected a pool of stack {args.stack}: {', '.join(pools)}")
    try:
        objects = infiniband_job(
            name=args.name,
            namespace=args.namespace,
            pool=pools[args.pool],
            nodes=args.nodes,
            image=args.image,
            command=args.command,
        )
    except ValueError as error:
        parser.error(str(error))
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
