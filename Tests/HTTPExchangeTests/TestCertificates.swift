import NIOSSL

/// A CA of the tests' own and a server certificate it signed for localhost
/// and 127.0.0.1 (P-256, valid until 2126): no system trusts the CA.
enum TestCertificates {
    static let caPEM = """
-----BEGIN CERTIFICATE-----
MIIBmTCCAT+gAwIBAgIUVAm59V2dgT+vqW50oxGVin8FbqQwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOdG9rZW5kIHRlc3QgQ0EwIBcNMjYxMjAyMTMzOTMyWhgPMjEy
NjExMDgxMzM5MzJaMBkxFzAVBgNVBAMMDnRva2VuZCB0ZXN0IENBMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEwKEZoqvHo/D+7cM8JrMsC2XGyiPiSiMBNhvAOM/o
6KQ4AmHXGW18s4A++tjGv35O9FgAJONj1uHfRNvMWGmu+qNjMGEwHQYDVR0OBBYE
FHjtfiCyRYWdWMMgOVm93KI5+4+LMB8GA1UdIwQYMBaAFHjtfiCyRYWdWMMgOVm9
3KI5+4+LMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgIEMAoGCCqGSM49
BAMCA0gAMEUCIQDqrNTkuGafLTH6nz8/Klg8i+H7Gg3H1OECD1+CZo+XOQIgO1ev
TCS97qMvnF88MAylKkNkl9iknploLjbPVPfa+5g=
-----END CERTIFICATE-----
"""

    static let serverPEM = """
-----BEGIN CERTIFICATE-----
MIIBrjCCAVWgAwIBAgIUTOB3ET8JqmzIGasbOES1aheZ9m4wCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOdG9rZW5kIHRlc3QgQ0EwIBcNMjYxMjAyMTMzOTMyWhgPMjEy
NjExMDgxMzM5MzJaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABHi4AiVvg0WUYkJ0wH3FQ0cBepI0d6VFZdU1ZByGivwt0Ffo
YzvJWItzJqoE6qQ+o8FzKURzs27eLMSHGBEj2fCjfjB8MBoGA1UdEQQTMBGCCWxv
Y2FsaG9zdIcEfwAAATAJBgNVHRMEAjAAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMB0G
A1UdDgQWBBTi5lgYuY9rRU+eFPfDgwLUUlQmJzAfBgNVHSMEGDAWgBR47X4gskWF
nVjDIDlZvdyiOfuPizAKBggqhkjOPQQDAgNHADBEAiAhITHSrOtIbMqg9Ey4X4Tb
jkYpKX36ZakteT+LWLiqfgIgavfIV9dDdoxN2pNKJU/Mt0YxAEUm27hXnmfiHr3F
RC0=
-----END CERTIFICATE-----
"""

    static let serverKeyPEM = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2LTNWRvD/q34vVJm
bEFXaWPY4DI5AZthOy8PfrmTI0ahRANCAAR4uAIlb4NFlGJCdMB9xUNHAXqSNHel
RWXVNWQchor8LdBX6GM7yViLcyaqBOqkPqPBcylEc7Nu3izEhxgRI9nw
-----END PRIVATE KEY-----
"""

    static func serverContext() throws -> NIOSSLContext {
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(serverPEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(serverKeyPEM.utf8), format: .pem)))
        return try NIOSSLContext(configuration: configuration)
    }

    /// A client configuration that trusts the tests' CA alone.
    static func trustingTestCA() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(caPEM.utf8), format: .pem)])
        return configuration
    }
}
