/// Stable journal MESSAGE_IDs for the events operators search for
/// (`journalctl MESSAGE_ID=…`). Keyed by the constant log message.
/// Listed in README; never change an id once released.
public enum MessageIDs {
    public static let byMessage: [String: String] = [
        "refreshed": "f7ce51604e3c439ab1f73185b3f8ae12",
        "refresh failed": "6f50fb7f331849b399dcebd9f6b25f36",
        "login required": "cc398c5efe60419d86c5d690eadfaa83",
        "logged out": "839fae5a196749609a798c2c7dbba5fd",
        "started": "85ecaa8925d04b668c5315101133b0fc",
        "stopping": "2f77fea7f3d44e64a9a49b20c697e90d",
        "reloaded": "585e02a2287e4a8f8f905fc49ae60a3a",
        "reload failed": "a2f27350e53d41d09f9f7d0efbed965a",
    ]
}
