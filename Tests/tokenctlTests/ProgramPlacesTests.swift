import Testing

@testable import TokenctlProgram

/// The package installs one binary under several names; tokenctl looks for the
/// others beside the path it was started by before the file it runs.
@Suite struct ProgramPlacesTests {
    @Test func theInvokedPathComesBeforeTheFileItRuns() {
        let places = ProgramPlaces.directories(
            invoked: "/usr/bin/tokenctl", running: "/usr/sbin/tokend", path: "/usr/local/bin:/usr/bin")
        #expect(places == ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/bin"])
    }

    @Test func aBareNameFromPathAddsNoDirectoryOfItsOwn() {
        let places = ProgramPlaces.directories(invoked: "tokenctl", running: "/work/.build/debug/tokend", path: "/bin")
        #expect(places == ["/work/.build/debug", "/bin"])
    }

    /// A browser's host manifest must name an absolute path (outside review of issue 55).
    @Test func aRelativeStartIsMadeAbsoluteAndRelativePathEntriesAreSkipped() {
        let places = ProgramPlaces.directories(
            invoked: "./bin/tokenctl", running: "/work/.build/debug/tokend", path: "bin:/usr/bin::.",
            workingDirectory: "/home/ann")
        #expect(places == ["/home/ann/./bin", "/work/.build/debug", "/usr/bin"])
        #expect(places.allSatisfy { $0.hasPrefix("/") })
    }

    @Test func findTakesTheFirstExecutable() {
        #expect(ProgramPlaces.find("sh", in: ["/nonexistent", "/bin", "/usr/bin"]) == "/bin/sh")
        #expect(ProgramPlaces.find("no-such-program-here", in: ["/bin"]) == nil)
    }
}
