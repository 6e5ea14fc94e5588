import CourierCore
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CourierServer

/// The admin API's route groups on Hummingbird's router alone (no socket,
/// no server): each group takes the state it is given — one node's, here —
/// and answers as docs/admin-api.md says.
@Suite struct AdminRouteTests {
    static let now = Date(timeIntervalSince1970: 1_790_000_000)

    func application(_ add: (RouterGroup<BasicRequestContext>) -> Void) -> some ApplicationProtocol {
        let router = Router()
        router.add(middleware: JSONErrors())
        add(router.group("v1"))
        return Application(router: router)
    }

    @Test func faultRulesAreAddedListedAndRemoved() async throws {
        let faults = FaultInjector()
        let app = application { FaultRoutes(rules: LocalFaultRules(faults: faults), clock: ManualWallClock(Self.now)).add(to: $0) }
        try await app.test(.router) { client in
            let body = ByteBuffer(string: #"{"match": {"topic": "com.example.demo"}, "action": "reject", "reason": "TooManyRequests", "count": 2}"#)
            let id = try await client.execute(uri: "/v1/faults", method: .post, body: body) { response in
                #expect(response.status == .created)
                let rule = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]
                #expect(rule?["reason"] as? String == "TooManyRequests")
                return rule?["id"] as? String
            }
            let ruleID = try #require(id)
            #expect(faults.count == 1, "the routes changed the rules they were given")
            try await client.execute(uri: "/v1/faults", method: .get) { response in
                let list = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]
                #expect((list?["faults"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [ruleID])
            }
            try await client.execute(uri: "/v1/faults", method: .post, body: ByteBuffer(string: #"{"action": "shout"}"#)) { response in
                #expect(response.status == .badRequest || response.status == .unprocessableContent)
                #expect(String(buffer: response.body).contains("message"))
            }
            try await client.execute(uri: "/v1/faults/\(ruleID)", method: .delete) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/v1/faults/\(ruleID)", method: .delete) { response in
                #expect(response.status == .notFound)
                #expect(String(buffer: response.body).contains("no fault rule \(ruleID)"))
            }
            #expect(faults.count == 0)
        }
    }

    /// Only the registration route of virtual tokens may have its larger body.
    @Test func theLargerBodyIsTheVirtualTokenRegistrationsAlone() {
        #expect(VirtualDeviceRoutes.isRegistration("/v1/apps/com.example.demo/virtual-tokens"))
        for path in ["/v1/faults/virtual-tokens", "/v1/apps/com.example.demo/x/virtual-tokens", "/v1/apps//virtual-tokens", "/x/v1/apps/a/virtual-tokens",
            "/v1/apps/com.example.demo/virtual-tokens/00ff"] {
            #expect(!VirtualDeviceRoutes.isRegistration(path), "\(path)")
        }
    }

    /// One node's scope: its rules in memory, no other node's devices.
    @Test func oneNodesScopeIsItsOwnState() async throws {
        let faults = FaultInjector()
        let inbox = NotificationInbox(capacity: 10, maxAge: 60, clock: ManualWallClock(Self.now))
        let scope = AdminScope(cluster: nil, faults: faults, inbox: inbox)
        #expect(scope.node == nil)
        #expect(scope.remoteDevices().isEmpty)
        _ = try await scope.faults.addFault(match: FaultMatch(), action: .delay(milliseconds: 5), count: nil, until: nil, now: Self.now)
        #expect(faults.count == 1)
        try await scope.clearInbox()
    }
}
