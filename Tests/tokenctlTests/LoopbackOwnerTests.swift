import Testing

@testable import tokenctl

/// Whose connection reached the login listener, read from /proc/net/tcp: only
/// a socket a process still holds counts.
@Suite struct LoopbackOwnerTests {
    let us = "0100007F:9C40"
    let peer = "0100007F:D431"

    func table(_ rows: [(state: String, uid: String, inode: String)]) -> String {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        return header + rows.enumerated().map { index, row in
            "   \(index): \(peer) \(us) \(row.state) 00000000:00000000 00:00000000 00000000  \(row.uid)        0 \(row.inode) 1 0000000000000000 20 4 30 10 -1"
        }.joined(separator: "\n")
    }

    @Test func anEstablishedSocketWithAnInodeNamesItsOwner() {
        #expect(LoopbackListener.ownerUID(in: table([("01", "1000", "424242")]), local: peer, remote: us) == 1000)
    }

    @Test func aSocketItsSenderClosedCountsAsNobody() {
        // FIN_WAIT2 (05) and TIME_WAIT (06) rows are listed with uid 0 and inode 0.
        #expect(LoopbackListener.ownerUID(in: table([("05", "0", "0")]), local: peer, remote: us) == nil)
        #expect(LoopbackListener.ownerUID(in: table([("06", "0", "0")]), local: peer, remote: us) == nil)
        // ESTABLISHED but orphaned (no inode) does not count either.
        #expect(LoopbackListener.ownerUID(in: table([("01", "0", "0")]), local: peer, remote: us) == nil)
    }

    @Test func aClosedRowBeforeTheLiveOneIsSkipped() {
        let rows = table([("06", "0", "0"), ("01", "65534", "777")])
        #expect(LoopbackListener.ownerUID(in: rows, local: peer, remote: us) == 65534)
    }

    @Test func anotherAddressPairIsNotOurs() {
        #expect(LoopbackListener.ownerUID(in: table([("01", "1000", "1")]), local: us, remote: peer) == nil)
    }
}
