"""Independent Varlink clients: python varlink 31.0.0 against tokend (the reference
certification suite runs against the server loop itself, in UnixServerTests)."""
import os
import subprocess
import sys

import varlink

from conftest import BIN, login, wait_for


def test_python_varlink_client_talks_to_tokend(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    with varlink.Client(address=f"unix:{daemon.socket}") as client:
        interfaces = client.get_interfaces()
        assert "io.tokend.Broker" in interfaces and client.info["product"] == "tokend"
        description = client.get_interface("io.tokend.Broker")
        assert "GetToken" in description.members and "Subscribe" in description.members
        with client.open("io.tokend.Broker", namespaced=True) as broker:
            token = broker.GetToken()
            assert token.token.tokenType == "Bearer" and token.token.generation >= 1


def test_introspection_serves_the_one_declaration(server, make_tokend):
    from conftest import varlink_call
    daemon = make_tokend(server).start()
    path = os.path.join(os.path.dirname(__file__), "..", "..", "Sources", "TokendInterface", "io.tokend.Broker.varlink")
    with open(path) as f:
        declared = f.read()
    _, reply = varlink_call(daemon.socket, "org.varlink.service.GetInterfaceDescription", {"interface": "io.tokend.Broker"})
    assert reply["parameters"]["description"] == declared
    _, reply = varlink_call(daemon.socket, "org.varlink.service.GetInfo")
    assert reply["parameters"]["interfaces"] == ["org.varlink.service", "io.tokend.Broker"]
