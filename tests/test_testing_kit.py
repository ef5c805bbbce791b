"""infercore.testing's helpers that other tests lean on."""

from __future__ import annotations

import socket

from infercore.testing import free_ports


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(16)
    assert len(set(ports)) == 16
    listeners = [socket.create_server(("127.0.0.1", port)) for port in ports]
    for listener in listeners:
        listener.close()
