import CourierCore
import Foundation
import Logging
import ServiceLifecycle

/// Runs the cluster: the subscription to the other nodes' messages and
/// the heartbeat. Placed after the store's writers and before every
/// interface, so that a graceful stop (listeners first) has closed the
/// devices before the node is removed.
struct ClusterService: Service {
    let cluster: Cluster
    let dispatcher: Dispatcher
    let logger: Logger

    func run() async throws {
        let (subscribed, subscribedContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let messages = cluster.coordination.messages(on: cluster.channels) { subscribedContinuation.yield() }
        try await cluster.start()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                // Hand-overs and fault rules are read by tasks of their own: however
                // many messages ask meanwhile, one read follows, and reads never overlap.
                let (handOvers, handOverSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                let (faultReloads, faultSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                let (inboxReads, inboxSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                // A node taken for dead meanwhile: what the others held for its devices goes to them, off the
                // heartbeat (thousands of devices drained one by one must not stop it beating).
                let (drains, drainSignal) = AsyncStream.makeStream(of: [DeviceSession].self)
                group.addTask {
                    for await sessions in drains {
                        for session in sessions { await dispatcher.drain(session) }
                    }
                }
                group.addTask {
                    for await _ in handOvers { await dispatcher.takeHandedOver() }
                }
                group.addTask {
                    for await _ in inboxReads { await cluster.readInbox() }
                }
                if let unshared = cluster.inbox.unsharedEntries {
                    group.addTask {
                        for await _ in unshared {
                            // Stopping: what is left goes with the node's leaving (`Cluster.stop`), whose
                            // writes are not cancelled; taken here, a cancelled write would lose it.
                            if Task.isCancelled { break }
                            await cluster.shareInbox()
                            try? await Task.sleep(for: Cluster.inboxLinger)
                        }
                    }
                }
                group.addTask {
                    for await _ in faultReloads { await cluster.reloadFaults() }
                }
                group.addTask { await cluster.runOutbox() }
                group.addTask {
                    for await message in messages {
                        for action in await cluster.apply(message) {
                            switch action {
                            case .takeHandedOver: handOverSignal.yield()
                            case .reloadFaults: faultSignal.yield()
                            case .readInbox: inboxSignal.yield()
                            default: await dispatcher.perform(action)
                            }
                        }
                    }
                    handOverSignal.finish()
                    faultSignal.finish()
                    inboxSignal.finish()
                    drainSignal.finish()
                }
                group.addTask {
                    // Each time the subscription is in place (at first, and after a lost
                    // connection, when messages may have been lost): the presence, the
                    // fault rules and the hand-overs are read (again), and the cached
                    // registrations forgotten.
                    for await _ in subscribed {
                        do { try await cluster.reload() } catch {
                            logger.error("store failed reading the devices' presence", metadata: ["courier.error": "\(error)"])
                        }
                        dispatcher.registrations.forgetAll()
                        do { try await dispatcher.virtuals.load() } catch {
                            logger.error("store failed reading the virtual tokens", metadata: ["courier.error": "\(error)"])
                        }
                        faultSignal.yield()
                        handOverSignal.yield()
                        inboxSignal.yield()
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(cluster.heartbeatInterval))
                        if Task.isCancelled { break }
                        let recorded = await cluster.beat()
                        if !recorded.isEmpty { drainSignal.yield(recorded) }
                        // What a lost message would have announced is taken at the latest now.
                        handOverSignal.yield()
                        inboxSignal.yield()
                    }
                }
                await group.next()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            subscribedContinuation.finish()
        }
        await cluster.stop()
    }
}
