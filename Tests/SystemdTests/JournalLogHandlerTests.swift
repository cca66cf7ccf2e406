import Logging
import Testing
@testable import Systemd

@Suite struct JournalLogHandlerTests {
    let handler = JournalLogHandler(identifier: "tokend", fieldPrefix: "TOKEND_", messageIDs: [:])

    @Test func metadataKeysBecomeJournalFieldNames() {
        #expect(handler.fieldName("session") == "TOKEND_SESSION")
        #expect(handler.fieldName("peer.uid") == "TOKEND_PEER_UID")
        #expect(handler.fieldName("retry-in") == "TOKEND_RETRY_IN")
    }

    @Test func levelsMapToSyslogPriorities() {
        #expect(JournalLogHandler.priority(.critical) == 2)
        #expect(JournalLogHandler.priority(.warning) == 4)
        #expect(JournalLogHandler.priority(.notice) == 5)
        #expect(JournalLogHandler.priority(.debug) == 7)
    }

    @Test func autoTargetFollowsTheEnvironment() {
        #expect(JournalLogHandler.isWanted(target: "auto", environment: ["INVOCATION_ID": "x"]))
        #expect(JournalLogHandler.isWanted(target: "auto", environment: ["JOURNAL_STREAM": "8:9"]))
        #expect(!JournalLogHandler.isWanted(target: "auto", environment: [:]))
        #expect(JournalLogHandler.isWanted(target: "journal", environment: [:]))
        #expect(!JournalLogHandler.isWanted(target: "console", environment: ["INVOCATION_ID": "x"]))
    }
}
