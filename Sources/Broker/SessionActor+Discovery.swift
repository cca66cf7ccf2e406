import OAuth

extension SessionActor {
    /// Uses the document kept from the last run at once, then reads the
    /// issuer's current one in the background: retried with backoff (1 s
    /// doubling to 5 min) while there is none, tried once when one is kept.
    func startDiscovery() {
        guard endpoint.issuer != nil else { return }
        if let kept = record.providerMetadata, let metadata = ProviderMetadata.decode(kept) {
            endpoint.restore(metadata)
            providerMetadata = kept
        }
        discovery = Task { await self.discoverUntilFound() }
    }

    func discoverUntilFound() async {
        var delay = 1.0
        while !Task.isCancelled, !stopping {
            if await discoverOnce() || providerMetadata != nil { return }
            try? await clock.sleep(until: clock.now() + delay)
            delay = min(delay * 2, 300)
        }
    }

    /// One discovery attempt; true when it gave a document. A new document is
    /// written with the session's next write (login or refresh) rather than
    /// on its own, so it never races a refresh's write.
    @discardableResult
    func discoverOnce() async -> Bool {
        do {
            let metadata = try await endpoint.discover()
            let encoded = metadata.encoded()
            if encoded != providerMetadata {
                providerMetadata = encoded
                logger.info("provider discovered", metadata: ["issuer": "\(metadata.issuer)"])
            }
            if discoveryProblem != nil {
                discoveryProblem = nil
                reschedule()  // a refresh waiting for the token endpoint can go now
            }
            return true
        } catch {
            if providerMetadata == nil {
                discoveryProblem = error.description
                logger.warning("discovery failed", metadata: ["problem": "\(error.description)"])
            } else {
                logger.notice("discovery failed; using the document kept from before", metadata: ["problem": "\(error.description)"])
            }
            return false
        }
    }
}
