import CourierCore
import Testing

@Suite struct PayloadRulesTests {
    let alert = Array(#"{"aps":{"alert":"Hello"}}"#.utf8)
    let silent = Array(#"{"aps":{"content-available":1},"acme":"bar"}"#.utf8)

    func check(_ payload: [UInt8], priority: UInt8? = nil, channel: PayloadChannel = .http2) -> Result<PayloadSummary, PayloadError> {
        PayloadRules.check(payload, priority: priority, channel: channel)
    }

    @Test func anAlertIsAccepted() {
        #expect(check(alert) == .success(PayloadSummary(isSilent: false)))
        #expect(check(alert, priority: 10) == .success(PayloadSummary(isSilent: false)))
        #expect(check(alert, priority: 5) == .success(PayloadSummary(isSilent: false)))
    }

    @Test func emptyPayload() {
        #expect(check([]) == .failure(.empty))
        #expect(PayloadError.empty.binaryStatus == .missingPayload)
        #expect(PayloadError.empty.reason == .payloadEmpty)
    }

    @Test(arguments: [
        (PayloadChannel.binaryLegacy, 256), (.binaryCommand2, 2048), (.http2, 4096), (.http2VoIP, 5120), (.broadcast, 5120),
    ])
    func sizeLimits(channel: PayloadChannel, limit: Int) {
        let prefix = Array(#"{"aps":{"alert":""#.utf8)
        let suffix = Array(#""}}"#.utf8)
        let atLimit = prefix + Array(repeating: UInt8(ascii: "x"), count: limit - prefix.count - suffix.count) + suffix
        #expect(atLimit.count == limit)
        #expect(check(atLimit, channel: channel) == .success(PayloadSummary(isSilent: false)))
        let over = prefix + Array(repeating: UInt8(ascii: "x"), count: limit + 1 - prefix.count - suffix.count) + suffix
        #expect(check(over, channel: channel) == .failure(.tooLarge))
        #expect(PayloadError.tooLarge.binaryStatus == .invalidPayloadSize)
        #expect(PayloadError.tooLarge.reason == .payloadTooLarge)
        #expect(PayloadError.tooLarge.reason.httpStatus == 413)
    }

    @Test func limitsAreConfigurable() {
        let limits = PayloadLimits(binaryLegacy: 10, binaryCommand2: 20, http2: 30, http2VoIP: 40, broadcast: 50)
        #expect(PayloadRules.check(alert, priority: nil, channel: .http2, limits: limits) == .success(PayloadSummary(isSilent: false)))
        #expect(PayloadRules.check(alert, priority: nil, channel: .binaryCommand2, limits: limits) == .failure(.tooLarge))
        #expect(limits.limit(for: .binaryLegacy) == 10)
        #expect(limits.limit(for: .binaryCommand2) == 20)
        #expect(limits.limit(for: .http2) == 30)
        #expect(limits.limit(for: .http2VoIP) == 40)
        #expect(limits.limit(for: .broadcast) == 50)
    }

    @Test func nullTerminatedPayload() {
        #expect(check(alert + [0]) == .failure(.nullTerminated))
        #expect(PayloadError.nullTerminated.binaryStatus == .invalidPayloadSize)
        #expect(PayloadError.nullTerminated.reason == .payloadEmpty)
    }

    @Test(arguments: [#"not json"#, #"[1,2]"#, #""text""#, #"42"#, #"{"aps":"#])
    func notAJSONObject(_ text: String) {
        #expect(check(Array(text.utf8)) == .failure(.notJSONObject))
        #expect(PayloadError.notJSONObject.binaryStatus == .missingPayload)
        #expect(PayloadError.notJSONObject.reason == .payloadEmpty)
    }

    @Test func silentPushWithExplicitPriorityTenIsRefused() {
        #expect(check(silent, priority: 10) == .failure(.priorityTenSilent))
        #expect(PayloadError.priorityTenSilent.binaryStatus == .protocolError)
        #expect(PayloadError.priorityTenSilent.reason == .badPriority)
    }

    @Test func silentPushWithPriorityFiveOrNoneIsAccepted() {
        #expect(check(silent, priority: 5) == .success(PayloadSummary(isSilent: true)))
        #expect(check(silent, priority: nil) == .success(PayloadSummary(isSilent: true)))
    }

    @Test func contentAvailableWithAnAlertIsNotSilent() {
        let mixed = Array(#"{"aps":{"content-available":1,"alert":"x"}}"#.utf8)
        #expect(check(mixed, priority: 10) == .success(PayloadSummary(isSilent: false)))
        let withSound = Array(#"{"aps":{"content-available":1,"sound":"a.caf"}}"#.utf8)
        #expect(check(withSound, priority: 10) == .success(PayloadSummary(isSilent: false)))
    }

    /// Priority 1 is the HTTP/2 API's.
    @Test func priorityOneOnHTTP2Only() {
        #expect(PayloadRules.check(alert, priority: 1, channel: .http2) == .success(PayloadSummary(isSilent: false)))
        #expect(PayloadRules.check(alert, priority: 1, channel: .binaryCommand2) == .failure(.unknownPriority))
    }

    @Test(arguments: [UInt8(0), 4, 6, 9, 11, 255])
    func unknownPriorities(_ priority: UInt8) {
        #expect(check(alert, priority: priority) == .failure(.unknownPriority))
        #expect(Priority(rawValue: priority) == nil)
        #expect(PayloadError.unknownPriority.binaryStatus == .protocolError)
        #expect(PayloadError.unknownPriority.reason == .badPriority)
    }
}
