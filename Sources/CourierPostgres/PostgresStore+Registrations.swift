import CourierCore
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// Devices and their apps' registrations (`RegistrationStore`).
extension PostgresStore {
    public func createDevice(_ device: Device) async throws {
        try await insert(
            "INSERT INTO devices (id, certificate_serial, generation, created_at, last_seen) VALUES ($1, $2, $3, $4, $5)",
            [.device(device.id), .text(device.certificateSerial), .integer(Int(device.generation)), .millis(device.createdAt), .millis(device.lastSeen)],
            what: "device \(device.id)")
    }

    public func device(id: UInt64) async throws -> Device? {
        try await query("SELECT * FROM devices WHERE id = $1", [.device(id)]).first.map(Device.init(row:))
    }

    @discardableResult
    public func setDeviceGeneration(id: UInt64, generation: UInt32) async throws -> [PendingNotification] {
        try await transaction { connection in
            let updated = try await self.query(
                "UPDATE devices SET generation = $1 WHERE id = $2 RETURNING id", [.integer(Int(generation)), .device(id)], on: connection)
            guard !updated.isEmpty else { throw StoreError(.notFound, "device \(id) does not exist") }
            try await self.query("DELETE FROM app_registrations WHERE device_id = $1", [.device(id)], on: connection)
            // Its Live Activity tokens ended with its other tokens.
            try await self.query("DELETE FROM ended_activities WHERE device_id = $1", [.device(id)], on: connection)
            return try await self.takePending(where: "device_id = $1", [.device(id)], on: connection)
        }
    }

    public func markDeviceSeen(id: UInt64, at date: Date) async throws {
        try await query("UPDATE devices SET last_seen = $1 WHERE id = $2", [.millis(date), .device(id)])
    }

    public func register(_ registration: AppRegistration) async throws {
        do {
            try await query(
                """
                INSERT INTO app_registrations (device_id, bundle_id, environment, token, active, registered_at, unregistered_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (device_id, bundle_id, environment) DO UPDATE SET
                    token = excluded.token, active = excluded.active,
                    registered_at = excluded.registered_at, unregistered_at = excluded.unregistered_at
                """,
                [
                    .device(registration.deviceID), .text(registration.bundleID), .text(registration.environment.rawValue),
                    .bytes(registration.token), .integer(registration.active ? 1 : 0), .millis(registration.registeredAt),
                    .millis(registration.unregisteredAt),
                ])
        } catch let error as StoreError where error.code == .notFound {
            throw StoreError(.notFound, "device \(registration.deviceID) does not exist")
        }
    }

    public func registration(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> AppRegistration? {
        try await query(
            "SELECT * FROM app_registrations WHERE device_id = $1 AND bundle_id = $2 AND environment = $3",
            [.device(deviceID), .text(bundleID), .text(environment.rawValue)]
        ).first.map(AppRegistration.init(row:))
    }

    public func registrations(deviceID: UInt64) async throws -> [AppRegistration] {
        try await query("SELECT * FROM app_registrations WHERE device_id = $1 ORDER BY bundle_id, environment", [.device(deviceID)])
            .map(AppRegistration.init(row:))
    }

    public func unregister(deviceID: UInt64, bundleID: String, environment: Environment, at date: Date) async throws -> Bool {
        !(try await query(
            """
            UPDATE app_registrations SET active = 0, unregistered_at = $1
            WHERE device_id = $2 AND bundle_id = $3 AND environment = $4 AND active = 1 RETURNING device_id
            """, [.millis(date), .device(deviceID), .text(bundleID), .text(environment.rawValue)]
        ).isEmpty)
    }

    public func endActivity(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32, at date: Date) async throws -> Bool {
        let key: [Value] = [.device(deviceID), .text(bundleID), .text(environment.rawValue)]
        return try await transaction { connection in
            let inserted = try await self.query(
                """
                INSERT INTO ended_activities (device_id, bundle_id, environment, activity, ended_at) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT DO NOTHING RETURNING activity
                """, key + [.integer(Int(activity)), .millis(date)], on: connection)
            guard !inserted.isEmpty else { return false }
            // The most recent ends only, so that a device cannot grow the table without bound.
            try await self.query(
                """
                DELETE FROM ended_activities WHERE device_id = $1 AND bundle_id = $2 AND environment = $3 AND activity NOT IN (
                    SELECT activity FROM ended_activities WHERE device_id = $1 AND bundle_id = $2 AND environment = $3
                    ORDER BY ended_at DESC, activity DESC LIMIT \(self.endedActivitiesKept))
                """, key, on: connection)
            return true
        }
    }

    public func activityEnd(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32) async throws -> Date? {
        try await query(
            "SELECT ended_at FROM ended_activities WHERE device_id = $1 AND bundle_id = $2 AND environment = $3 AND activity = $4",
            [.device(deviceID), .text(bundleID), .text(environment.rawValue), .integer(Int(activity))]
        ).first.map { try $0.date("ended_at") }
    }
}
