"""The API server for pods on the real nodes, its pure parts: where pods reach it, the endpoints the kubernetes Service
gets (as the API server's reconciler writes them), the forwarder that relays to loopback, and what the cleanup lists."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import free_ports
from trainyard.rehearsal import forwarder
from trainyard.rehearsal.cluster import HOST, Settings
from trainyard.rehearsal.in_cluster_api import (
    FORWARDER,
    InClusterApi,
    api_address,
    device_name,
    endpoint_manifests,
    forwarder_command,
)
from trainyard.rehearsal.node import NodeLayout
from trainyard.rehearsal.processes import Processes


def test_pods_reach_the_api_server_at_the_pod_networks_last_address_outside_every_nodes_subnet(tmp_path: Path) -> None:
    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)})
    address = ipaddress.IPv4Address(api_address("10.244.0.0/16"))
    assert str(address) == "10.244.255.254"
    assert all(address not in NodeLayout(settings, f"node-{i}", i).subnet for i in range(255))
    assert address in NodeLayout(settings, "node-255", 255).subnet  # the one node its subnet check refuses
    assert api_address("10.217.0.0/16") == "10.217.255.254"


def test_a_pod_network_smaller_than_a_slash_23_is_refused_before_anything_starts(tmp_path: Path) -> None:
    api = InClusterApi(Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)}), "10.244.0.0/24")
    [problem] = api.problems()
    assert "10.244.0.0/24 is smaller than a /23" in problem and "TRAINYARD_POD_NETWORK" in problem


def test_the_kubernetes_service_gets_the_endpoints_the_api_servers_reconciler_writes() -> None:
    endpoints, endpoint_slice = endpoint_manifests("10.244.255.254", 26443)
    port = {"name": "https", "port": 26443, "protocol": "TCP"}  # the Service's port name; the API server's port
    assert endpoints["kind"] == "Endpoints" and endpoints["metadata"]["namespace"] == "default"
    assert endpoints["metadata"]["name"] == endpoint_slice["metadata"]["name"] == "kubernetes"
    # kube-controller-manager's mirroring controller would otherwise copy it into a second slice
    assert endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"] == "true"
    assert endpoints["subsets"] == [{"addresses": [{"ip": "10.244.255.254"}], "ports": [port]}]
    assert endpoint_slice["apiVersion"] == "discovery.k8s.io/v1" and endpoint_slice["addressType"] == "IPv4"
    labels = endpoint_slice["metadata"]["labels"]
    assert labels["kubernetes.io/service-name"] == "kubernetes"  # what kube-proxy and the resolvers select by
    assert labels["endpointslice.kubernetes.io/managed-by"] == "rehearsal.trainyard.dev"
    assert endpoint_slice["endpoints"] == [{"addresses": ["10.244.255.254"], "conditions": {"ready": True}}]
    assert endpoint_slice["ports"] == [port]


def test_the_forwarder_listens_where_the_endpoints_say_and_relays_to_the_api_server_on_loopback() -> None:
    command = forwarder_command("/venv/bin/python", "10.244.255.254", 26443)
    assert command == ["/venv/bin/python", "-m", "trainyard.rehearsal.forwarder",
                       "--listen", "10.244.255.254:26443", "--to", "127.0.0.1:26443"]
    assert forwarder.parse_address("10.244.255.254:26443") == ("10.244.255.254", 26443)
    for bad in ("10.244.255.254", ":1", "host:0", "host:http"):
        with pytest.raises(ValueError, match="is not ADDRESS:PORT"):
            forwarder.parse_address(bad)


def test_the_device_is_one_per_cluster_and_named_like_the_nodes_bridges(tmp_path: Path) -> None:
    one = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path / "one")})
    two = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path / "two")})
    assert device_name(one) != device_name(two)
    assert device_name(one).startswith("ty") and len(device_name(one)) <= 15  # interface names: 15 bytes
    assert device_name(one) not in {NodeLayout(one, f"node-{i}", i).tag for i in range(4)}


def test_the_forwarder_relays_both_ways_and_passes_a_half_close_on() -> None:
    """A client that sends, then shuts its sending side (as an HTTP/1.0 client may), still gets the whole answer."""
    upstream_port, listen_port = free_ports(2)

    async def scenario() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            data = await reader.read()  # until the client's half-close reaches us through the forwarder
            writer.write(b"echo:" + data)
            await writer.drain()
            writer.close()

        upstream = await asyncio.start_server(echo, HOST, upstream_port)
        started, stop = asyncio.Event(), asyncio.Event()
        relay = asyncio.ensure_future(forwarder.serve((HOST, listen_port), (HOST, upstream_port), started, stop))
        await started.wait()
        reader, writer = await asyncio.open_connection(HOST, listen_port)
        writer.write(b"x" * 200_000)
        writer.write_eof()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        stop.set()
        await relay
        upstream.close()
        return answer

    assert asyncio.run(scenario()) == b"echo:" + b"x" * 200_000


def test_the_forwarder_closes_a_client_whose_upstream_is_not_there() -> None:
    upstream_port, listen_port = free_ports(2)  # nothing listens on upstream_port

    async def scenario() -> bytes:
        started, stop = asyncio.Event(), asyncio.Event()
        relay = asyncio.ensure_future(forwarder.serve((HOST, listen_port), (HOST, upstream_port), started, stop))
        await started.wait()
        reader, writer = await asyncio.open_connection(HOST, listen_port)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        stop.set()
        await relay
        return answer

    assert asyncio.run(scenario()) == b""


def test_a_forwarder_that_cannot_listen_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert forwarder.main(["--listen", f"{HOST}:{port}", "--to", f"{HOST}:1"]) == 1
    assert f"cannot listen on {HOST}:{port}" in capsys.readouterr().err


def test_the_cleanup_lists_a_running_forwarder_until_it_is_stopped(tmp_path: Path) -> None:
    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)})
    api, processes = InClusterApi(settings, "10.244.0.0/16"), Processes(settings)
    assert api.leftovers() == []  # nothing started: no process, no device, no API server to ask
    processes.start(FORWARDER, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert api.leftovers() == [f"process {FORWARDER} (pid {processes.pid(FORWARDER)})"]
    finally:
        api.down()
    assert api.leftovers() == [] and not processes.running(FORWARDER)
