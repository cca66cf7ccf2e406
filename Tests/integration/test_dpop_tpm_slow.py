"""A TPM as slow as a discrete chip: swtpm behind a loopback relay that adds
150 ms to every answer (a discrete chip takes 100-200 ms for a proof's
commands; swtpm answers in a millisecond and hides it). A flood of GetProof
calls must not starve the session's own proofs at its token endpoint: the
refreshes go on succeeding while GetProof is refused RateLimited for what the
chip cannot sign. The fixtures are test_dpop's (Glewlwyd with DPoP, swtpm)."""
import json
import socket
import threading
import time

from conftest import free_port, read_frame, varlink_call, wait_for
from relay import Relay
from test_dpop import B, device_login, make_daemon, provider, swtpm  # noqa: F401

# What the relay adds to every answer of the TPM.
CHIP_DELAY = 0.15


class SlowTPM:
    """`tpm` (an SwTPM) reached through relays on two free ports (the TCTI's command port and, next to it,
    its control port), each answer `delay` seconds late."""

    def __init__(self, tpm, delay):
        port = free_port(count=2)  # both ports this test's: no other worker is given the second
        self.relays = [Relay("127.0.0.1", port + offset, "127.0.0.1", tpm.port + offset, delay) for offset in (0, 1)]
        self.tcti = f"swtpm:host=127.0.0.1,port={port}"

    def close(self):
        for relay in self.relays:
            relay.close()


def proof_call(provider):
    return json.dumps({"method": B + "GetProof", "parameters": {
        "session": "g2", "method": "GET", "url": provider.issuer + "/userinfo"}}).encode() + b"\0"


class Flood:
    """`connections` callers asking for proofs as fast as tokend answers, each again at once after its reply,
    until stopped. Counts the replies by their outcome."""

    def __init__(self, daemon, provider, connections):
        self.call = proof_call(provider)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = {}
        self.sent = 0
        self.threads = [threading.Thread(target=self._ask, args=(daemon.socket,), daemon=True)
                        for _ in range(connections)]
        for thread in self.threads:
            thread.start()

    def _ask(self, path):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(120)
            s.connect(path)
            while not self.stopping.is_set():
                s.sendall(self.call)
                with self.lock:
                    self.sent += 1
                try:
                    reply = json.loads(read_frame(s))
                except OSError:
                    return
                outcome = reply.get("error") or "proof"
                with self.lock:
                    self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def count(self, outcome=None):
        """Replies with `outcome` (None: all)."""
        with self.lock:
            return sum(self.outcomes.values()) if outcome is None else self.outcomes.get(outcome, 0)

    def asked(self):
        with self.lock:
            return self.sent

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(130)


def timed(action):
    started = time.monotonic()
    result = action()
    return result, time.monotonic() - started


def test_a_getproof_flood_on_a_slow_tpm_leaves_the_sessions_refreshes_succeeding(provider, make_daemon, swtpm):
    tpm = swtpm()
    slow = SlowTPM(tpm, CHIP_DELAY)
    try:
        daemon = make_daemon(provider, dpop_key="tpm", tpm=slow.tcti).start()
        device_login(daemon, provider)
        # One proof alone, as a caller sees it: the chip's time and tokend's.
        reply, alone = timed(lambda: varlink_call(daemon.socket, B + "GetProof", {
            "session": "g2", "method": "GET", "url": provider.issuer + "/userinfo"})[1])
        assert "error" not in reply, reply
        generation = daemon.token()["generation"]
        reply, refresh_alone = timed(lambda: daemon.refresh(generation))
        assert "error" not in reply, (reply, daemon.logs()[-2000:])
        print(f"with {CHIP_DELAY * 1000:.0f} ms a TPM answer: a GetProof alone {alone * 1000:.0f} ms, "
              f"a refresh alone {refresh_alone * 1000:.0f} ms")

        flood = Flood(daemon, provider, connections=32)
        try:
            # Every caller of the flood has a call in, and tokend answers them: the chip is as busy as they make it.
            wait_for(lambda: flood.asked() >= 32 and flood.count() > 0, 60, "the flood's calls in and answered")
            latencies = []
            for _ in range(4):
                generation = daemon.token()["generation"]
                reply, took = timed(lambda: daemon.refresh(generation))
                assert "error" not in reply, (reply, flood.outcomes)
                assert reply["parameters"]["token"]["generation"] == generation + 1, reply
                latencies.append(took)
            assert flood.count("proof") > 0, flood.outcomes  # GetProof still makes proofs, within what the chip signs
            # What the chip cannot sign in time is refused at once, not queued behind the session's proofs.
            wait_for(lambda: flood.count(B + "RateLimited") > 0, 30, "a GetProof refused under the flood")
        finally:
            flood.stop()
        print(f"under a flood of 32 GetProof callers: refreshes took "
              f"{', '.join(f'{t * 1000:.0f}' for t in latencies)} ms; GetProof outcomes {flood.outcomes}")
        assert daemon.dpop()["problem"] is None, daemon.dpop()
    finally:
        slow.close()
