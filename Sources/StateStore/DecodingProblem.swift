/// What a file that JSONDecoder could not read is said to have wrong, in the
/// words Foundation's `localizedDescription` used for a DecodingError (it
/// names no value from the file, so no secret reaches the journal or a reply).
public func decodingProblem(_ error: any Error) -> String {
    let prefix = "The operation could not be completed."
    guard let error = error as? DecodingError else { return prefix }
    switch error {
    case .keyNotFound, .valueNotFound: return "\(prefix) The data is missing."
    case .dataCorrupted, .typeMismatch: return "\(prefix) The data isn’t in the correct format."
    @unknown default: return "\(prefix) The data isn’t in the correct format."
    }
}
