import CourierCore
import CourierPKI
import Foundation
import Hummingbird

/// The inbox over the admin API (docs/admin-api.md, "The inbox", "Delivery
/// log", "Test push"): listed, waited for, streamed, cleared; a
/// notification's timeline, a token's; the console's test push.
struct InboxRoutes {
    let inbox: NotificationInbox
    let dispatcher: Dispatcher
    let scope: AdminScope
    let consoleProvider: ConsoleProvider

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.get("inbox") { [inbox, dispatcher] request, _ in
            let query = try InboxQuery(query(request))
            let (entries, more) = inbox.list(query.filter, after: query.after, limit: query.limit)
            return InboxPage(entries: entries.map { InboxEntryJSON($0, dispatcher) }, more: more, last: inbox.lastSequence)
        }
        api.get("inbox/wait") { [inbox, dispatcher] request, _ in
            let query = try InboxQuery(query(request))
            // Ends when its client goes (its connection closes): nothing
            // waits on for someone who will not read the answer. Watching
            // for that takes the connection's input, so the answer closes
            // the connection, and says so.
            let close: HTTPFields = [.connection: "close"]
            let waited = try? await request.body.consumeWithCancellationOnInboundClose { _ in
                await inbox.wait(for: query.filter, after: query.after, timeout: .seconds(query.timeout))
            }
            guard let entry = waited else {
                throw HTTPError(.notFound, headers: close, message: "no notification matched within \(query.timeout) s")
            }
            return EditedResponse(headers: close, response: InboxEntryJSON(entry, dispatcher))
        }
        api.get("inbox/stream") { [inbox, dispatcher] request, _ in
            try InboxStream.response(request, inbox: inbox, dispatcher: dispatcher)
        }
        api.post("push") { [consoleProvider, inbox] request, context in
            let body = try await request.decode(as: ConsolePushBody.self, context: context)
            let (push, environment) = try body.push()
            do {
                let before = inbox.lastSequence
                let result = try await consoleProvider.send(push, teamID: body.team, environment: environment)
                // The rule that answered, if one did: the push's inbox entry names it (recorded with the answer).
                var fault: String?
                if inbox.isRecording {
                    let entry = await inbox.wait(for: InboxFilter(apnsID: result.apnsID, teamID: body.team), after: before, timeout: .seconds(2))
                    fault = entry?.fault
                }
                return ConsolePushAnswer(result, fault: fault)
            } catch let error where !(error is HTTPError) && !(error is PKIError) {
                // The connection to the HTTP/2 port failed (no team or key problem: those keep their own answer).
                throw HTTPError(.badGateway, message: "the push could not be sent to the HTTP/2 port: \(error)")
            }
        }
        api.delete("inbox") { [inbox, scope] _, _ in
            let cleared = inbox.count
            // With several nodes, every node's inbox.
            try await scope.clearInbox()
            return Cleared(cleared: cleared)
        }
        api.get("notifications/:apnsID") { [inbox, dispatcher] request, context in
            var timelines = NotificationTimelines(inbox: inbox, dispatcher: dispatcher)
            return try await timelines.timeline(try context.parameters.require("apnsID"), app: query(request)["app"])
        }
        api.get("tokens/:token/notifications") { [inbox, dispatcher] request, context in
            let text = try context.parameters.require("token")
            guard let token = Hex.decode(text), !token.isEmpty else { throw HTTPError(.badRequest, message: "'\(text)' is not a device token in hex") }
            let limit = try InboxQuery.integer(query(request), "limit", default: 20, range: 1...100)
            var timelines = NotificationTimelines(inbox: inbox, dispatcher: dispatcher)
            var notifications: [Timeline] = []
            for entry in inbox.recent(token: token, limit: limit) { notifications.append(try await timelines.timeline(of: entry)) }
            return TokenTimelines(token: Hex.encode(token), notifications: notifications)
        }
    }
}
