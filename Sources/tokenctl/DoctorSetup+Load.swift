/// Stands in until tokenctl links the Config module (Package.swift): the
/// checks that need the configuration's values say they were skipped.
extension DoctorSetup {
    struct NotReadable: Error, CustomStringConvertible {
        var description: String { "this tokenctl is built without tokend's configuration reader" }
    }

    static func load(path: String, environment: [String: String]) throws -> DoctorSetup {
        throw NotReadable()
    }
}
