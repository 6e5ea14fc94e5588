import CourierCore
import CourierPKI
import CourierPostgres
import CourierSQLite
import Crypto
import Foundation
import Logging

/// A file Courier wrote or found, for the report a command prints.
public struct ProvisionedFile: Sendable, Hashable {
    public var what: String
    public var path: String
    /// True when this call wrote it, false when it was there already.
    public var created: Bool
}

/// Provisioning over one data directory: the CA and its files, the token
/// keys, and the store's teams, apps, keys, certificates and devices.
/// `courier pki` and `courier serve` both work through it.
public final class Provisioner: Sendable {
    public let configuration: CourierConfiguration
    public let store: any Store
    /// The store's coordination of several nodes, when it has it (PostgreSQL).
    public let coordination: (any NodeCoordination)?
    /// Closes the store this provisioner opened.
    private let closeStore: @Sendable () async throws -> Void
    let clock: any WallClock

    private init(
        configuration: CourierConfiguration, store: any Store, coordination: (any NodeCoordination)? = nil, clock: any WallClock,
        closeStore: @escaping @Sendable () async throws -> Void
    ) {
        self.configuration = configuration
        self.store = store
        self.coordination = coordination
        self.closeStore = closeStore
        self.clock = clock
    }

    /// Opens the data directory (creating it) and the configured store:
    /// the SQLite file in it, or PostgreSQL. `wrapStore` puts a layer
    /// around the store (tests inject failures with it).
    public static func open(
        configuration: CourierConfiguration, clock: any WallClock = SystemWallClock(), wrapStore: (@Sendable (any Store) -> any Store)? = nil,
        logger: Logger
    ) async throws -> Provisioner {
        let directory = configuration.dataDirectory
        var isFolder: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: directory, isDirectory: &isFolder)
        if exists, !isFolder.boolValue { throw PKIError(.badFile, "the data directory \(directory) is a file, not a folder: give --data another path") }
        do {
            try Files.createDirectory(directory)
            try Files.createDirectory(configuration.resolve(configuration.paths.pki))
        } catch {
            // The system's reason in a few words ("Permission denied"), not Foundation's sentence.
            let reason = Files.whyNotCreated(configuration.resolve(configuration.paths.pki)) ?? error.localizedDescription
            throw PKIError(
                .badFile,
                exists
                    ? "cannot use the data directory \(directory): \(reason) (it must be this user's to read and write)"
                    : "cannot create the data directory \(directory): \(reason)")
        }
        switch configuration.store.kind {
        case .sqlite:
            // The database holds payloads: its owner's only, from its first byte.
            let database = configuration.resolve(configuration.paths.database)
            try Files.restrict(database, logger: logger)
            let store = try await SQLiteStore.open(path: database, logger: logger)
            return Provisioner(configuration: configuration, store: wrapStore?(store) ?? store, clock: clock) { try await store.close() }
        case .postgresql:
            let store = try await PostgresStore.open(try configuration.postgresSettings(), logger: logger)
            return Provisioner(configuration: configuration, store: wrapStore?(store) ?? store, coordination: store, clock: clock) { await store.close() }
        }
    }

    public func close() async throws {
        try await closeStore()
    }

    // MARK: Paths

    public var pkiDirectory: String { configuration.resolve(configuration.paths.pki) }
    public var caCertificatePath: String { pkiDirectory + "/ca.pem" }
    public var caKeyPath: String { pkiDirectory + "/ca-key.pem" }
    public var serverCertificatePath: String { pkiDirectory + "/server.pem" }
    public var serverKeyPath: String { pkiDirectory + "/server-key.pem" }
    public func tokenKeyPath(_ environment: Environment) -> String { pkiDirectory + "/token-key-\(environment.rawValue).key" }

    // MARK: Certificate authority

    /// The CA of this data directory; an error naming the missing file when
    /// there is none yet.
    public func authority() throws -> CertificateAuthority {
        guard let certificate = Files.read(caCertificatePath), let key = Files.read(caKeyPath) else {
            throw PKIError(.notFound, "no CA in \(pkiDirectory): run 'courier pki ca' or 'courier serve' first")
        }
        return try CertificateAuthority(certificatePEM: certificate, keyPEM: key)
    }

    /// Creates the CA unless one exists (or replaces it with `force`).
    public func createAuthority(force: Bool = false) async throws -> [ProvisionedFile] {
        if !force, Files.exists(caCertificatePath) {
            return [
                ProvisionedFile(what: "CA certificate", path: caCertificatePath, created: false),
                ProvisionedFile(what: "CA key", path: caKeyPath, created: false),
            ]
        }
        let issued = try CertificateAuthority.create(now: clock.now())
        try Files.write(issued.privateKeyPEM, to: caKeyPath, secret: true)
        try Files.write(try issued.certificatePEM, to: caCertificatePath)
        try await store.addCertificate(record(issued, kind: .authority))
        return [
            ProvisionedFile(what: "CA certificate", path: caCertificatePath, created: true),
            ProvisionedFile(what: "CA key", path: caKeyPath, created: true),
        ]
    }

    /// Issues a TLS server certificate and writes it (and its key) to
    /// `certificatePath` and `keyPath`.
    public func issueServerCertificate(dnsNames: [String], ipAddresses: [String], certificatePath: String, keyPath: String) async throws
        -> [ProvisionedFile]
    {
        let authority = try authority()
        let issued = try authority.issueServerCertificate(dnsNames: dnsNames, ipAddresses: ipAddresses, now: clock.now())
        try Files.write(issued.privateKeyPEM, to: keyPath, secret: true)
        try Files.write(try issued.certificatePEM + (try authority.certificatePEM), to: certificatePath)
        try await store.addCertificate(record(issued, kind: .server))
        return [
            ProvisionedFile(what: "server certificate (with the CA after it)", path: certificatePath, created: true),
            ProvisionedFile(what: "server key", path: keyPath, created: true),
        ]
    }

    // MARK: Token keys

    /// Creates the environment's device-token key unless it exists.
    public func createTokenKey(_ environment: Environment) throws -> ProvisionedFile {
        let path = tokenKeyPath(environment)
        if Files.exists(path) { return ProvisionedFile(what: "\(environment.rawValue) token key", path: path, created: false) }
        let key = SymmetricKey(size: .bits256)
        let text = key.withUnsafeBytes { Data($0).base64EncodedString() } + "\n"
        try Files.write(text, to: path, secret: true)
        return ProvisionedFile(what: "\(environment.rawValue) token key", path: path, created: true)
    }

    /// The environment's token codec.
    public func tokenCodec(_ environment: Environment) throws -> DeviceTokenCodec {
        let path = tokenKeyPath(environment)
        guard let text = Files.read(path) else {
            throw PKIError(.notFound, "no \(environment.rawValue) token key at \(path): run 'courier serve' once to create it")
        }
        guard let bytes = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), bytes.count == 32 else {
            throw PKIError(.badFile, "\(path) does not hold a base64 32-byte key")
        }
        return try DeviceTokenCodec(secret: SymmetricKey(data: bytes), environment: environment, length: configuration.limits.tokenLength)
    }

    // MARK: Teams and apps

    public func createTeam(id: String, name: String) async throws -> Team {
        guard Identifiers.isTenCharacterID(id) else { throw PKIError(.invalidArgument, "team id '\(id)' is not ten characters A-Z, 0-9") }
        guard !name.isEmpty else { throw PKIError(.invalidArgument, "the team name is empty") }
        let team = Team(id: id, name: name, createdAt: clock.now())
        do {
            try await store.createTeam(team)
        } catch let error as StoreError where error.code == .duplicate {
            throw PKIError(.alreadyExists, "team \(id) exists already")
        }
        return team
    }

    public func createApp(bundleID: String, teamID: String, kinds: Set<TopicKind> = Set(TopicKind.allCases)) async throws -> App {
        guard Identifiers.isBundleID(bundleID) else { throw PKIError(.invalidArgument, "'\(bundleID)' is not a bundle id") }
        // A topic names its kind by its suffix: a bundle id ending in one
        // would read as a topic of another app (`com.a.voip` as `com.a`'s).
        let parsed = Topic(bundleID)
        guard parsed.kind == .app else {
            throw PKIError(.invalidArgument, "'\(bundleID)' ends in '\(parsed.kind.suffix)', which names the \(parsed.kind.rawValue) topic of \(parsed.bundleID): choose another bundle id")
        }
        guard try await store.team(id: teamID) != nil else { throw PKIError(.notFound, "team \(teamID) does not exist") }
        let app = App(bundleID: bundleID, teamID: teamID, topicKinds: kinds, createdAt: clock.now())
        do {
            try await store.createApp(app)
        } catch let error as StoreError where error.code == .duplicate {
            throw PKIError(.alreadyExists, "app \(bundleID) exists already")
        }
        return app
    }

    // MARK: Provider credentials

    /// A provider certificate as issued: its record, the certificate and
    /// its private key (PEM). The key is not kept: whoever asked keeps it.
    public struct IssuedProviderCertificate: Sendable {
        public var record: CertificateRecord
        public var certificatePEM: String
        public var keyPEM: String
    }

    /// Issues a provider certificate for an app (`courier pki provider-cert`
    /// and the admin API).
    public func issueProviderCertificate(
        bundleID: String, environments: Set<Environment>, layout: CertificateAuthority.TopicsLayout = .apple
    ) async throws -> IssuedProviderCertificate {
        guard !environments.isEmpty else { throw PKIError(.invalidArgument, "a provider certificate needs an environment: production, sandbox or both") }
        guard let app = try await store.app(bundleID: bundleID) else {
            throw PKIError(.notFound, "app \(bundleID) does not exist: create it first")
        }
        guard let team = try await store.team(id: app.teamID) else { throw PKIError(.notFound, "team \(app.teamID) does not exist") }
        let issued = try authority().issueProviderCertificate(
            bundleID: bundleID, teamID: team.id, teamName: team.name, topics: app.topics.filter(\.kind.allowsCertificates), environments: environments,
            now: clock.now(), layout: layout)
        let record = try record(issued, kind: .provider, teamID: team.id, bundleID: bundleID, environments: environments)
        try await store.addCertificate(record)
        return IssuedProviderCertificate(record: record, certificatePEM: record.pem, keyPEM: issued.privateKeyPEM)
    }

    /// Issues a provider certificate for an app and writes the certificate
    /// and key into `directory` as `<bundle>.pem` and `<bundle>-key.pem`.
    public func issueProviderCertificate(
        bundleID: String, environments: Set<Environment>, directory: String, layout: CertificateAuthority.TopicsLayout = .apple
    ) async throws -> (info: CertificateRecord, files: [ProvisionedFile]) {
        let issued = try await issueProviderCertificate(bundleID: bundleID, environments: environments, layout: layout)
        let certificatePath = directory + "/\(bundleID).pem"
        let keyPath = directory + "/\(bundleID)-key.pem"
        try Files.write(issued.keyPEM, to: keyPath, secret: true)
        try Files.write(issued.certificatePEM, to: certificatePath)
        return (
            issued.record,
            [
                ProvisionedFile(what: "provider certificate for \(bundleID) (serial \(issued.record.serial))", path: certificatePath, created: true),
                ProvisionedFile(what: "provider key for \(bundleID)", path: keyPath, created: true),
            ]
        )
    }

    /// An auth key as created: its record and the `.p8` (PKCS#8 PEM), which
    /// Courier does not keep — it is handed over once.
    public struct CreatedAuthKey: Sendable {
        public var record: AuthKeyRecord
        public var p8: String
        /// `AuthKey_<KEYID>.p8`, as Apple names the download.
        public var fileName: String
    }

    /// Creates an auth key for a team (`courier pki auth-key` and the admin API).
    public func createAuthKey(teamID: String, scope: AuthKeyScope = AuthKeyScope()) async throws -> CreatedAuthKey {
        guard try await store.team(id: teamID) != nil else { throw PKIError(.notFound, "team \(teamID) does not exist") }
        try await check(scope, teamID: teamID)
        let key = AuthKey.generate()
        let record = AuthKeyRecord(
            keyID: key.keyID, teamID: teamID, publicKey: key.publicKeyX963, createdAt: clock.now(), environments: scope.environments,
            bundleIDs: scope.bundleIDs)
        try await store.addAuthKey(record)
        return CreatedAuthKey(record: record, p8: key.p8PEM, fileName: key.fileName)
    }

    /// Takes a team's existing auth key — the `.p8` Apple gave it, with its
    /// key id — so that provider code keeps its key file and key id against
    /// Courier. Only the public key is kept.
    public func importAuthKey(teamID: String, keyID: String, p8: String, scope: AuthKeyScope = AuthKeyScope()) async throws -> AuthKeyRecord {
        guard try await store.team(id: teamID) != nil else { throw PKIError(.notFound, "team \(teamID) does not exist") }
        try await check(scope, teamID: teamID)
        let key: AuthKey
        do {
            key = try AuthKey(keyID: keyID, p8PEM: p8)
        } catch let error as PKIError where error.code == .badFile {
            throw PKIError(.invalidArgument, "the key is not a .p8 (a PEM P-256 private key)")
        }
        guard try await store.authKey(id: keyID) == nil else { throw PKIError(.alreadyExists, "auth key \(keyID) exists already") }
        let record = AuthKeyRecord(
            keyID: key.keyID, teamID: teamID, publicKey: key.publicKeyX963, createdAt: clock.now(), environments: scope.environments,
            bundleIDs: scope.bundleIDs)
        do {
            try await store.addAuthKey(record)
        } catch let error as StoreError where error.code == .duplicate {
            throw PKIError(.alreadyExists, "auth key \(keyID) exists already")
        }
        return record
    }

    /// What an auth key may be used for (docs/protocol.md, "Key
    /// scoping"): its environments (default both, as keys were before
    /// Apple's team-scoped keys), and for a topic-specific key the apps of
    /// its team it pushes to (nil: a team-scoped key, every app).
    public struct AuthKeyScope: Sendable, Hashable {
        public var environments: Set<Environment>
        public var bundleIDs: Set<String>?

        public init(environments: Set<Environment> = Set(Environment.allCases), bundleIDs: Set<String>? = nil) {
            self.environments = environments
            self.bundleIDs = bundleIDs
        }
    }

    private func check(_ scope: AuthKeyScope, teamID: String) async throws {
        guard !scope.environments.isEmpty else { throw PKIError(.invalidArgument, "an auth key needs an environment: production, sandbox or both") }
        guard let bundleIDs = scope.bundleIDs else { return }
        guard !bundleIDs.isEmpty else { throw PKIError(.invalidArgument, "a topic-specific key needs at least one app") }
        for bundleID in bundleIDs.sorted() where try await store.app(bundleID: bundleID)?.teamID != teamID {
            // The request's content, not the team, is what is wrong: 422, not 404.
            throw PKIError(.invalidArgument, "app \(bundleID) is not an app of team \(teamID)")
        }
    }

    /// Creates an auth key for a team and writes `AuthKey_<KEYID>.p8` into
    /// `directory`.
    public func createAuthKey(teamID: String, scope: AuthKeyScope = AuthKeyScope(), directory: String) async throws -> (key: AuthKeyRecord, file: ProvisionedFile) {
        let created = try await createAuthKey(teamID: teamID, scope: scope)
        let path = directory + "/" + created.fileName
        try Files.write(created.p8, to: path, secret: true)
        return (created.record, ProvisionedFile(what: "auth key \(created.record.keyID) of team \(teamID)", path: path, created: true))
    }

    // MARK: Devices

    /// What a device needs to connect: its certificate and key, the CA, and
    /// its `identity.json` (PEM and JSON). The key is not kept.
    public struct DeviceIdentityBundle: Sendable {
        public var device: Device
        public var certificatePEM: String
        public var keyPEM: String
        public var caPEM: String
        public var identity: DeviceIdentityFile
    }

    /// Activates a device: a new device id and its certificate
    /// (`courier pki device` and the admin API).
    public func issueDeviceIdentity() async throws -> DeviceIdentityBundle {
        var generator = SystemRandomNumberGenerator()
        let deviceID = generator.next() as UInt64
        let authority = try authority()
        let issued = try authority.issueDeviceCertificate(deviceID: deviceID, now: clock.now())
        let record = try record(issued, kind: .device, deviceID: deviceID)
        try await store.addCertificate(record)
        let device = Device(id: deviceID, certificateSerial: record.serial, generation: 1, createdAt: clock.now())
        try await store.createDevice(device)
        let identity = DeviceIdentityFile(
            deviceID: String(deviceID, radix: 16), generation: 1, host: "localhost",
            productionPort: configuration.network.production.device, sandboxPort: configuration.network.sandbox.device, tokens: [:])
        return DeviceIdentityBundle(
            device: device, certificatePEM: record.pem, keyPEM: issued.privateKeyPEM, caPEM: try authority.certificatePEM, identity: identity)
    }

    /// Activates a device and writes its identity into `directory`:
    /// `cert.pem`, `key.pem`, `ca.pem` and `identity.json`.
    public func issueDeviceIdentity(directory: String) async throws -> (device: Device, files: [ProvisionedFile]) {
        let bundle = try await issueDeviceIdentity()
        try Files.write(bundle.caPEM, to: directory + "/ca.pem")
        try Files.write(bundle.keyPEM, to: directory + "/key.pem", secret: true)
        try Files.write(bundle.certificatePEM, to: directory + "/cert.pem")
        try Files.write(String(decoding: try bundle.identity.encoded(), as: UTF8.self), to: directory + "/identity.json")
        return (
            bundle.device,
            [
                ProvisionedFile(what: "device certificate", path: directory + "/cert.pem", created: true),
                ProvisionedFile(what: "device key", path: directory + "/key.pem", created: true),
                ProvisionedFile(what: "CA certificate", path: directory + "/ca.pem", created: true),
                ProvisionedFile(what: "device identity", path: directory + "/identity.json", created: true),
            ]
        )
    }

    // MARK: Listing

    /// Every team with its apps and auth keys (`courier pki list` and the admin API).
    public func inventory() async throws -> [(team: Team, apps: [App], keys: [AuthKeyRecord])] {
        var teams: [(team: Team, apps: [App], keys: [AuthKeyRecord])] = []
        for team in try await store.teams() {
            teams.append((team, try await store.apps(teamID: team.id), try await store.authKeys(teamID: team.id)))
        }
        return teams
    }

    /// The certificates Courier issued, of one kind or all.
    public func certificates(kind: CertificateKind?) async throws -> [CertificateRecord] {
        try await store.certificates(kind: kind)
    }

    // MARK: Revocation

    public func revokeCertificate(serial: String) async throws {
        let normalized = serial.lowercased().replacingOccurrences(of: ":", with: "")
        // Any hex digits (an odd count is no serial Courier issued: not found).
        let isHex = !normalized.isEmpty && normalized.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
        guard isHex else { throw PKIError(.invalidArgument, "serial '\(serial)' is not hexadecimal") }
        guard let record = try await store.certificate(serial: normalized) else {
            throw PKIError(.notFound, "no certificate with serial \(normalized)")
        }
        guard record.kind != .authority else { throw PKIError(.notAllowed, "the CA cannot be revoked; make a new one with 'courier pki ca --force'") }
        guard try await store.revokeCertificate(serial: normalized, at: clock.now()) else {
            throw PKIError(.alreadyExists, "certificate \(normalized) is revoked already")
        }
    }

    public func revokeAuthKey(keyID: String) async throws {
        guard try await store.authKey(id: keyID) != nil else { throw PKIError(.notFound, "no auth key \(keyID)") }
        guard try await store.revokeAuthKey(id: keyID, at: clock.now()) else {
            throw PKIError(.alreadyExists, "auth key \(keyID) is revoked already")
        }
    }

    // MARK: Helpers

    private func record(
        _ issued: IssuedCertificate, kind: CertificateKind, teamID: String? = nil, bundleID: String? = nil, deviceID: UInt64? = nil,
        environments: Set<Environment> = []
    ) throws -> CertificateRecord {
        CertificateRecord(
            serial: issued.serialHex, kind: kind, subject: issued.certificate.subject.description, teamID: teamID, bundleID: bundleID,
            deviceID: deviceID, environments: environments, notAfter: issued.certificate.notValidAfter, createdAt: clock.now(),
            pem: try issued.certificatePEM)
    }
}

