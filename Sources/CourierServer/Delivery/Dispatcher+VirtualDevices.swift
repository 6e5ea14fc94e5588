import CourierCore
import Foundation

/// Virtual devices (docs/virtual-devices.md): what the admin API asks of
/// them. Every change is written to the store first, then taken in here
/// and announced to the other nodes, which read it from the store.
extension Dispatcher {
    /// Why tokens cannot be virtual tokens: the message names the first
    /// such token by its place in the list.
    struct VirtualTokenRefusal: Error {
        var message: String
    }

    /// Registers tokens as the app's virtual devices in the environment,
    /// online: each must be of Apple's length and none a token Courier
    /// issued (in either environment), else nothing is registered. A token
    /// registered already keeps its state. How many were new.
    ///
    /// This node takes in what it wrote without reading it back; the others
    /// read the token, or (several) the app's tokens, again.
    func addVirtualTokens(_ tokens: [[UInt8]], bundleID: String, environment: Environment) async throws -> Int {
        for (index, token) in tokens.enumerated() {
            guard token.count == VirtualToken.length else {
                throw VirtualTokenRefusal(message: "token \(index) has \(token.count) bytes: a device token of Apple's has \(VirtualToken.length) (64 hex digits)")
            }
            if Environment.allCases.contains(where: { device(of: token, in: $0) != nil }) {
                throw VirtualTokenRefusal(message: "token \(index) is one Courier issued to a device: a virtual token cannot be")
            }
        }
        let now = clock.now()
        let added = try await store.addVirtualTokens(
            tokens.map { VirtualToken(environment: environment, bundleID: bundleID, token: $0, registeredAt: now) })
        // What was added is online and installed; one there already kept its state, as kept here.
        virtuals.keep(added.map { VirtualToken(environment: environment, bundleID: bundleID, token: $0, registeredAt: now) })
        announce(VirtualDevices.AppKey(environment: environment, bundleID: bundleID), tokens)
        return added.count
    }

    /// How many virtual tokens the app has in the environment.
    func virtualTokenCount(bundleID: String, environment: Environment) async throws -> Int {
        try await store.virtualTokenCount(environment: environment, bundleID: bundleID)
    }

    /// The app's virtual tokens in the environment, in token order after
    /// `after`, at most `limit`; with how many it has.
    func virtualTokens(bundleID: String, environment: Environment, after: [UInt8]?, limit: Int) async throws -> (tokens: [VirtualToken], total: Int) {
        let tokens = try await store.virtualTokens(environment: environment, bundleID: bundleID, after: after, limit: limit)
        return (tokens, try await store.virtualTokenCount(environment: environment, bundleID: bundleID))
    }

    /// Sets a virtual token offline or online, and (`uninstalled`) its
    /// uninstall time or (`.some(nil)`) installs it again. Set online, it
    /// takes what was held for it. Nil when the app has no such token;
    /// with nothing to change, the token as it is.
    func changeVirtualToken(
        _ token: [UInt8], bundleID: String, environment: Environment, offline: Bool?, uninstalled: Date??
    ) async throws -> VirtualToken? {
        // Nothing to change: the token as it is.
        if offline == nil, uninstalled == nil { return try await store.virtualToken(environment: environment, bundleID: bundleID, token: token) }
        guard
            let changed = try await store.updateVirtualToken(
                environment: environment, bundleID: bundleID, token: token, offline: offline, uninstalled: uninstalled)
        else { return nil }
        virtuals.keep([changed])
        announce(VirtualDevices.AppKey(environment: environment, bundleID: bundleID), [token])
        if offline == false {
            await takeHeld(ofVirtual: token, bundleID: bundleID, environment: environment, delivered: changed.uninstalledAt == nil)
        }
        return changed
    }

    /// Removes virtual tokens of the app (every one when nil); what was
    /// held for them is dropped. How many were removed.
    func removeVirtualTokens(_ tokens: [[UInt8]]?, bundleID: String, environment: Environment) async throws -> Int {
        // What is held is held for a token while it is offline (set online, it is taken).
        var removing = tokens ?? []
        if tokens == nil {
            removing = try await store.virtualTokens(environment: environment, bundleID: bundleID, after: nil, limit: nil).filter(\.offline).map(\.token)
        }
        let removed = try await store.removeVirtualTokens(environment: environment, bundleID: bundleID, tokens: tokens)
        let app = VirtualDevices.AppKey(environment: environment, bundleID: bundleID)
        virtuals.forget(tokens, of: app)
        announce(app, tokens)
        for token in removing { await takeHeld(ofVirtual: token, bundleID: bundleID, environment: environment, delivered: false) }
        return removed
    }

    /// Tells the other nodes that the app's virtual tokens changed in the
    /// store: one token, or (several, or every one: nil) the app's.
    private func announce(_ app: VirtualDevices.AppKey, _ tokens: [[UInt8]]?) {
        cluster?.virtualTokensChanged(app, token: tokens?.count == 1 ? tokens?[0] : nil)
    }

    /// Takes what is held for a virtual device out of the store:
    /// `delivered` to it (what expired meanwhile expires), or dropped
    /// (its token was removed, or it is uninstalled).
    func takeHeld(ofVirtual token: [UInt8], bundleID: String, environment: Environment, delivered: Bool) async {
        let deviceID = VirtualDevices.deviceID(environment: environment, bundleID: bundleID, token: token)
        do {
            let held = try await store.pending(deviceID: deviceID, environment: environment).filter { $0.bundleID == bundleID }
            guard !held.isEmpty else { return }
            let removed = try await store.removePending(held.map(PendingReference.init))
            let now = clock.now()
            var events: [DeliveryEvent] = []
            for (pending, wasHeld) in zip(held, removed) where wasHeld {
                let app = AppNumber(bundleID)
                if !delivered {
                    events.append(DeliveryEvent(pending.notification, of: app, .discarded, at: now, detail: "its virtual device was removed or uninstalled"))
                } else if let expired = rules.onConnect(held: pending.notification, of: app, now: now) {
                    events.append(expired)
                } else {
                    events.append(DeliveryEvent(pending.notification, of: app, .deliveredToVirtualDevice, at: now))
                }
            }
            log.append(events)
        } catch {
            logger.error("store failed taking what is held for a virtual device", metadata: ["courier.error": "\(error)"])
        }
    }

    /// A virtual token of the topic's app marked uninstalled at `date` by
    /// `POST /v1/tokens/{token}/unregister`; false when it is none, or is
    /// uninstalled already.
    func markVirtualUninstalled(token: [UInt8], bundleID: String, environment: Environment, at date: Date) async throws -> Bool {
        guard virtuals.device(of: token, environment: environment, bundleID: bundleID) != nil,
            let current = try await store.virtualToken(environment: environment, bundleID: bundleID, token: token), current.uninstalledAt == nil
        else { return false }
        return try await changeVirtualToken(token, bundleID: bundleID, environment: environment, offline: nil, uninstalled: .some(date)) != nil
    }
}
