"""The method and event names the browser bridge uses (the extension, the page
helper, the native host) are the ones io.tokend.Broker.varlink declares: the
JavaScript and the host are checked against the one declaration."""
import glob
import os
import re

from conftest import ROOT


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


DECLARATION = read("Sources/TokendInterface/io.tokend.Broker.varlink")
METHODS = set(re.findall(r"^method (\w+)", DECLARATION, re.M))
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
        methods |= set(re.findall(r'method: "(\w+)"', text)) | set(re.findall(r'request\("(\w+)"', text))
        methods |= {m for group in re.findall(r"\[((?:\"\w+\",?\s*)+)\]\.includes\(message\.method\)", text)
                    for m in re.findall(r'"(\w+)"', group)}
        events |= set(re.findall(r'case "(\w+)":', text)) | set(re.findall(r'event: "(\w+)"', text))
        events |= set(re.findall(r'tokend\.on\("(\w+)"', text))
    assert {"GetToken", "Refresh", "Subscribe"} <= methods, methods
    assert methods - METHODS == set(), f"methods the declaration does not have: {methods - METHODS}"
    assert {"refreshed", "loggedOut"} <= events, events
    assert events - EVENTS == set(), f"events the declaration does not have: {events - EVENTS}"


def test_the_native_host_relays_only_declared_methods():
    text = read("Sources/tokend-native-host/Bridge.swift")
    relayed = set()
    for group in re.findall(r"static let \w*[mM]ethods: Set<String> = \[(.*?)\]", text, re.S):
        relayed |= set(re.findall(r'"(\w+)"', group))
    assert {"GetToken", "Refresh", "Subscribe"} <= relayed, relayed
    assert relayed - METHODS == set()
