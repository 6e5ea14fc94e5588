import CourierCore
import Foundation

/// The ready-to-paste push commands `courier serve` prints for the demo
/// app and demo device: one with `courier push`, one with `curl --http2`
/// and a JWT made by openssl exactly as Apple's guide shows it.
public enum DemoCommands {
    /// What the commands need; nil when the demo is off or incomplete.
    public struct Demo: Sendable {
        public var teamID: String
        public var keyID: String
        public var authKeyPath: String
        public var bundleID: String
        public var deviceToken: String
        public var caPath: String
        public var port: Int
    }

    public static func demo(_ application: CourierApplication, port: Int) -> Demo? {
        let report = application.report
        guard let teamID = report.demoTeamID, let keyID = report.demoKeyID, let authKeyPath = report.demoAuthKeyPath, let bundleID = report.demoBundleID,
            let deviceToken = report.demoDeviceToken
        else { return nil }
        return Demo(
            teamID: teamID, keyID: keyID, authKeyPath: authKeyPath, bundleID: bundleID, deviceToken: deviceToken,
            caPath: application.provisioner.caCertificatePath, port: port)
    }

    /// `courier push` over HTTP/2 with the demo team's auth key;
    /// `command` runs courier (`ProgramName.invocation`).
    public static func courierPush(_ demo: Demo, command: String = "courier", payload: String = #"{"aps":{"alert":"Hello from Courier"}}"#) -> String {
        """
        \(command) push --p8 \(quote(demo.authKeyPath)) --key-id \(demo.keyID) --team-id \(demo.teamID) \\
          --topic \(demo.bundleID) --token \(demo.deviceToken) --port \(demo.port) --ca \(quote(demo.caPath)) \\
          --payload \(quote(payload))
        """
    }

    /// A bash script: the provider token made with openssl as Apple's
    /// guide documents it ("Sending Push Notifications Using Command-Line
    /// Tools"), then `curl --http2`.
    public static func curl(_ demo: Demo, payload: String = #"{"aps":{"alert":"Hello from curl"}}"#, host: String = "localhost") -> String {
        """
        TEAM_ID=\(demo.teamID)
        AUTH_KEY_ID=\(demo.keyID)
        TOKEN_KEY_FILE_NAME=\(quote(demo.authKeyPath))
        TOPIC=\(demo.bundleID)
        DEVICE_TOKEN=\(demo.deviceToken)
        APNS_HOST_NAME=\(host):\(demo.port)
        JWT_ISSUE_TIME=$(date +%s)
        JWT_HEADER=$(printf '{ "alg": "ES256", "kid": "%s" }' "${AUTH_KEY_ID}" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
        JWT_CLAIMS=$(printf '{ "iss": "%s", "iat": %d }' "${TEAM_ID}" "${JWT_ISSUE_TIME}" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
        JWT_HEADER_CLAIMS="${JWT_HEADER}.${JWT_CLAIMS}"
        JWT_SIGNED_HEADER_CLAIMS=$(printf "${JWT_HEADER_CLAIMS}" | openssl dgst -binary -sha256 -sign "${TOKEN_KEY_FILE_NAME}" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
        AUTHENTICATION_TOKEN="${JWT_HEADER}.${JWT_CLAIMS}.${JWT_SIGNED_HEADER_CLAIMS}"
        curl -v --cacert \(quote(demo.caPath)) --header "apns-topic: $TOPIC" --header "apns-push-type: alert" --header "authorization: bearer $AUTHENTICATION_TOKEN" --data \(quote(payload)) --http2 https://${APNS_HOST_NAME}/3/device/${DEVICE_TOKEN}
        """
    }

    /// Single quotes for the shell.
    static func quote(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}
