"""The method and event names the browser bridge uses (the extension, the page
helper, the native host) are the ones io.tokend.Broker.varlink declares: the
JavaScript and the host are checked against the one declaration; and tokend
checks every call against that declaration before it runs the method."""
import glob
import os
import re

import pytest
import varlink

from conftest import ROOT, login, varlink_call


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


DECLARATION = read("Sources/TokendInterface/io.tokend.Broker.varlink")
# Read by the reference implementation's parser (python varlink), not by a pattern of our own.
METHODS = {name for name, member in varlink.Interface(DECLARATION).members.items() if hasattr(member, "in_type")}
# The Subscribe comment lists the events; "status" opens every stream and "stopped" ends it.
EVENTS = set(re.findall(r"\b(\w+)\b", DECLARATION.split("one reply per event (")[1].split(")")[0])) | {"status", "stopped"}


def test_the_declaration_names_methods_and_events():
    assert {"GetToken", "Refresh", "Subscribe", "GetCookies"} <= METHODS
    assert {"refreshed", "loggedOut", "cookies", "loggedIn"} <= EVENTS


def test_javascript_uses_only_declared_methods_and_events():
    sources = {path: read(path) for path in glob.glob("web/**/*.js", root_dir=ROOT, recursive=True)}
    assert sources
    methods, events = set(), set()
    for text in sources.values():
        # `method: "POST"` is an HTTP request's (tokend-fetch.js), not a Varlink method.
        methods |= {m for m in re.findall(r'method: "(\w+)"', text) if not m.isupper()}
        methods |= set(re.findall(r'request\("(\w+)"', text))
        methods |= {m for group in re.findall(r"\[((?:\"\w+\",?\s*)+)\]\.includes\(message\.method\)", text)
                    for m in re.findall(r'"(\w+)"', group)}
        events |= set(re.findall(r'case "(\w+)":', text)) | set(re.findall(r'event: "(\w+)"', text))
        events |= set(re.findall(r'tokend\.on\("(\w+)"', text))
    assert {"GetToken", "Refresh", "Subscribe"} <= methods, methods
    assert methods - METHODS == set(), f"methods the declaration does not have: {methods - METHODS}"
    assert {"refreshed", "loggedOut"} <= events, events
    assert events - EVENTS == set(), f"events the declaration does not have: {events - EVENTS}"


def test_the_native_host_relays_only_declared_methods():
    text = read("Sources/NativeHostProgram/Bridge.swift")
    relayed = set()
    for group in re.findall(r"static let \w*[mM]ethods: Set<String> = \[(.*?)\]", text, re.S):
        relayed |= set(re.findall(r'"(\w+)"', group))
    assert {"GetToken", "Refresh", "Subscribe"} <= relayed, relayed
    assert relayed - METHODS == set()


# (method, parameters, the parameter named): a typo, a member the method does
# not have, a value of the wrong type, nested and in org.varlink.service itself.
REFUSED = [
    ("io.tokend.Broker.GetStatus", {"sesion": "default"}, "sesion"),
    ("io.tokend.Broker.GetToken", {"minValidSeconds": 30, "fresh": True}, "fresh"),
    ("io.tokend.Broker.ListSessions", {"session": 7}, "session"),
    ("io.tokend.Broker.GetToken", {"minValidSeconds": "soon"}, "minValidSeconds"),
    ("io.tokend.Broker.GetToken", {"session": ["default"]}, "session"),
    ("io.tokend.Broker.Refresh", {"staleGeneration": 1.5}, "staleGeneration"),
    ("io.tokend.Broker.Logout", {"revoke": "no"}, "revoke"),
    ("io.tokend.Broker.ImportCookies", {"url": "https://a.example/", "setCookie": ["a=1", 2]}, "setCookie"),
    ("io.tokend.Broker.Login", {}, "refreshToken"),
    ("org.varlink.service.GetInterfaceDescription", {"interface": 1}, "interface"),
    ("org.varlink.service.GetInfo", {"verbose": True}, "verbose"),
]


@pytest.fixture
def logged_in(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    return daemon


def test_a_call_the_declaration_refuses_gets_invalid_parameter_naming_it(logged_in):
    for method, parameters, named in REFUSED:
        _, reply = varlink_call(logged_in.socket, method, parameters)
        assert reply.get("error") == "org.varlink.service.InvalidParameter", (method, parameters, reply)
        assert reply["parameters"] == {"parameter": named}, (method, parameters, reply)
    status = logged_in.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
    assert status["state"] == "active", "no refused call logged out or refreshed anything"


def test_declared_calls_pass_and_null_says_nothing(logged_in):
    # A member sent as null is the same as one left out, declared or not: a
    # client built against a newer declaration sends its new optionals so.
    for parameters in ({}, {"session": None, "minValidSeconds": None}, {"minValidSeconds": 5.0}, {"later": None}):
        _, reply = varlink_call(logged_in.socket, "io.tokend.Broker.GetToken", parameters)
        assert "error" not in reply, (parameters, reply)
        assert reply["parameters"]["token"]["accessToken"]