/// Small file helpers with one-line errors.
enum Files {
    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    static func read(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Makes a directory (and those above it that are missing) that only
    /// its owner may enter: the data directory holds keys and payloads.
    static func createDirectory(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// Why `path` could not be made, as the system says it ("Permission
    /// denied", "Not a directory"): the first folder of it that is missing,
    /// made again with mkdir for its errno (and removed if it is made).
    static func whyNotCreated(_ path: String) -> String? {
        var missing = (path as NSString).standardizingPath
        while true {
            let parent = (missing as NSString).deletingLastPathComponent
            if parent.isEmpty || parent == missing || FileManager.default.fileExists(atPath: parent) { break }
            missing = parent
        }
        guard !FileManager.default.fileExists(atPath: missing) else { return nil }
        if mkdir(missing, 0o700) == 0 {
            rmdir(missing)
            return nil
        }
        return String(cString: strerror(errno))
    }

    /// Writes `text`; a secret (a private key) is readable by its owner
    /// only from the moment the file exists (created with mode 0600, never
    /// widened), and a missing directory is made for its owner only.
    static func write(_ text: String, to path: String, secret: Bool = false) throws {
        let directory = (path as NSString).deletingLastPathComponent
        do {
            if !directory.isEmpty { try createDirectory(directory) }
        } catch {
            throw PKIError(.badFile, "cannot create directory \(directory)")
        }
        if exists(path) { try? FileManager.default.removeItem(atPath: path) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, secret ? 0o600 : 0o644)
        guard descriptor >= 0 else { throw PKIError(.badFile, "cannot write \(path): \(String(cString: strerror(errno)))") }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
        } catch {
            throw PKIError(.badFile, "cannot write \(path): \(error.localizedDescription)")
        }
    }

    /// Makes the database file (and its journal files, which SQLite gives
    /// the database's mode) its owner's only: created empty with mode 0600
    /// when missing, narrowed when a group or others could read it.
    static func restrict(_ database: String, logger: Logger) throws {
        if !exists(database) {
            let descriptor = open(database, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw PKIError(.badFile, "cannot create \(database): \(String(cString: strerror(errno)))") }
            close(descriptor)
        }
        for path in [database, database + "-wal", database + "-shm"] {
            guard let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int, mode & 0o077 != 0 else { continue }
            try FileManager.default.setAttributes([.posixPermissions: mode & 0o700], ofItemAtPath: path)
            logger.notice("made the database readable by its owner only", metadata: ["courier.path": "\(path)"])
        }
    }
}

extension CourierConfiguration {
    /// The PostgreSQL store's settings, with the password from its
    /// environment variable when that is set, else from its file (never
    /// printed: errors name only where it was looked for).
    public func postgresSettings(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> PostgresSettings {
        var password: String?
        if !store.passwordEnvironment.isEmpty, let value = environment[store.passwordEnvironment] {
            password = value
        } else if !store.passwordFile.isEmpty {
            let path = resolve(store.passwordFile)
            guard let text = Files.read(path) else {
                throw ConfigurationError("cannot read the PostgreSQL password file \(path) ('store.passwordFile')")
            }
            password = String(text.prefix { !$0.isNewline })
        } else if !store.passwordEnvironment.isEmpty {
            throw ConfigurationError("the environment variable \(store.passwordEnvironment) ('store.passwordEnvironment') is not set")
        }
        return PostgresSettings(
            host: store.host, port: store.port, database: store.database, user: store.user, password: password, connections: store.connections,
            tls: store.tls == "require" ? .required(caFile: store.caFile.isEmpty ? nil : resolve(store.caFile)) : .disabled)
    }
}

extension CourierConfiguration {
    /// The store, for the banner: the SQLite file, or PostgreSQL's address (never the password).
    public var storeDescription: String {
        switch store.kind {
        case .sqlite: "SQLite \(resolve(paths.database))"
        case .postgresql:
            "PostgreSQL " + PostgresSettings(host: store.host, port: store.port, database: store.database, user: store.user, password: nil).description
        }
    }
}
