import TokendMetrics
import Testing

@Suite struct MetricsTests {
    @Test func anEmptyRegistryEndsWithEOF() {
        #expect(Metrics().render().hasSuffix("# EOF\n"))
    }
}
