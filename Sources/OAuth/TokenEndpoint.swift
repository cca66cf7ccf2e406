import AsyncHTTPClient
import Foundation
import NIOCore
import Secrets

/// The authorization server's token and revocation endpoints, as the broker sees them.
public protocol TokenEndpoint: Sendable {
    /// The token endpoint: the request URL for the session's cookies.
    var tokenURL: URL { get }
    /// Exchanges a refresh token, sending `cookieHeader` (when not empty) as the Cookie header.
    func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer
    /// Revokes a token (RFC 7009). Throws TokenEndpointError.transient when unreachable.
    func revoke(token: Secret) async throws(TokenEndpointError)
}

/// What one refresh request brought back: the classified result and the
/// answer's Set-Cookie headers, which count whether or not it succeeded.
public struct RefreshAnswer: Sendable {
    public var result: Result<TokenResponse, TokenEndpointError>
    public var setCookie: [String]

    public init(result: Result<TokenResponse, TokenEndpointError>, setCookie: [String] = []) {
        self.result = result
        self.setCookie = setCookie
    }
}

/// The real endpoints over HTTP(S), through AsyncHTTPClient (system trust store).
public struct HTTPTokenEndpoint: TokenEndpoint {
    public var tokenURL: URL
    public var revocationURL: URL?
    public var credentials: ClientCredentials
    public var scope: String?
    public var timeout: Duration
    /// Largest token-endpoint body accepted.
    public var maximumBodySize = 256 * 1024
    let client: HTTPClient

    public init(
        tokenURL: URL, revocationURL: URL?, credentials: ClientCredentials, scope: String?,
        timeout: Duration, client: HTTPClient = .shared
    ) {
        self.tokenURL = tokenURL
        self.revocationURL = revocationURL
        self.credentials = credentials
        self.scope = scope
        self.timeout = timeout
        self.client = client
    }

    public func refresh(refreshToken: Secret, cookieHeader: String) async -> RefreshAnswer {
        var form = FormRequest.refresh(refreshToken: refreshToken, scope: scope, credentials: credentials)
        if !cookieHeader.isEmpty { form.headers.append(("Cookie", cookieHeader)) }
        do {
            let answer = try await post(form, to: tokenURL)
            return RefreshAnswer(
                result: TokenResponse.classify(status: answer.status, retryAfterHeader: answer.retryAfter, body: answer.body),
                setCookie: answer.setCookie)
        } catch {
            return RefreshAnswer(result: .failure(error), setCookie: [])
        }
    }

    public func revoke(token: Secret) async throws(TokenEndpointError) {
        guard let revocationURL else { return }
        let form = FormRequest.revoke(token: token, hint: "refresh_token", credentials: credentials)
        let status = try await post(form, to: revocationURL).status
        // RFC 7009 §2.2: 200 whether or not the token was valid.
        guard (200..<300).contains(status) else {
            throw .transient("revocation endpoint answered HTTP \(status)")
        }
    }

    struct HTTPAnswer {
        var status: Int
        var retryAfter: String?
        var setCookie: [String]
        var body: [UInt8]
    }

    func post(_ form: FormRequest, to url: URL) async throws(TokenEndpointError) -> HTTPAnswer {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        for (name, value) in form.headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: form.body.reveal()))
        let deadline = NIODeadline.now() + TimeAmount.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000
            + Int64(timeout.components.attoseconds / 1_000_000_000))
        let (client, maximumBodySize, timeout, prepared) = (self.client, self.maximumBodySize, self.timeout, request)
        do {
            // The deadline covers the whole exchange, the body included: a
            // server that sends its body slowly is cut off like one that hangs.
            return try await withThrowingTaskGroup(of: HTTPAnswer?.self) { group in
                group.addTask {
                    let response = try await client.execute(prepared, deadline: deadline)
                    let body = try await response.body.collect(upTo: maximumBodySize)
                    return HTTPAnswer(
                        status: Int(response.status.code), retryAfter: response.headers.first(name: "Retry-After"),
                        setCookie: response.headers["Set-Cookie"], body: Array(buffer: body))
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                guard case let answer?? = try await group.next() else { throw HTTPClientError.deadlineExceeded }
                return answer
            }
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw .transient("token endpoint answer is larger than \(maximumBodySize) bytes")
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            throw .transient("token endpoint did not answer within \(timeout.components.seconds) s")
        } catch {
            throw .transient("token endpoint unreachable: \(String(describing: error).prefix(200))")
        }
    }
}
