"""Drop the `ports:` of host-networked services from a merged compose file.

docker-compose 1.x refuses `ports` with `network_mode: host` ("host" network_mode is
incompatible with port_bindings), and an override file cannot remove a list that
compose.yml sets. So docker/check/run.sh merges compose.yml and compose.local.yml
with `config`, passes the result through this filter and starts what comes out:

    docker-compose -f docker/compose.yml -f docker/compose.local.yml config \
        | python docker/check/drop_ports.py > merged.yml

Under host networking Docker would discard published ports anyway.
"""

from __future__ import annotations

import sys

import yaml


def main() -> None:
    merged = yaml.safe_load(sys.stdin)
    for service in merged["services"].values():
        if service.get("network_mode") == "host":
            service.pop("ports", None)
    yaml.safe_dump(merged, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
