import Foundation
import Testing
import TokendMetrics

@Suite struct MetricsTests {
    /// A session remade by a reload gets the same instruments: its counts go on from where they were.
    @Test func aRemadeSessionsCountsGoOn() {
        let metrics = Metrics()
        metrics.session("default").refreshes.increment(by: 5)
        metrics.session("default").refreshes.increment()
        #expect(metrics.session("default").refreshes.value == 6)
    }

    @Test func aCachedRenderingIsMadeAgainOnlyAfterItsMaxAge() {
        let metrics = Metrics()
        let things = metrics.counter("tokend_things", help: "Things.")
        let start = ContinuousClock.now
        things.increment()
        let first = metrics.cachedRender(.prometheus, now: start)
        things.increment()
        #expect(metrics.cachedRender(.prometheus, now: start + .milliseconds(900)) == first, "within a second: the same text")
        #expect(metrics.cachedRender(.openMetrics, now: start + .milliseconds(900)).contains("tokend_things_total 2"),
                "each format has its own rendering")
        let later = metrics.cachedRender(.prometheus, now: start + .milliseconds(1100))
        #expect(first.contains("tokend_things_total 1") && later.contains("tokend_things_total 2"))
    }

    @Test func anEmptyRegistryEndsWithEOF() {
        #expect(Metrics().render() == "# EOF\n")
        #expect(Metrics().render(.prometheus) == "")
    }

    @Test func aCounterIsNamedWithoutTotalInOpenMetricsAndWithItInThePrometheusFormat() {
        let metrics = Metrics()
        metrics.counter("tokend_things", help: "Things.", labels: [("kind", "a")]).increment(by: 3)
        #expect(
            metrics.render() == """
                # TYPE tokend_things counter
                # HELP tokend_things Things.
                tokend_things_total{kind="a"} 3
                # EOF

                """)
        #expect(
            metrics.render(.prometheus) == """
                # HELP tokend_things_total Things.
                # TYPE tokend_things_total counter
                tokend_things_total{kind="a"} 3

                """)
    }

    @Test func aHistogramHasCumulativeBucketsTheInfBucketCountAndSumAndItsUnit() {
        let metrics = Metrics()
        let histogram = metrics.histogram("tokend_wait_seconds", help: "Waits.", bounds: [0.1, 1])
        for value in [0.05, 0.5, 0.5, 7] { histogram.observe(value) }
        #expect(
            metrics.render() == """
                # TYPE tokend_wait_seconds histogram
                # UNIT tokend_wait_seconds seconds
                # HELP tokend_wait_seconds Waits.
                tokend_wait_seconds_bucket{le="0.1"} 1
                tokend_wait_seconds_bucket{le="1"} 3
                tokend_wait_seconds_bucket{le="+Inf"} 4
                tokend_wait_seconds_count 4
                tokend_wait_seconds_sum 8.05
                # EOF

                """)
    }

    @Test func gaugesLabelValuesAndHiddenChildren() {
        let metrics = Metrics()
        metrics.gauge("tokend_level", help: "A level.", labels: [("name", "a\"b\\c\nd")]).set(0.25)
        metrics.gauge("tokend_when", help: "A time.").set(1_795_000_000)
        let hidden = metrics.counter("tokend_rare", help: "Rare.", labels: [("code", "500")], hiddenAtZero: true)
        let text = metrics.render()
        #expect(text.contains(#"tokend_level{name="a\"b\\c\nd"} 0.25"#))
        #expect(text.contains("tokend_when 1795000000\n"))
        #expect(!text.contains("tokend_rare"), "a family whose children are all hidden is left out")
        hidden.increment()
        #expect(metrics.render().contains(#"tokend_rare_total{code="500"} 1"#))
    }

    @Test func theSameNameAndLabelsGiveTheSameInstrument() {
        let metrics = Metrics()
        let first = metrics.counter("tokend_x", help: "X.", labels: [("session", "a")])
        #expect(first === metrics.counter("tokend_x", help: "X.", labels: [("session", "a")]))
        #expect(first !== metrics.counter("tokend_x", help: "X.", labels: [("session", "b")]))
        #expect(metrics.session("a") === metrics.session("a"))
    }

    @Test func aForgottenSessionsSeriesGo() {
        let metrics = Metrics()
        metrics.session("kept").refreshFinished(.success, took: .milliseconds(200))
        metrics.session("gone").refreshFinished(.success, took: .milliseconds(200))
        metrics.forget(session: "gone")
        let text = metrics.render()
        #expect(text.contains(#"session="kept""#) && !text.contains(#"session="gone""#))
    }

    @Test func countsFromManyThreadsAtOnceAreAllThere() async {
        let metrics = Metrics()
        let counter = metrics.counter("tokend_n", help: "N.")
        let gauge = metrics.gauge("tokend_g", help: "G.")
        let histogram = metrics.histogram("tokend_h_seconds", help: "H.")
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<10_000 {
                        counter.increment()
                        gauge.add(1)
                        histogram.observe(0.001)
                    }
                }
            }
        }
        #expect(counter.value == 80_000 && gauge.value == 80_000 && histogram.count == 80_000)
    }

    @Test func statusNumbersAreShownAsTheyAre() {
        let metrics = Metrics()
        let session = metrics.session("default")
        session.show(state: "loginRequired", expiresAt: nil)
        let text = metrics.render()
        #expect(text.contains(#"tokend_session_authenticated{session="default"} 0"#))
        #expect(text.contains(#"tokend_session_state{session="default",state="loginRequired"} 1"#))
        #expect(text.contains(#"tokend_session_state{session="default",state="active"} 0"#))
    }

    @Test func aCallToAMethodOrWithAnErrorNoInterfaceDeclaresCountsAsOther() {
        let metrics = Metrics()
        let server = ServerMetrics(metrics, methods: ["a.b.Get"], errors: ["a.b.Missing"])
        server.calls(method: "a.b.Get", error: nil).increment()
        server.calls(method: "a.b.Get", error: "a.b.Missing").increment()
        server.calls(method: "made.up.\(UUID())", error: "made.up.Error").increment()
        let text = metrics.render()
        #expect(text.contains(#"tokend_varlink_calls_total{method="a.b.Get",result="ok"} 1"#))
        #expect(text.contains(#"tokend_varlink_calls_total{method="a.b.Get",result="Missing"} 1"#))
        #expect(text.contains(#"tokend_varlink_calls_total{method="other",result="other"} 1"#))
        #expect(!text.contains("made.up"))
    }

    @Test func aProviderStatusOutsideTheListCountsInItsClass() {
        let provider = ProviderMetrics(session: "s")
        provider.answered(.token, status: 418, took: .milliseconds(100))
        provider.answered(.token, status: nil, took: .seconds(5))
        provider.answered(.token, status: 99_999, took: .seconds(5))
        #expect(provider.value(.token, status: 400) == 0 && provider.value(.token, status: 499) == 1)
        #expect(provider.value(.token, status: nil) == 2)
    }

    /// Every name a daemon can export (all its instruments made) is in tokend(8).
    @Test func everyExportedNameIsDocumentedInTokend8() throws {
        let metrics = Metrics()
        _ = metrics.session("default")
        _ = ServerMetrics(metrics, methods: ["io.tokend.Broker.GetToken"], errors: [])
        _ = ProviderMetrics(session: "default", in: metrics)
        _ = FleetMetrics(session: "default", in: metrics)
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../man/tokend.8")
        let manual = try String(contentsOf: page, encoding: .utf8)
        let names = metrics.exportedNames
        #expect(names.count >= 24)
        #expect(names.filter { !manual.contains(".It Sy \($0)") } == [])
    }
}
