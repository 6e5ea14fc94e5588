import Foundation
import Synchronization
import Testing

@testable import CourierServer

/// `/metrics` takes no token: the store's held notifications are counted at
/// most once a second, and callers during a count share it.
@Suite struct HeldCountTests {
    final class Counter: Sendable {
        let calls = Atomic<Int>(0)
        let (opened, gate) = AsyncStream.makeStream(of: Void.self)
        let held: Bool

        init(held: Bool = false) {
            self.held = held
            if !held { gate.finish() }
        }

        func count() async throws -> Int {
            let call = calls.add(1, ordering: .relaxed).newValue
            if held { for await _ in opened { break } }
            return 40 + call
        }
    }

    @Test func aCountIsGivenOutForASecond() async {
        let counter = Counter()
        let held = HeldCount { try await counter.count() }
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(await held.value(now: start) == 41)
        #expect(await held.value(now: start.addingTimeInterval(0.5)) == 41)
        #expect(counter.calls.load(ordering: .relaxed) == 1)
        #expect(await held.value(now: start.addingTimeInterval(1)) == 42)
        // A clock that went back does not keep an old count forever.
        #expect(await held.value(now: start) == 43)
    }

    @Test func callersDuringACountWaitForIt() async {
        let counter = Counter(held: true)
        let held = HeldCount { try await counter.count() }
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        await withTaskGroup(of: Int?.self) { group in
            for _ in 0..<5 { group.addTask { await held.value(now: now) } }
            // One caller is counting; the others wait for it or, arriving
            // after it, are given its count.
            while counter.calls.load(ordering: .relaxed) == 0 { await Task.yield() }
            counter.gate.yield()
            var values: [Int?] = []
            for await value in group { values.append(value) }
            #expect(values == Array(repeating: 41, count: 5))
        }
        #expect(counter.calls.load(ordering: .relaxed) == 1)
    }

    @Test func aFailedCountIsNil() async {
        struct Failure: Error {}
        let held = HeldCount { throw Failure() }
        #expect(await held.value(now: Date()) == nil)
    }
}
