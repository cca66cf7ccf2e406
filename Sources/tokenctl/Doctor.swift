import ArgumentParser

struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor", abstract: "Check this machine's tokend set-up and name the fix for each problem.")
    @OptionGroup var common: Common

    func run() async throws {
        throw ValidationError("tokenctl doctor is not built yet")
    }
}
