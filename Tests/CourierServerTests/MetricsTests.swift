import CourierCore
import CourierProvider
@testable import CourierServer
import Foundation
import NIOCore
import NIOPosix
import Testing

/// A scraped `/metrics` page: each sample by its series (`name{labels}`
/// as written, labels in the order the page gives them).
struct MetricsPage {
    var samples: [String: Double] = [:]
    var types: [String: String] = [:]

    /// Parses the text exposition format; a line that is not a comment, a
    /// blank or `series value` fails the test.
    init(_ text: String) {
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                if parts.count == 4 { types[String(parts[2])] = String(parts[3]) }
                continue
            }
            if line.hasPrefix("#") { continue }
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                Issue.record("not a sample: \(line)")
                continue
            }
            samples[String(line[..<space])] = value
        }
    }

    /// The value of a series, 0 when the page does not have it (a counter not yet moved).
    subscript(_ series: String) -> Double { samples[series] ?? 0 }
}

extension TestServer {
    /// `/metrics`, without the admin token, parsed.
    func metrics() async throws -> MetricsPage {
        let answer = try await admin("GET", "/metrics", token: "")
        #expect(answer.status == 200)
        return MetricsPage(String(decoding: answer.body, as: UTF8.self))
    }
}

@Suite(.timeLimit(.minutes(2))) struct MetricsTests {
    let payload = Array(#"{"aps":{"alert":"counted"}}"#.utf8)

    @Test func theCountersMoveAsPushesAreMade() async throws {
        try await withTestServer { server in
            let before = try await server.metrics()
            #expect(before.types["courier_notifications_received_total"] == "counter")
            #expect(before.types["courier_delivery_latency_seconds"] == "histogram")
            #expect(before.types["courier_connections_open"] == "gauge")
            #expect(before["courier_devices_online"] == 0)

            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let http2 = try await server.http2Client()
            #expect(try await http2.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            _ = try #require(await device.next())
            var bad = token
            bad[0] ^= 0xff
            #expect(try await http2.send(HTTP2Push(token: bad, payload: payload, topic: "com.example.demo")).status == 400)
            let binary = try await server.binaryClient()
            try await binary.send(token: token, payload: payload, expiry: 0, priority: 10)
            _ = try #require(await device.next())
            // One for a device that is offline.
            let offline = try await server.device()
            let offlineToken = try await offline.client.register("com.example.demo")
            await server.disconnect(offline)
            #expect(try await http2.send(HTTP2Push(token: offlineToken, payload: payload, topic: "com.example.demo")).status == 200)
            // A fault rule that refuses the next push.
            _ = try await server.addFault(#"{"action": "reject", "reason": "TooManyRequests", "count": 1}"#)
            #expect(try await http2.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 429)
            await server.application.dispatcher.log.flush()

            // The held count is read again once a second has passed (`HeldCount`).
            server.clock.advance(by: 1)
            let after = try await server.metrics()
            let h2 = #"interface="http2",environment="production""#
            #expect(after["courier_notifications_received_total{\(h2)}"] == 4)
            #expect(after["courier_notifications_accepted_total{\(h2)}"] == 2)
            #expect(after["courier_notifications_rejected_total{\(h2),reason=\"BadDeviceToken\"}"] == 1)
            #expect(after["courier_notifications_rejected_total{\(h2),reason=\"TooManyRequests\"}"] == 1)
            let binaryLabels = #"interface="binary",environment="production""#
            #expect(after["courier_notifications_received_total{\(binaryLabels)}"] == 1)
            #expect(after["courier_notifications_accepted_total{\(binaryLabels)}"] == 1)
            #expect(after["courier_notifications_delivered_total"] == 2)
            // Held until acknowledged: the first HTTP/2 push (the device did not
            // acknowledge it) and the offline device's; not the binary one (expiry 0).
            #expect(after["courier_notifications_stored_total"] == 2)
            #expect(after["courier_faults_injected_total"] == 1)
            #expect(after["courier_delivery_latency_seconds_count"] == 2)
            #expect(after[#"courier_store_commit_seconds_count{writer="pending"}"#] == 2)
            #expect(after["courier_devices_online"] == 1)
            #expect(after["courier_notifications_held"] == 2)
            #expect(after[#"courier_connections_open{interface="device",environment="production"}"#] == 1)
            #expect(after[#"courier_connections_open{interface="binary",environment="production"}"#] == 1)
            #expect(after[#"courier_connections_open{interface="http2",environment="production"}"#] == 1)
            #expect(after["courier_inbox_entries"] == 5)
            #expect(after["courier_delivery_log_backlog"] == 0)
            await binary.close()
            await http2.close()
            await server.disconnect(device)
        }
    }

    /// Bytes that are not TLS fail the handshake: counted by port.
    @Test func aFailedHandshakeIsCounted() async throws {
        try await withTestServer { server in
            let port = try await server.application.ports.port(.binary, .sandbox)
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
            try await channel.writeAndFlush(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: courier\r\n\r\n"))
            try await channel.closeFuture.get()
            let page = try await server.metrics()
            #expect(page[#"courier_tls_handshake_failures_total{interface="binary",environment="sandbox"}"#] == 1)
            #expect(page[#"courier_tls_handshake_failures_total{interface="binary",environment="production"}"#] == 0)
        }
    }

    /// The admin port holds at most connections.maxPerListener connections:
    /// one more is closed as it opens, and the API answers again once they go.
    @Test func theAdminPortBoundsItsConnections() async throws {
        try await withTestServer(configure: { $0.connections.maxPerListener = 2 }) { server in
            let port = try await server.adminPort()
            let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            var channels: [any Channel] = []
            for _ in 0..<3 { channels.append(try await bootstrap.connect(host: "127.0.0.1", port: port).get()) }
            // The server closes one of them (the one its event loops counted
            // last): that close arrives without our asking, the others stay.
            let (closes, closed) = AsyncStream.makeStream(of: Int.self)
            for (index, channel) in channels.enumerated() { channel.closeFuture.whenComplete { _ in closed.yield(index) } }
            var firstClosed: Int?
            for await index in closes {
                firstClosed = index
                break
            }
            let refused = try #require(firstClosed)
            let kept = channels.indices.filter { $0 != refused }.map { channels[$0] }
            let stillOpen = kept.filter { $0.isActive }.count
            #expect(stillOpen == 2)
            for channel in kept { try await channel.close() }
            var answered = false
            for _ in 0..<50 where !answered {
                answered = (try? await server.admin("GET", "/health/live", token: "").status) == 200
                if !answered { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(answered)
        }
    }

    /// A reason no code path gives still counts, under "other" past the
    /// limit: the page cannot grow without bound.
    @Test func rejectionReasonsAreBounded() {
        let metrics = ServerMetrics()
        for index in 0..<(ServerMetrics.reasonLimit + 10) {
            metrics.received(.http2, .production, .refused(status: 400, reason: "R\(index)"))
        }
        let page = MetricsPage(String(decoding: metrics.registry.emitToBuffer(), as: UTF8.self))
        let rejected = page.samples.filter { $0.key.hasPrefix("courier_notifications_rejected_total") }
        #expect(rejected.count == ServerMetrics.reasonLimit + 1)
        #expect(page[#"courier_notifications_rejected_total{interface="http2",environment="production",reason="other"}"#] == 10)
        #expect(page[#"courier_notifications_received_total{interface="http2",environment="production"}"#] == Double(ServerMetrics.reasonLimit + 10))
    }
}
