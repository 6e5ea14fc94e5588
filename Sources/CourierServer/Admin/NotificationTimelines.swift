import CourierCore
import Foundation
import Hummingbird

/// A notification's timeline for the admin API: how it came in (the
/// inbox's entries) and what became of it (the delivery log), for one
/// app. An apns-id is the provider's choice, and two teams may choose the
/// same: what one team's push did is never shown as the other's.
///
/// An inbox entry is an app's when its topic is the app's and the team
/// authenticated for its request is the app's team; a delivery-log event
/// carries its app (`DeliveryEvent.app`). Entries of no app (no team
/// was authenticated, or the topic was another team's) are shown only
/// when the id names no app's notification.
struct NotificationTimelines {
    let inbox: NotificationInbox
    let dispatcher: Dispatcher
    /// Each app's team, as looked up (nil: no such app).
    private var teams: [String: String?] = [:]

    init(inbox: NotificationInbox, dispatcher: Dispatcher) {
        self.inbox = inbox
        self.dispatcher = dispatcher
    }

    /// `GET /v1/notifications/{id}`: by apns-id or apns-unique-id, of
    /// `app` (a bundle id), or of the one app the id names.
    mutating func timeline(_ text: String, app: String?) async throws -> Timeline {
        guard let id = UUID(uuidString: text) else { throw HTTPError(.badRequest, message: "'\(text)' is not an apns-id (a UUID)") }
        let log = try await dispatcher.deliveryLog(of: id)
        var received: [(entry: InboxEntry, app: String?)] = []
        for entry in inbox.list(InboxFilter(apnsID: text), limit: 100).entries { received.append((entry, try await self.app(of: entry))) }
        let apps = log.apps.union(received.compactMap(\.app))
        let chosen: String?
        if let app {
            chosen = app
        } else if apps.count > 1 {
            let names = apps.sorted().joined(separator: ", ")
            throw HTTPError(.conflict, message: "\(id.lowercasedString) names notifications of \(apps.count) apps (\(names)): say which with ?app= (courier log --app)")
        } else {
            chosen = apps.first
        }
        let entries = received.filter { $0.app == chosen }.map(\.entry)
        let events = log.events(of: chosen)
        guard !entries.isEmpty || !events.isEmpty else {
            let of = app.map { " of \($0)" } ?? ""
            throw HTTPError(.notFound, message: "no notification \(text.lowercased())\(of) in the inbox or the delivery log")
        }
        // Looked up by its apns-unique-id: its apns-id is the inbox entry's.
        let unique = entries.first { $0.uniqueID == id }
        return Timeline(
            apnsID: unique?.apnsID ?? id.lowercasedString, apnsUniqueID: unique == nil ? nil : id.lowercasedString, app: chosen,
            received: entries.map { InboxEntryJSON($0, dispatcher) }, events: events.map(EventJSON.init))
    }

    /// One inbox entry's timeline: the events under its apns-id of its app.
    mutating func timeline(of entry: InboxEntry) async throws -> Timeline {
        let app = try await self.app(of: entry)
        var events: [DeliveryEvent] = []
        if let id = UUID(uuidString: entry.apnsID) { events = try await dispatcher.deliveryLog(of: id).events(of: app) }
        return Timeline(apnsID: entry.apnsID, app: app, received: [InboxEntryJSON(entry, dispatcher)], events: events.map(EventJSON.init))
    }

    /// The app an inbox entry is of: its topic's, when the team
    /// authenticated for it is that app's team.
    private mutating func app(of entry: InboxEntry) async throws -> String? {
        guard let topic = entry.topic, let team = entry.teamID else { return nil }
        let bundleID = Topic(topic).bundleID
        if teams[bundleID] == nil { teams[bundleID] = .some(try await dispatcher.team(ofApp: bundleID)) }
        return teams[bundleID] == .some(team) ? bundleID : nil
    }
}
