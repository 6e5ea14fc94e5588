import CourierCore
import CourierDevice
import CourierServer
import CourierWire
import Foundation
import Testing

@Suite struct DeliveryTests {
    @Test func aPushReachesAnOnlineDevice() async throws {
        let server = try await TestServer()
        let device = try await server.device()
        let token = try await device.client.register("com.example.demo")
        #expect(token.count == 32)
        #expect(try await device.client.register("com.example.demo") == token, "registering again gives the same token")

        let (id, result) = await server.push(token, payload: #"{"aps":{"alert":"Hello"}}"#)
        #expect(result == .accepted)
        let received = try #require(await device.next())
        #expect(received.id == id)
        #expect(received.payload == Array(#"{"aps":{"alert":"Hello"}}"#.utf8))
        #expect(received.topic == "com.example.demo")
        #expect(received.priority == 10)
        try await device.client.acknowledge(id)
        await device.stop()
        try await server.stop()
    }
}
