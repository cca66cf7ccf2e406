"""tokend against the real authorization server (rotation on, reuse
protection on, grace 0), over the real socket."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

from conftest import login, read_frame, varlink_call, wait_for


def get_token_burst(path, count):
    """`count` connections, all connected first, then GetToken sent at once."""
    sockets = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        sockets.append(s)
    barrier = threading.Barrier(count)
    results = [None] * count

    def ask(index):
        s = sockets[index]
        barrier.wait()
        s.sendall(b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0')
        raw = read_frame(s)
        results[index] = (raw, json.loads(raw))
        s.close()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def waiting_requests(port):
    """Connections to 127.0.0.1:`port` holding a request the server has not read (ss: Recv-Q above 0)."""
    listed = subprocess.run(["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
                            capture_output=True, text=True, check=True).stdout
    return sum(1 for line in listed.splitlines() if line.split() and int(line.split()[0]) > 0)


def status_of(daemon):
    return daemon.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]


def test_500_concurrent_callers_at_expiry_cause_one_refresh(short_server, make_tokend):
    # refresh-margin 0: no proactive refresh before expiry, so inside the
    # min-valid window every one of the 500 callers needs a refresh. The
    # upstream timeout outlasts the time the server is held below.
    daemon = make_tokend(short_server, **{"refresh-margin": 0, "min-valid": 4, "upstream-timeout": 120}).start()
    login(daemon, short_server)
    status = status_of(daemon)
    wait_for(lambda: time.time() >= status["expiresAt"] - 3, 20, "token inside its min-valid window")
    before = len(short_server.grants("refresh_token"))
    # The authorization server is held (stopped) until every caller has asked:
    # the first caller's refresh is surely in flight while the other 499 come.
    bursts = []
    os.killpg(short_server.process.pid, signal.SIGSTOP)
    try:
        burst = threading.Thread(target=lambda: bursts.append(get_token_burst(daemon.socket, 500)))
        burst.start()
        wait_for(lambda: waiting_requests(short_server.port), 60, "the refresh to wait at the held server")
        wait_for(lambda: status_of(daemon)["coalesced"] - status["coalesced"] >= 499, 120,
                 "the other 499 callers to join the refresh in flight")
        held = status_of(daemon)
        assert len(short_server.grants("refresh_token")) == before and held["generation"] == status["generation"]
    finally:
        os.killpg(short_server.process.pid, signal.SIGCONT)
    burst.join(120)
    assert bursts, "the callers were not all answered"
    results = bursts[0]
    grants = short_server.grants("refresh_token")[before:]
    assert all("error" not in r[1] for r in results), [r for r in results if "error" in r[1]][:1]
    tokens = {r[1]["parameters"]["token"]["accessToken"] for r in results}
    generations = {r[1]["parameters"]["token"]["generation"] for r in results}
    assert len(grants) == 1, f"server saw {len(grants)} refresh grants for one expiry"
    assert grants[0]["status"] == 200
    assert len(tokens) == 1 and generations == {status["generation"] + 1}, "all callers got the same new token"
    after = status_of(daemon)
    assert after["refreshes"] == status["refreshes"] + 1
    # Every caller but the one whose call started the refresh joined it.
    assert after["coalesced"] - status["coalesced"] == 499, (status["coalesced"], after["coalesced"])
    # The session survives: the next refresh works.
    raw, reply = daemon.call("io.tokend.Broker.Refresh")
    assert "error" not in reply, reply
    print(f"500 callers at expiry: {len(grants)} upstream refresh, "
          f"{after['coalesced'] - status['coalesced']} joined the refresh in flight")


def test_proactive_refresh_happens_before_expiry(short_server, make_tokend):
    daemon = make_tokend(short_server).start()
    login(daemon, short_server)
    first = daemon.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
    wait_for(lambda: daemon.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]["generation"]
             > first["generation"], 15, "proactive refresh")
    refreshed_at = short_server.grants("refresh_token")[-1]["t"]
    assert refreshed_at < first["expiresAt"], "refreshed before the old token expired"


def test_restart_continues_with_persisted_rotated_token(server, make_tokend):
    daemon = make_tokend(server).start()
    original = login(daemon, server)
    raw, reply = daemon.call("io.tokend.Broker.Refresh")
    generation = reply["parameters"]["token"]["generation"]
    assert daemon.stop() == 0, "SIGTERM exits 0"
    assert "stopping" in daemon.logs()
    daemon.start()
    status = daemon.call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
    assert status["state"] == "active" and status["generation"] == generation
    raw, reply = daemon.call("io.tokend.Broker.Refresh")
    assert "error" not in reply, reply
    assert reply["parameters"]["token"]["generation"] == generation + 1
    # The original (long rotated) token is dead at the server: reuse detection is real.
    code, body = server.post("/o/token/", grant_type="refresh_token", refresh_token=original)
    assert code == 400 and body.get("error") == "invalid_grant"


def test_logout_revokes_at_the_server(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    token = json.load(open(os.path.join(daemon.state, "default.session")))["record"]["refreshToken"]
    result = daemon.ctl("logout")
    assert result.returncode == 0, result.stderr
    assert "refreshToken" not in json.load(open(os.path.join(daemon.state, "default.session")))["record"]
    code, body = server.post("/o/token/", grant_type="refresh_token", refresh_token=token)
    assert code == 400 and body["error"] == "invalid_grant", "the server rejects the revoked token"
    assert any(g["path"] == "/o/revoke_token/" and g["status"] == 200 for g in server.grants())
    result = daemon.ctl("token")
    assert result.returncode == 2 and "tokenctl login" in result.stderr


def test_invalid_grant_reaches_waiters_and_subscribers(server, make_tokend):
    # 20 forced refreshes at once: above the default per-user limit, which is not under test here.
    daemon = make_tokend(server, daemon={"forced-refreshes-per-minute": 600}).start()
    login(daemon, server)
    token = json.load(open(os.path.join(daemon.state, "default.session")))["record"]["refreshToken"]
    # Someone else uses tokend's refresh token: the server rotates it away, so
    # tokend's next refresh replays a used token and the family is revoked.
    code, _ = server.post("/o/token/", grant_type="refresh_token", refresh_token=token)
    assert code == 200
    subscriber = socket.socket(socket.AF_UNIX)
    subscriber.connect(daemon.socket)
    subscriber.sendall(b'{"method":"io.tokend.Broker.Subscribe","parameters":{},"more":true}\0')
    assert json.loads(read_frame(subscriber))["parameters"]["event"] == "status"
    results = []

    def ask():
        results.append(varlink_call(daemon.socket, "io.tokend.Broker.Refresh", {})[1])

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 20
    assert all(r.get("error") == "io.tokend.Broker.LoginRequired" for r in results), results[0]
    assert "invalid_grant" in results[0]["parameters"]["reason"]
    cookies = json.loads(read_frame(subscriber))["parameters"]
    assert cookies["event"] == "cookies", "the session's cookies go with its grant"
    # The refused answer's own Set-Cookie headers are applied first, then the jar is emptied.
    live = set()
    for change in cookies["changes"]:
        name = change["cookie"]["name"]
        if change["action"] == "set":
            live.add(name)
        else:
            live.discard(name)
    assert len(cookies["changes"]) > 0 and live == set()
    event = json.loads(read_frame(subscriber))
    assert event["parameters"]["event"] == "loginRequired" and event["continues"] is True
    assert "invalid_grant" in event["parameters"]["reason"]
    record = json.load(open(os.path.join(daemon.state, "default.session")))["record"]
    assert record["phase"] == "loginRequired" and "refreshToken" not in record and record["cookies"] == []
    result = daemon.ctl("token")
    assert result.returncode == 2


def test_refresh_token_never_leaves_tokend(server, make_tokend, workdir):
    daemon = make_tokend(server).start()
    original = login(daemon, server)
    seen = [original]
    raws = []
    for method in ["GetToken", "Refresh", "GetStatus", "ListSessions", "Refresh"]:
        raw, _ = daemon.call("io.tokend.Broker." + method)
        raws.append(raw)
        seen.append(json.load(open(os.path.join(daemon.state, "default.session")))["record"]["refreshToken"])
    subscriber = socket.socket(socket.AF_UNIX)
    subscriber.connect(daemon.socket)
    subscriber.sendall(b'{"method":"io.tokend.Broker.Subscribe","parameters":{},"more":true}\0')
    raws.append(read_frame(subscriber))
    daemon.call("io.tokend.Broker.Refresh")
    raws.append(read_frame(subscriber))
    seen.append(json.load(open(os.path.join(daemon.state, "default.session")))["record"]["refreshToken"])
    for args in [("status", "--json"), ("sessions", "--json"), ("token",), ("refresh",)]:
        result = daemon.ctl(*args)
        raws.append((result.stdout + result.stderr).encode())
    daemon.ctl("logout")
    daemon.stop()
    logs = daemon.logs()
    assert len(set(seen)) >= 4, "rotation happened"
    for token in set(seen):
        assert all(token.encode() not in raw for raw in raws), "a reply carried a refresh token"
        assert token not in logs, "a log line carried a refresh token"


def test_bad_input_gets_clear_errors_and_server_stays_up(server, make_tokend):
    daemon = make_tokend(server).start()
    login(daemon, server)
    raw, reply = daemon.call("io.tokend.Broker.GetToken", session="nope")
    assert reply["error"] == "io.tokend.Broker.NoSuchSession" and reply["parameters"]["session"] == "nope"
    raw, reply = daemon.call("io.tokend.Broker.GetToken", minValidSeconds="soon")
    assert reply == {"error": "org.varlink.service.InvalidParameter", "parameters": {"parameter": "minValidSeconds"}}
    raw, reply = daemon.call("io.tokend.Broker.Nope")
    assert reply["error"] == "org.varlink.service.MethodNotFound"
    # Malformed JSON: answered, then the connection is closed with a log line.
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        s.sendall(b"{this is not json\0")
        answer = json.loads(read_frame(s))
        assert answer == {"error": "org.varlink.service.InvalidParameter", "parameters": {"parameter": "message"}}
        assert s.recv(100) == b""
    # Oversized frame: an error reply, then close.
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        try:
            s.sendall(b"x" * (2 << 20))
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        assert b"io.tokend.Broker.RequestTooLarge" in data
    # Pipelined calls on one connection are answered in order.
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        s.sendall(b'{"method":"io.tokend.Broker.GetStatus"}\0{"method":"io.tokend.Broker.Nope"}\0'
                  b'{"method":"org.varlink.service.GetInfo"}\0')
        replies = [json.loads(read_frame(s)) for _ in range(3)]
        assert "status" in replies[0]["parameters"]
        assert replies[1]["error"] == "org.varlink.service.MethodNotFound"
        assert replies[2]["parameters"]["product"] == "tokend"
    assert "malformed message" in daemon.logs()
    raw, reply = daemon.call("io.tokend.Broker.GetToken")
    assert "token" in reply["parameters"]


def test_tokenctl_messages_and_exit_codes(server, make_tokend, workdir):
    daemon = make_tokend(server)
    result = daemon.ctl("token")
    assert result.returncode == 3 and "is not reachable" in result.stderr and "systemctl start tokend.socket" in result.stderr
    daemon.start()
    result = daemon.ctl("token", "--session", "other")
    assert result.returncode == 5
    result = daemon.ctl("login", input="\n")
    assert result.returncode == 1 and "no refresh token" in result.stderr
    login(daemon, server)
    result = daemon.ctl("token", "--header")
    assert result.returncode == 0 and result.stdout.startswith("Authorization: Bearer ")
    result = daemon.ctl("status", "--json")
    assert json.loads(result.stdout)["state"] == "active"


def test_config_errors_exit_78_with_one_line(workdir):
    import subprocess
    from conftest import BIN
    path = os.path.join(workdir, "bad.toml")
    with open(path, "w") as f:
        f.write('[sessions.default]\ntoken-endpoint = "https://id.example/t"\nclient-id = "a"\nclient-auth = "none"\nbogus = 1\n')
    result = subprocess.run([os.path.join(BIN, "tokend"), "--config", path, "--check-config"], capture_output=True, text=True)
    assert result.returncode == 78
    assert result.stderr.strip().count("\n") == 0
    assert f"{path}: sessions.default.bogus: unknown key" in result.stderr


def test_one_connection_alternating_calls_each_get_their_own_answer(server, make_tokend):
    # The front loop keeps the last parsed frame per connection; a different frame must be parsed anew.
    daemon = make_tokend(server).start()
    login(daemon, server)
    frames = [b'{"method":"io.tokend.Broker.GetToken","parameters":{}}\0',
              b'{"method":"io.tokend.Broker.GetToken","parameters":{"session":"nope"}}\0']
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        for frame in frames * 3 + frames[:1] * 2 + frames[1:]:
            s.sendall(frame)
            reply = json.loads(read_frame(s))
            if b"nope" in frame:
                assert reply.get("error") == "io.tokend.Broker.NoSuchSession", reply
            else:
                assert "token" in reply["parameters"], reply


def test_connection_handed_from_the_front_loop_to_nio_keeps_its_replies_in_order(server, make_tokend):
    # Cached GetToken calls are answered on the front loop's thread; the first
    # call it cannot answer moves the connection to SwiftNIO, with the calls
    # read after it and the replies not yet written. Everything in one write,
    # then a message split around a pause.
    daemon = make_tokend(server).start()
    login(daemon, server)
    get = b'{"method":"io.tokend.Broker.GetToken"}\0'
    info = b'{"method":"org.varlink.service.GetInfo"}\0'
    status = b'{"method":"io.tokend.Broker.GetStatus"}\0'
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        s.sendall(get * 200 + info + get * 200 + status[:20])
        # The rest of the split message goes once everything before it is answered.
        replies = [json.loads(read_frame(s)) for _ in range(401)]
        s.sendall(status[20:] + get)
        replies += [json.loads(read_frame(s)) for _ in range(2)]
    kinds = ["token" if "token" in r["parameters"] else "product" if "product" in r["parameters"]
             else "status" if "status" in r["parameters"] else repr(r) for r in replies]
    assert kinds == ["token"] * 200 + ["product"] + ["token"] * 200 + ["status", "token"]


def test_a_client_that_reads_late_gets_every_reply(server, make_tokend):
    # 4,000 pipelined cached calls (about 4 MB of replies) while the client
    # reads nothing: the front loop stops reading that connection when its
    # unwritten replies pass the high watermark, and resumes as they drain.
    daemon = make_tokend(server).start()
    login(daemon, server)
    get = b'{"method":"io.tokend.Broker.GetToken"}\0'
    count = 4000
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(daemon.socket)
        sender = threading.Thread(target=s.sendall, args=(get * count,))
        sender.start()
        time.sleep(1)  # the situation: a client that reads nothing for a second while it sends
        data = b""
        while data.count(b"\0") < count:
            chunk = s.recv(1 << 20)
            assert chunk, "connection closed before every reply came"
            data += chunk
        sender.join()
    replies = data.split(b"\0")[:count]
    assert len({reply for reply in replies}) == 1 and b'"token"' in replies[0]
    # The daemon serves others as before.
    raw, reply = daemon.call("io.tokend.Broker.GetToken")
    assert "token" in reply["parameters"]


def test_calls_split_at_random_points_are_answered_in_order(server, make_tokend):
    # 300 calls of four kinds (cached, through the service, an error, another
    # interface) sent as one byte stream cut at random points: the front loop
    # must put messages back together across reads and across the calls it
    # hands to the service, and answer each in order.
    import random
    daemon = make_tokend(server).start()
    login(daemon, server)
    kinds = {
        "token": b'{"method":"io.tokend.Broker.GetToken"}\0',
        "status": b'{"method":"io.tokend.Broker.GetStatus"}\0',
        "missing": b'{"method":"io.tokend.Broker.GetToken","parameters":{"session":"nope"}}\0',
        "info": b'{"method":"org.varlink.service.GetInfo"}\0',
    }
    seed = random.randrange(1 << 30)
    chooser = random.Random(seed)
    calls = [chooser.choice(list(kinds)) for _ in range(300)]
    stream = b"".join(kinds[c] for c in calls)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(daemon.socket)
        position = 0
        while position < len(stream):
            cut = position + chooser.randint(1, 200)
            s.sendall(stream[position:cut])
            position = cut
            if chooser.random() < 0.1:
                time.sleep(0.002)  # a pause, so cuts also fall between reads
        replies = [json.loads(read_frame(s)) for _ in calls]
    def kind(reply):
        if reply.get("error") == "io.tokend.Broker.NoSuchSession":
            return "missing"
        parameters = reply.get("parameters", {})
        return "token" if "token" in parameters else "status" if "status" in parameters else \
            "info" if "product" in parameters else repr(reply)
    assert [kind(r) for r in replies] == calls, f"seed {seed}"
