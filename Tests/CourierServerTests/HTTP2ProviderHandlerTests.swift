import CourierCore
import CourierTestSupport
import Foundation
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import CourierServer

/// `HTTP2ProviderHandler` on NIO's testing channel: HTTP/2 frames in,
/// frames out, no socket and no TLS (the real-server tests stay beside
/// it). The gateway and the dispatcher are a test server's.
@Suite(.timeLimit(.minutes(1))) struct HTTP2ProviderHandlerTests {
    /// A certificate-trust connection of the demo app's provider with the handler on a testing channel.
    struct Connection {
        let channel: NIOAsyncTestingChannel
        let work: ConnectionWork
        let running: Task<Void, Never>

        init(_ server: TestServer) async throws {
            let gateway = try #require(server.application.http2Gateways[.production])
            let record = try #require(try await server.application.provisioner.store.certificates(kind: .provider).first { $0.bundleID == "com.example.demo" })
            channel = NIOAsyncTestingChannel()
            let handle = HTTP2ConnectionHandle(
                channel: channel, trust: .certificate(record, TestServer.demoProvider, defaultTopic: "com.example.demo"), now: server.clock.now())
            let (work, runner) = ConnectionWork.make()
            self.work = work
            running = Task { await runner.run() }
            let handler = HTTP2ProviderHandler(gateway: gateway, connection: handle, work: work, release: ConnectionRelease(open: OpenConnections()))
            try await channel.pipeline.addHandler(handler)
        }

        /// One request: its headers, then its body, on `stream`.
        func request(_ stream: Int, token: String, payload: String = #"{"aps":{"alert":"frames"}}"#, headers extra: [(String, String)] = []) async throws {
            var headers: HPACKHeaders = [":method": "POST", ":scheme": "https", ":authority": "localhost", ":path": "/3/device/" + token]
            for (name, value) in extra { headers.add(name: name, value: value) }
            let id = HTTP2StreamID(stream)
            try await channel.writeInbound(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers))))
            try await channel.writeInbound(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(ByteBuffer(string: payload)), endStream: true))))
        }

        /// The next answer written: its stream, status, headers and body.
        func answer() async throws -> (stream: HTTP2StreamID, status: String?, headers: HPACKHeaders, body: String?) {
            let head = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
            guard case .headers(let headers) = head.payload else { throw TestServerError("not headers: \(head)") }
            var body: String?
            if !headers.endStream {
                let data = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
                guard case .data(let payload) = data.payload, case .byteBuffer(let buffer) = payload.data else { throw TestServerError("not data: \(data)") }
                body = String(buffer: buffer)
            }
            return (head.streamID, headers.headers.first(name: ":status"), headers.headers, body)
        }

        func close() async {
            work.finish()
            _ = try? await channel.finish()
            await running.value
        }
    }

    @Test func requestsInAnswersOut() async throws {
        try await withTestServer { server in
            let virtual = appleToken()
            try await server.addVirtualTokens([virtual])
            let connection = try await Connection(server)

            // Refused at once, for its token: 400 and the reason.
            try await connection.request(1, token: "00ff", headers: [("apns-topic", "com.example.demo")])
            let refused = try await connection.answer()
            #expect(refused.stream == 1)
            #expect(refused.status == "400")
            #expect(refused.body == #"{"reason":"BadDeviceToken"}"#)

            // Accepted at once (a virtual device online): 200 with the apns-id the request gave.
            let id = UUID()
            try await connection.request(3, token: Hex.encode(virtual), headers: [("apns-topic", "com.example.demo"), ("apns-id", id.uuidString)])
            let accepted = try await connection.answer()
            #expect(accepted.stream == 3)
            #expect(accepted.status == "200")
            #expect(accepted.headers.first(name: "apns-id") == id.uuidString, "the apns-id as the request gave it")
            #expect(try await server.events(id) == [.accepted, .deliveredToVirtualDevice])

            // A header refused before anything else is looked at: a bad priority.
            try await connection.request(5, token: Hex.encode(virtual), headers: [("apns-topic", "com.example.demo"), ("apns-priority", "7")])
            let badPriority = try await connection.answer()
            #expect(badPriority.status == "400")
            #expect(badPriority.body == #"{"reason":"BadPriority"}"#)

            // Decided after waiting (a registration not cached: the store is read in the listener's work): 200 all the same.
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            await server.disconnect(device)
            server.dispatcher.registrations.forgetAll()
            try await connection.request(7, token: Hex.encode(token), headers: [("apns-topic", "com.example.demo"), ("apns-expiration", "0")])
            let waited = try await connection.answer()
            #expect(waited.stream == 7)
            #expect(waited.status == "200")
            await connection.close()
        }
    }
}
