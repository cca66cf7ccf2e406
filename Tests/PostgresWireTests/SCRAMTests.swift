import Crypto
import Testing

@testable import PostgresWire

@Suite struct SCRAMTests {
    /// RFC 7677 §3: user "user", password "pencil".
    static let serverFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"

    @Test func rfc7677TestVector() throws {
        var scram = SCRAM(password: "pencil", user: "user", clientNonce: "rOprNGfwEbeRWgbNEkqO")
        #expect(scram.clientFirst == "n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
        let final = try scram.clientFinal(serverFirst: Self.serverFirst)
        #expect(final == "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        try scram.verify(serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    }

    @Test func aWrongServerSignatureIsRefused() throws {
        var scram = SCRAM(password: "pencil", user: "user", clientNonce: "rOprNGfwEbeRWgbNEkqO")
        _ = try scram.clientFinal(serverFirst: Self.serverFirst)
        #expect(throws: PostgresError.self) { try scram.verify(serverFinal: "v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") }
        #expect(throws: PostgresError.self) { try scram.verify(serverFinal: "e=invalid-proof") }
    }

    @Test(arguments: [
        "r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  // a nonce not extending ours
        "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  // nothing added to it
        "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000",  // hours of PBKDF2
        "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0",
        "r=rOprNGfwEbeRWgbNEkqOx,s=not*base64,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOx,i=4096",
    ])
    func hostileServerFirstMessages(_ serverFirst: String) {
        var scram = SCRAM(password: "pencil", user: "user", clientNonce: "rOprNGfwEbeRWgbNEkqO")
        #expect(throws: PostgresError.self) { try scram.clientFinal(serverFirst: serverFirst) }
    }

    @Test func pbkdf2MatchesRFC7914() {
        // RFC 7914 §11: PBKDF2-HMAC-SHA256, P="passwd", S="salt", c=1, first 32 bytes.
        let out = SCRAM.pbkdf2(password: Array("passwd".utf8), salt: Array("salt".utf8), iterations: 1)
        #expect(Hex.encode(out) == "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
    }

    @Test func base64RoundTrips() {
        for length in 0..<10 {
            let bytes = (0..<length).map { UInt8($0 * 37 & 0xff) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.encode(Array("n,,".utf8)) == "biws")
        #expect(Base64.decode("a=b=") == nil && Base64.decode("abc") == nil)
    }

    @Test func md5Answer() {
        // md5(md5("secret" + "tokend") hex + salt) hex, computed independently of the code under test.
        let inner = Hex.encode(Array(Insecure.MD5.hash(data: Array("secrettokend".utf8))))
        let expected = "md5" + Hex.encode(Array(Insecure.MD5.hash(data: Array(inner.utf8) + [1, 2, 3, 4])))
        #expect(MD5Password.answer(user: "tokend", password: "secret", salt: [1, 2, 3, 4]) == expected)
        #expect(expected.count == 35)
    }
}
