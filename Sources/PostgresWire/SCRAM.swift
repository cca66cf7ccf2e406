import Crypto

/// SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL does it: no channel binding ("n,,"), and an
/// empty user name (the server takes the startup message's).
struct SCRAM {
    /// PBKDF2 work the server may ask for: PostgreSQL's default is 4096; more than this is refused
    /// rather than spend minutes of CPU on a hostile server's say.
    static let maxIterations = 100_000

    let password: [UInt8]
    let clientNonce: String
    let user: String
    private(set) var clientFirstBare = ""
    private(set) var expectedServerSignature: [UInt8] = []

    init(password: String, user: String = "", clientNonce: String? = nil) {
        self.password = Array(password.utf8)
        self.user = user
        var random = SystemRandomNumberGenerator()
        self.clientNonce = clientNonce ?? Base64.encode((0..<18).map { _ in UInt8.random(in: 0...255, using: &random) })
        clientFirstBare = "n=\(user),r=\(self.clientNonce)"
    }

    /// client-first-message.
    var clientFirst: String { "n,," + clientFirstBare }

    /// client-final-message for `serverFirst`; remembers the signature the server must send back.
    mutating func clientFinal(serverFirst: String) throws(PostgresError) -> String {
        var nonce: Substring?
        var salt: [UInt8]?
        var iterations: Int?
        for attribute in serverFirst.split(separator: ",") {
            let value = attribute.dropFirst(2)
            switch attribute.prefix(2) {
            case "r=": nonce = value
            case "s=": salt = Base64.decode(value)
            case "i=": iterations = Int(value)
            default: continue
            }
        }
        guard let nonce, nonce.hasPrefix(clientNonce), nonce.count > clientNonce.count else {
            throw PostgresError(.authentication, "SCRAM: the server's nonce does not extend this client's")
        }
        guard let salt, !salt.isEmpty else { throw PostgresError(.authentication, "SCRAM: no salt from the server") }
        guard let iterations, (1...Self.maxIterations).contains(iterations) else {
            throw PostgresError(.authentication, "SCRAM: iteration count out of 1...\(Self.maxIterations)")
        }
        let salted = Self.pbkdf2(password: password, salt: salt, iterations: iterations)
        let clientKey = Self.hmac(salted, Array("Client Key".utf8))
        let storedKey = Array(SHA256.hash(data: clientKey))
        let withoutProof = "c=biws,r=\(nonce)"  // biws: base64 of "n,,"
        let authMessage = Array("\(clientFirstBare),\(serverFirst),\(withoutProof)".utf8)
        let signature = Self.hmac(storedKey, authMessage)
        let proof = zip(clientKey, signature).map { $0 ^ $1 }
        expectedServerSignature = Self.hmac(Self.hmac(salted, Array("Server Key".utf8)), authMessage)
        return "\(withoutProof),p=\(Base64.encode(proof))"
    }

    /// Checks server-final-message: a server that cannot prove it knows the password is refused.
    func verify(serverFinal: String) throws(PostgresError) {
        if serverFinal.hasPrefix("e=") {
            throw PostgresError(.authentication, "SCRAM: the server refused: \(serverFinal.dropFirst(2))")
        }
        guard serverFinal.hasPrefix("v="), let signature = Base64.decode(serverFinal.dropFirst(2).prefix { $0 != "," }),
            !expectedServerSignature.isEmpty, signature == expectedServerSignature
        else { throw PostgresError(.authentication, "SCRAM: the server's signature is wrong") }
    }

    static func hmac(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
    }

    /// PBKDF2-HMAC-SHA-256 with one block of output: SCRAM's Hi().
    static func pbkdf2(password: [UInt8], salt: [UInt8], iterations: Int) -> [UInt8] {
        let key = SymmetricKey(data: password)
        var block = Array(HMAC<SHA256>.authenticationCode(for: salt + [0, 0, 0, 1], using: key))
        var result = block
        for _ in 1..<max(iterations, 1) {
            block = Array(HMAC<SHA256>.authenticationCode(for: block, using: key))
            for index in result.indices { result[index] ^= block[index] }
        }
        return result
    }
}

/// md5 authentication: "md5" + md5hex(md5hex(password + user) + salt).
enum MD5Password {
    static func answer(user: String, password: String, salt: [UInt8]) -> String {
        let inner = Hex.encode(Array(Insecure.MD5.hash(data: Array((password + user).utf8))))
        return "md5" + Hex.encode(Array(Insecure.MD5.hash(data: Array(inner.utf8) + salt)))
    }
}

/// Standard base64 with padding (RFC 4648 §4), for SCRAM's attributes.
enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for position in 0..<4 {
                out.append(position <= chunk.count ? alphabet[Int(value >> (18 - 6 * UInt32(position)) & 0x3f)] : UInt8(ascii: "="))
            }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        var index = 0
        while index < chars.count {
            var value: UInt32 = 0
            var padding = 0
            for position in 0..<4 {
                let char = chars[index + position]
                if char == UInt8(ascii: "=") {
                    // Padding only at the end, at most two.
                    guard index + 4 == chars.count, position >= 2 else { return nil }
                    padding += 1
                    continue
                }
                guard padding == 0, let digit = alphabet.firstIndex(of: char) else { return nil }
                value |= UInt32(digit) << (18 - 6 * UInt32(position))
            }
            out.append(UInt8(value >> 16 & 0xff))
            if padding < 2 { out.append(UInt8(value >> 8 & 0xff)) }
            if padding < 1 { out.append(UInt8(value & 0xff)) }
            index += 4
        }
        return out
    }
}
