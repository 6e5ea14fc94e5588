import CourierCore
import Foundation

/// The delivery log's events under one apns-id (or apns-unique-id), as
/// read: an apns-id is the provider's choice and two teams may choose the
/// same, so the events are handed out only by app (`NotificationKey`),
/// never all together.
struct NotificationLog: Sendable {
    let id: UUID
    private let events: [DeliveryEvent]

    init(id: UUID, events: [DeliveryEvent]) {
        self.id = id
        self.events = events
    }

    /// The apps with events under the id.
    var apps: Set<String> { Set(Set(events.lazy.compactMap(\.app)).map(\.bundleID)) }

    /// The events of one app's notification, oldest first, and those
    /// written before the log kept apps (which may be any app's); nil:
    /// those alone.
    func events(of bundleID: String?) -> [DeliveryEvent] {
        guard let bundleID else { return events.filter { $0.app == nil } }
        let key = NotificationKey(bundleID: bundleID, id: id)
        return events.filter { $0.isOf(key) }
    }
}
