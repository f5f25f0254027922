"""Rules on what is reachable: no Service opens a node port or a load balancer, no policy opens the internet.

Platform services are reached inside the cluster (or through the platform's ingress); a
LoadBalancer or NodePort Service opens them to every network that reaches the nodes, so each
one must be named in the stack (``security.exposed_services``). A NetworkPolicy that allows
egress to 0.0.0.0/0, or to every destination by leaving ``to`` out, undoes default-deny: the
internet is reached only through the stack's egress proxy or CIDR allowlist.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, object_rule
from trainyard.policy.pods import as_dict, as_list, dig

EXPOSING_TYPES = ("LoadBalancer", "NodePort")


@object_rule("no-exposed-services", "No LoadBalancer or NodePort Service unless the stack allows it.",
             "Use a ClusterIP Service (reached in-cluster or through the platform ingress), or list the service "
             "as namespace/name in security.exposed_services after review.")
def no_exposed_services(obj: Manifest, ctx: Context) -> Iterator[str]:
    service_type = dig(obj, "spec", "type")
    if obj.get("kind") != "Service" or service_type not in EXPOSING_TYPES:
        return
    ref = f"{dig(obj, 'metadata', 'namespace') or 'default'}/{dig(obj, 'metadata', 'name')}"
    if ref not in ctx.config.security.exposed_services:
        yield f"is of type {service_type} and {ref} is not in security.exposed_services"


def _everywhere(cidr: object) -> bool:
    try:
        return ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0
    except ValueError:
        return False


@object_rule("netpol-no-internet-egress", "No NetworkPolicy allows egress to 0.0.0.0/0 (or to every destination).",
             "Allow egress to the named services and CIDRs only; reach the internet through "
             "security.network.egress_proxy or egress_allowlist.")
def netpol_no_internet_egress(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "NetworkPolicy":
        return
    for i, rule in enumerate(as_list(dig(obj, "spec", "egress"))):
        peers = as_list(as_dict(rule).get("to"))
        if not peers:
            yield f"spec.egress[{i}] has no 'to', which allows egress to every destination"
        for j, peer in enumerate(peers):
            cidr = dig(peer, "ipBlock", "cidr")
            if cidr is not None and _everywhere(cidr):
                yield f"spec.egress[{i}].to[{j}].ipBlock.cidr {cidr} allows the whole internet"


RULES = (no_exposed_services, netpol_no_internet_egress)
