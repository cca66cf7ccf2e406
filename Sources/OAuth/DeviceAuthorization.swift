#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// The device authorization endpoint's answer (RFC 8628 §3.2).
public struct DeviceAuthorization: Sendable {
    /// Only tokend polls with it; it never leaves tokend.
    public var deviceCode: Secret
    public var userCode: String
    public var verificationURI: String
    public var verificationURIComplete: String?
    public var expiresIn: Int
    /// Seconds between polls (default 5, §3.2).
    public var interval: Int

    public init(
        deviceCode: Secret, userCode: String, verificationURI: String, verificationURIComplete: String?,
        expiresIn: Int, interval: Int
    ) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }

    /// `redactor` holds the request's secrets (the client secret): the
    /// provider's text is redacted of them before it is shortened.
    public static func parse(
        status: Int, body: [UInt8], redactor: Redactor = .none
    ) throws(TokenEndpointError) -> DeviceAuthorization {
        let json = providerObject(body)
        if let code = json?["error"]?.stringValue {
            let description = json?["error_description"]?.stringValue.map { ": \(redactor.clean($0))" } ?? ""
            let reason = "device authorization endpoint answered \(redactor.clean(code))\(description)"
            // A refused client or scope is a configuration problem: retrying cannot help.
            if ["invalid_client", "unauthorized_client", "invalid_scope", "invalid_request"].contains(code) {
                throw .rejected(code: code, reason: reason)
            }
            throw .transient(reason, code: code)
        }
        guard (200..<300).contains(status), let json else {
            throw .transient("device authorization endpoint answered HTTP \(status)")
        }
        // RFC 8628 names it verification_uri; some servers still send Google's verification_url.
        guard let deviceCode = json["device_code"]?.stringValue, !deviceCode.isEmpty,
            let userCode = json["user_code"]?.stringValue, !userCode.isEmpty,
            let verification = (json["verification_uri"] ?? json["verification_url"])?.stringValue
        else {
            throw .transient("device authorization answer lacks device_code, user_code or verification_uri")
        }
        return DeviceAuthorization(
            deviceCode: Secret(deviceCode), userCode: TokenResponse.sanitize(userCode),
            verificationURI: TokenResponse.sanitize(verification),
            verificationURIComplete: json["verification_uri_complete"]?.stringValue.map(TokenResponse.sanitize),
            expiresIn: json["expires_in"]?.lenientInt ?? 600, interval: max(1, json["interval"]?.lenientInt ?? 5))
    }
}
