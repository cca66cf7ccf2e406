"""A plain TCP relay: `python relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT`,
or `Relay(...)` in a thread. Used to reach the authorization server from a
network namespace, and to make a TPM as slow as a discrete chip: with `delay`,
every answer from the target reaches the client that many seconds after it came."""
import socket
import sys
import threading
import time


class Relay:
    def __init__(self, listen_host, listen_port, target_host, target_port, delay=0.0):
        self.target = (target_host, target_port)
        self.delay = delay
        self.server = socket.create_server((listen_host, listen_port), reuse_port=False)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b, delay in ((client, upstream, 0.0), (upstream, client, self.delay)):
                threading.Thread(target=self._pipe, args=(a, b, delay), daemon=True).start()

    @staticmethod
    def _pipe(source, sink, delay):
        try:
            while data := source.recv(65536):
                if delay:
                    # Each piece `delay` after it arrived: a chip's time per command, not per byte.
                    due = time.monotonic() + delay
                    while (left := due - time.monotonic()) > 0:
                        time.sleep(left)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.server.close()


if __name__ == "__main__":
    Relay(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    threading.Event().wait()
