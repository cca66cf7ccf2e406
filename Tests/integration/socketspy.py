"""A Unix-socket relay that records every byte both ways.

    python socketspy.py LISTEN_PATH TARGET_PATH CAPTURE_FILE

Clients connect to LISTEN_PATH as they would to tokend; each connection is
relayed to TARGET_PATH and everything it carries, in either direction, is
appended to CAPTURE_FILE. Runs until terminated."""
import os
import selectors
import signal
import socket
import sys


def main():
    listen_path, target, capture_path = sys.argv[1:4]
    capture = open(capture_path, "ab", buffering=0)
    server = socket.socket(socket.AF_UNIX)
    server.bind(listen_path)
    server.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    peers = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            if sock is server:
                client, _ = server.accept()
                upstream = socket.socket(socket.AF_UNIX)
                upstream.connect(target)
                peers[client], peers[upstream] = upstream, client
                selector.register(client, selectors.EVENT_READ)
                selector.register(upstream, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            other = peers.get(sock)
            if not data or other is None:
                for end in (sock, other):
                    if end is not None and end in peers:
                        selector.unregister(end)
                        peers.pop(end, None)
                        end.close()
                continue
            capture.write(data)
            other.sendall(data)


if __name__ == "__main__":
    main()
