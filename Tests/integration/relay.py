"""A plain TCP relay: `python relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT`,
or `Relay(...)` in a thread. Used to reach the authorization server from a
network namespace."""
import socket
import sys
import threading


class Relay:
    def __init__(self, listen_host, listen_port, target_host, target_port):
        self.target = (target_host, target_port)
        self.server = socket.create_server((listen_host, listen_port), reuse_port=False)
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
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
